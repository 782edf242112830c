"""The one dtype table of vkc, shared by the compiler, the bundle format and the runtime.

A tensor's dtype is named in the manifest by its numpy name (ml_dtypes' for the low-precision
types, as `onnx.helper.tensor_dtype_to_np_dtype` gives them). Each entry says how many bits an
element takes, which ONNX element type and numpy type it is, and the GLSL type kernels compute it
in (bool is one byte per element in memory, 0 or 1, and a GLSL bool in kernels). Entries are in
the order the format gained them (format 1.0, then 1.1, then 1.2).

The format 1.2 types are ONNX's low-precision ones. In memory they are laid out exactly as ONNX
stores them: bfloat16 and the float8 types one element in 2 or 1 bytes; the 4-bit types two
elements per byte and the 2-bit types four, the first element in the lowest bits (a tensor of n
elements is ceil(n * bits / 8) bytes: `nbytes`). Kernels compute the floats in float32 and the
integers in int / uint. Their numpy types come from ml_dtypes, which this table does not import
(the runtime depends on numpy only): `numpy` is None for them and the name identifies them.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class DType:
    name: str           # the manifest's name = numpy's (ml_dtypes' for the format 1.2 types)
    onnx: int           # onnx.TensorProto element type
    numpy: type | None  # the numpy scalar type; None for the ml_dtypes types
    bits: int           # bits per element in memory
    kind: str           # "float", "int", "uint" or "bool"
    glsl: str           # the GLSL type arithmetic runs in (float16 computes in float32)
    since: tuple[int, int]  # the format version that added it

    @property
    def itemsize(self) -> int | None:
        """Bytes per element; None for the 4- and 2-bit types (several elements per byte)."""
        return self.bits // 8 if self.bits >= 8 else None

    def nbytes(self, count: int) -> int:
        """Bytes of a tensor of `count` elements: the last byte of a sub-byte type is padded."""
        return -(-count * self.bits // 8)


_F12 = (1, 2)
DTYPES = {d.name: d for d in (
    DType("float32", 1, np.float32, 32, "float", "float", (1, 0)),
    DType("float16", 10, np.float16, 16, "float", "float", (1, 0)),
    DType("int32", 6, np.int32, 32, "int", "int", (1, 0)),
    DType("int64", 7, np.int64, 64, "int", "int64_t", (1, 0)),
    DType("uint8", 2, np.uint8, 8, "uint", "uint", (1, 0)),
    DType("int8", 3, np.int8, 8, "int", "int", (1, 0)),
    DType("bool", 9, np.bool_, 8, "bool", "bool", (1, 0)),
    DType("float64", 11, np.float64, 64, "float", "double", (1, 1)),
    DType("int16", 5, np.int16, 16, "int", "int", (1, 1)),
    DType("uint16", 4, np.uint16, 16, "uint", "uint", (1, 1)),
    DType("uint32", 12, np.uint32, 32, "uint", "uint", (1, 1)),
    DType("uint64", 13, np.uint64, 64, "uint", "uint64_t", (1, 1)),
    DType("bfloat16", 16, None, 16, "float", "float", _F12),
    DType("float8_e4m3fn", 17, None, 8, "float", "float", _F12),
    DType("float8_e4m3fnuz", 18, None, 8, "float", "float", _F12),
    DType("float8_e5m2", 19, None, 8, "float", "float", _F12),
    DType("float8_e5m2fnuz", 20, None, 8, "float", "float", _F12),
    DType("uint4", 21, None, 4, "uint", "uint", _F12),
    DType("int4", 22, None, 4, "int", "int", _F12),
    DType("float4_e2m1fn", 23, None, 4, "float", "float", _F12),
    DType("float8_e8m0fnu", 24, None, 8, "float", "float", _F12),
    DType("uint2", 25, None, 2, "uint", "uint", _F12),
    DType("int2", 26, None, 2, "int", "int", _F12),
)}
BY_ONNX = {d.onnx: d for d in DTYPES.values()}


def dtype_of(dtype) -> DType | None:
    """The entry of a numpy dtype (or its name), None for one bundles cannot hold."""
    name = dtype if isinstance(dtype, str) else np.dtype(dtype).name
    return DTYPES.get(name)


def host_dtype(name: str) -> np.dtype | None:
    """The numpy dtype of the manifest dtype `name`: numpy's own, or ml_dtypes' while ml_dtypes is
    loaded (onnx loads it; bundles/ and the runtime never import it themselves: numpy knows its
    types by name once it is); None for an ml_dtypes type without ml_dtypes."""
    d = DTYPES[name]
    if d.numpy is not None:
        return np.dtype(d.numpy)
    try:
        return np.dtype(name)
    except TypeError:
        return None


def pack(array: np.ndarray) -> np.ndarray:
    """An array's elements as the bytes bundles hold (a flat uint8 array): whole-byte types as
    they are in memory; 4- and 2-bit types (numpy holds ml_dtypes' int4, ... one per byte, in the
    low bits) packed as ONNX packs them, the first element in the lowest bits of each byte."""
    a = np.ascontiguousarray(array)
    d = DTYPES[a.dtype.name]
    raw = a.reshape(-1).view(np.uint8)
    if d.bits >= 8:
        return raw
    per_byte = 8 // d.bits
    codes = np.zeros(d.nbytes(a.size) * per_byte, np.uint8)
    codes[:a.size] = raw & ((1 << d.bits) - 1)
    codes = codes.reshape(-1, per_byte) << (np.arange(per_byte, dtype=np.uint8) * d.bits)
    return np.bitwise_or.reduce(codes, axis=1).astype(np.uint8)


def unpack(raw: np.ndarray, name: str, shape) -> np.ndarray:
    """The tensor of dtype `name` and `shape` whose bundle bytes are `raw` (uint8, `pack`'s
    form): an array of its numpy (ml_dtypes) dtype; without ml_dtypes, for the ml_dtypes types,
    `raw` itself (the packed bytes as a flat uint8 array)."""
    d, dtype = DTYPES[name], host_dtype(name)
    if dtype is None:
        return raw
    if d.bits >= 8:
        return raw.view(dtype).reshape(shape)
    count = int(np.prod(shape, dtype=np.int64))
    per_byte = 8 // d.bits
    codes = (raw[:, None] >> (np.arange(per_byte, dtype=np.uint8) * d.bits)) & ((1 << d.bits) - 1)
    return codes.reshape(-1)[:count].astype(np.uint8).view(dtype).reshape(shape)


# Vulkan's VkComponentTypeKHR (cooperative-matrix element types) -> dtype name (1000141000:
# VK_COMPONENT_TYPE_BFLOAT16_KHR).
COMPONENT_TYPES = {0: "float16", 1: "float32", 2: "float64", 3: "int8", 4: "int16", 5: "int32", 6: "int64",
                   7: "uint8", 8: "uint16", 9: "uint32", 10: "uint64", 1000141000: "bfloat16"}
