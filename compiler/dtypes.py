"""How kernels hold and compute each dtype: the GLSL type arithmetic runs in, the buffer's element
type, and how an element is read, packed and written as a literal.

2- to 16-bit elements live packed in 32-bit words (`uint` buffers): a kernel reads one with
bitfieldExtract (sign-extending signed types) or unpackHalf2x16, and writes whole words only, so
the kernels that move and combine elements (elementwise, gather, transpose, slice...) need no
optional 8/16-bit storage feature. The compute kernels (matmul, conv, pooling, softmax,
normalization, reductions: `kernel_types`) read and write float16 natively instead, as
float16_t / f16vec4 buffers (GL_EXT_shader_16bit_storage: storageBuffer16BitAccess), converting
to float32 on load and back on store: `FLOAT16_NATIVE`. Both forms are the same bytes, so a
packed kernel's output feeds a native one and back. float16 computes in float32; bool is one
byte (0 or 1) per element, packed like int8, and a GLSL bool in kernels. The 64-bit
types need the device features shaderInt64 / shaderFloat64, which the bundle records from the
SPIR-V capabilities its modules declare.

The low-precision types of format 1.2 (bundles/dtypes.py) pack the same way: bfloat16 two to a
word, the float8 types and 8-bit e8m0 four, int4 / uint4 / float4 eight, int2 / uint2 sixteen.
Integers compute in int / uint; the floats compute in float32, converted from and to their bits
by the GLSL functions of templates/low_precision.glsl (`decode`, `encode`), which a kernel
holding such a type includes (`low_precision`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bundles.dtypes import DTYPES

INT64_EXTENSION = "GL_EXT_shader_explicit_arithmetic_types_int64"
# Cast's round_mode (opset 24+, for float8e8m0) -> to_float8_e8m0fnu's argument.
E8M0_ROUND_MODES = {"up": 0, "down": 1, "nearest": 2}


def float_literal(x: float) -> str:
    """A GLSL literal that rounds to exactly the float32 value."""
    x = np.float32(x)
    if np.isinf(x):
        return "uintBitsToFloat(0x7f800000u)" if x > 0 else "uintBitsToFloat(0xff800000u)"
    if np.isnan(x):
        return "uintBitsToFloat(0x7fc00000u)"
    text = f"{float(x):.9g}"
    return text if any(c in text for c in ".e") else text + ".0"


@dataclass(frozen=True)
class ScalarType:
    name: str       # numpy dtype name
    glsl: str       # the GLSL type values are computed in
    kind: str       # "float", "int", "uint" or "bool"
    bits: int       # bits per element in memory
    # float16 held as float16_t in buffers (16-bit storage) instead of packed in uint words.
    native: bool = False

    @property
    def packed(self) -> bool:
        return self.bits < 32 and not self.native

    @property
    def per_word(self) -> int:
        """Elements a kernel packs in each 32-bit word it writes: 1 where it addresses elements one
        by one (32- and 64-bit types, and float16 held natively as float16_t)."""
        return 32 // self.bits if self.packed else 1

    @property
    def low_precision(self) -> bool:
        """A format 1.2 type: its kernels include templates/low_precision.glsl."""
        return DTYPES[self.name].since >= (1, 2)

    @property
    def coded(self) -> bool:
        """A float type whose bits convert through templates/low_precision.glsl (bfloat16, the
        float8 and float4 types): `decode` and `encode`."""
        return self.low_precision and self.kind == "float"

    def decode(self, bits: str) -> str:
        """The float32 value of a coded type's element whose bits are the uint `bits`."""
        return f"from_{self.name}({bits})"

    def encode(self, value: str, saturate: bool = False, round_mode: str = "up") -> str:
        """The bits (a uint) of float `value` converted to a coded type as ONNX's Cast does:
        round to nearest even; `saturate` clamps out-of-range values to the largest finite one
        (float8 types; without it they overflow to inf or NaN); `round_mode` is float8e8m0's."""
        flag = "true" if saturate else "false"
        if self.name == "float8_e8m0fnu":
            return f"to_{self.name}({value}, {flag}, {E8M0_ROUND_MODES[round_mode]})"
        return f"to_{self.name}({value}, {flag})"

    @property
    def storage(self) -> str:
        """The element type of a buffer holding this dtype."""
        if self.native:
            return "float16_t"
        return "uint" if self.packed else self.glsl

    @property
    def vec4(self) -> str | None:
        """The GLSL 4-vector a buffer of this dtype is read and written as, four elements at a
        time; None for the packed 8/16-bit types (four float16 are two uint words), whose kernels
        must not take vec4 paths."""
        if self.packed:
            return None
        if self.native:
            return "f16vec4"
        return {"float": "vec4", "double": "dvec4", "int": "ivec4", "uint": "uvec4",
                "int64_t": "i64vec4", "uint64_t": "u64vec4"}[self.glsl]

    def texel_format(self, per_texel: int) -> str | None:
        """The uniform-texel-buffer format holding `per_texel` (1 or 4) elements of this dtype in
        one texel, None where no kernel reads this dtype through texel buffers yet (kernels then
        take their storage-buffer path). bundles/manifest.py TEXEL_BYTES lists the formats."""
        return _TEXEL_FORMATS.get((self.name, per_texel))

    @property
    def accumulator(self) -> "ScalarType":
        """The type sums and products of this dtype accumulate in: float16 in float32 (see
        docs/ARCHITECTURE.md, The IR), every other dtype in itself."""
        return TYPES["float32"] if self.name == "float16" else self

    @property
    def int64(self) -> bool:
        return self.glsl in ("int64_t", "uint64_t")

    def load(self, buf: str, e: str) -> str:
        """GLSL for element `e` (a variable name) of buffer `buf`, as a `glsl` value."""
        if self.native:
            return f"float({buf}[{e}])"
        if not self.packed:
            return f"{buf}[{e}]"
        mask = self.per_word - 1
        word = f"{buf}[{e} >> {mask.bit_length()}]"
        offset = f"({e} & {mask}) * {self.bits}"
        if self.coded:
            return self.decode(f"bitfieldExtract({word}, {offset}, {self.bits})")
        if self.kind == "float":
            return f"unpackHalf2x16({word})[{e} & 1]"
        if self.kind == "bool":
            return f"(bitfieldExtract({word}, {offset}, 8) != 0u)"
        return f"bitfieldExtract({'int(' + word + ')' if self.kind == 'int' else word}, {offset}, {self.bits})"

    def load4(self, buf: str, e: str) -> str:
        """GLSL for 4-vector `e` of a `vec4` buffer, as a float32 (`glsl`) 4-vector."""
        return f"vec4({buf}[{e}])" if self.native else f"{buf}[{e}]"

    def store(self, value: str) -> str:
        """`value` (a `glsl` value) converted to the buffer's element type, for a store: GLSL
        narrows float to float16_t only explicitly."""
        return f"float16_t({value})" if self.native else value

    @property
    def extensions(self) -> list[str]:
        """The GLSL extensions a kernel holding this type in buffers enables: the 16-bit storage
        types, and implicit float16_t -> float conversions on load; the 64-bit integer types."""
        if self.native:
            return ["GL_EXT_shader_16bit_storage",
                    "GL_EXT_shader_explicit_arithmetic_types_float16"]
        return [INT64_EXTENSION] if self.int64 else []

    def bits_of(self, value: str) -> str:
        """The low `bits` of a uint holding `value` (a packed type's element, for bitfieldInsert);
        a coded type's `value` is one of its values already: encoding it is exact (rounding
        down: e8m0's smallest value, 2^-127, is a float32 subnormal, which rounding up would
        move to 2^-126)."""
        if self.coded:
            return self.encode(value, round_mode="down")
        return f"packHalf2x16(vec2({value}, 0.0))" if self.kind == "float" else f"uint({value})"

    def wrap(self, text: str) -> str:
        """`text` (an op's result, computed in `glsl`) brought back into the dtype: 8/16-bit integers
        wrap around, float16 rounds. Wider types need nothing: GLSL integers wrap by themselves."""
        if self.name == "float16":
            return f"unpackHalf2x16(packHalf2x16(vec2({text}, 0.0))).x"
        if self.coded:  # rounds to nearest even, overflowing to inf or NaN like IEEE arithmetic
            return self.decode(self.encode(text))
        if self.packed and self.kind == "int":
            return f"bitfieldExtract({text}, 0, {self.bits})"
        if self.packed and self.kind == "uint":
            return f"({text} & {hex((1 << self.bits) - 1)}u)"
        return text

    def literal(self, x) -> str:
        """A GLSL literal of `glsl` type for the number x (exact: ints stay ints)."""
        if self.glsl == "bool":
            return "true" if x else "false"
        if self.glsl == "float":
            return float_literal(x)
        if self.glsl == "double":
            x = float(x)
            if not np.isfinite(x):
                hi = "0x7ff80000u" if np.isnan(x) else "0x7ff00000u" if x > 0 else "0xfff00000u"
                return f"packDouble2x32(uvec2(0u, {hi}))"
            text = repr(x)
            return (text if any(c in text for c in ".e") else text + ".0") + "lf"
        x = int(x)
        if self.kind == "uint":
            return f"{x}{'ul' if self.int64 else 'u'}"
        suffix = "l" if self.int64 else ""
        if x == -(1 << (63 if self.int64 else 31)):  # the literal's magnitude does not fit the type
            return f"({x + 1}{suffix} - 1{suffix})"
        return f"{x}{suffix}"


