"""How kernels hold and compute each dtype: the GLSL type arithmetic runs in, the buffer's element
type, and how an element is read, packed and written as a literal.

8- and 16-bit elements live packed in 32-bit words (`uint` buffers): a kernel reads one with
bitfieldExtract (sign-extending signed types) or unpackHalf2x16, and writes whole words only, so
no kernel needs the optional 8/16-bit storage features. float16 computes in float32. The 64-bit
types need the device features shaderInt64 / shaderFloat64, which the bundle records from the
SPIR-V capabilities its modules declare.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

INT64_EXTENSION = "GL_EXT_shader_explicit_arithmetic_types_int64"


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
    kind: str       # "float", "int" or "uint"
    bits: int       # bits per element in memory

    @property
    def packed(self) -> bool:
        return self.bits < 32

    @property
    def per_word(self) -> int:
        """Elements per 32-bit word (1 for 32- and 64-bit types)."""
        return max(1, 32 // self.bits)

    @property
    def storage(self) -> str:
        """The element type of a buffer holding this dtype."""
        return "uint" if self.packed else self.glsl

    @property
    def int64(self) -> bool:
        return self.glsl in ("int64_t", "uint64_t")

    def load(self, buf: str, e: str) -> str:
        """GLSL for element `e` (a variable name) of buffer `buf`, as a `glsl` value."""
        if not self.packed:
            return f"{buf}[{e}]"
        shift, mask = (2, 3) if self.bits == 8 else (1, 1)
        word = f"{buf}[{e} >> {shift}]"
        if self.kind == "float":
            return f"unpackHalf2x16({word})[{e} & 1]"
        offset = f"({e} & {mask}) * {self.bits}"
        return f"bitfieldExtract({'int(' + word + ')' if self.kind == 'int' else word}, {offset}, {self.bits})"

    def bits_of(self, value: str) -> str:
        """The low `bits` of a uint holding `value` (a packed type's element, for bitfieldInsert)."""
        return f"packHalf2x16(vec2({value}, 0.0))" if self.kind == "float" else f"uint({value})"

    def wrap(self, text: str) -> str:
        """`text` (an op's result, computed in `glsl`) brought back into the dtype: 8/16-bit integers
        wrap around, float16 rounds. Wider types need nothing: GLSL integers wrap by themselves."""
        if self.name == "float16":
            return f"unpackHalf2x16(packHalf2x16(vec2({text}, 0.0))).x"
        if self.packed and self.kind == "int":
            return f"bitfieldExtract({text}, 0, {self.bits})"
        if self.packed and self.kind == "uint":
            return f"({text} & {hex((1 << self.bits) - 1)}u)"
        return text

    def literal(self, x) -> str:
        """A GLSL literal of `glsl` type for the number x (exact: ints stay ints)."""
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


_TYPES = [ScalarType("float32", "float", "float", 32), ScalarType("float16", "float", "float", 16),
          ScalarType("float64", "double", "float", 64),
          ScalarType("int8", "int", "int", 8), ScalarType("uint8", "uint", "uint", 8),
          ScalarType("int16", "int", "int", 16), ScalarType("uint16", "uint", "uint", 16),
          ScalarType("int32", "int", "int", 32), ScalarType("uint32", "uint", "uint", 32),
          ScalarType("int64", "int64_t", "int", 64), ScalarType("uint64", "uint64_t", "uint", 64)]
TYPES = {t.name: t for t in _TYPES}


def scalar_type(dtype) -> ScalarType | None:
    """The ScalarType of a numpy dtype, None for one kernels do not compute on (bool, ...)."""
    return TYPES.get(np.dtype(dtype).name)