# Every dtype of the shared table (bundles/dtypes.py).
_TYPES = [ScalarType(d.name, d.glsl, d.kind, d.bits) for d in DTYPES.values()]
TYPES = {t.name: t for t in _TYPES}
# float16 in 16-bit-storage buffers, for the compute kernels (kernel_types).
FLOAT16_NATIVE = ScalarType("float16", "float", "float", 16, native=True)
_TEXEL_FORMATS = {("float32", 1): "r32f", ("float32", 4): "rgba32f"}


def scalar_type(dtype) -> ScalarType | None:
    """The ScalarType of a numpy dtype, None for one kernels do not compute on (strings, ...)."""
    return TYPES.get(np.dtype(dtype).name)


def kernel_types(v) -> dict:
    """The template parameters of a kernel computing on IR value v's dtype: T, the data's
    ScalarType (buffers are T.storage, loaded values T.glsl, four at a time T.vec4), and ACC,
    the ScalarType its sums and products accumulate in. float16 is FLOAT16_NATIVE here: these
    kernels load, convert and store elements one at a time or four (stores through T.store)."""
    t = scalar_type(v.dtype)
    if t is not None and t.name == "float16":
        t = FLOAT16_NATIVE
    if t is None:
        raise ValueError(f"no kernel computes on {np.dtype(v.dtype).name} tensor '{v.name}'")
    return dict(T=t, ACC=t.accumulator)


def texel_format(dtype, per_texel: int = 1) -> str | None:
    """The texel-buffer format holding `per_texel` (1 or 4) elements of `dtype` a texel ("r32f",
    "rgba32f" for float32); None where kernels read that dtype through storage buffers only."""
    t = scalar_type(dtype)
    return t.texel_format(per_texel) if t else None


def element_bits(dtype) -> int:
    """Bits per element in memory (4 for int4: the data-movement kernels move them packed)."""
    d = DTYPES.get(np.dtype(dtype).name)
    return d.bits if d is not None else 8 * np.dtype(dtype).itemsize
