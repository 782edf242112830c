"""The one dtype table of vkc, shared by the compiler, the bundle format and the runtime.

A tensor's dtype is named in the manifest by its numpy name. Each entry says how big an element
is, which ONNX element type and numpy type it is, and the GLSL type kernels compute it in (bool is
one byte per element in memory, 0 or 1, and a GLSL bool in kernels). Entries are in the order the format
gained them (format 1.0, then 1.1).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class DType:
    name: str           # the manifest's name = numpy's
    onnx: int           # onnx.TensorProto element type
    numpy: type
    itemsize: int       # bytes per element
    kind: str           # "float", "int", "uint" or "bool"
    glsl: str           # the GLSL type arithmetic runs in (float16 computes in float32)
    since: tuple[int, int]  # the format version that added it


DTYPES = {d.name: d for d in (
    DType("float32", 1, np.float32, 4, "float", "float", (1, 0)),
    DType("float16", 10, np.float16, 2, "float", "float", (1, 0)),
    DType("int32", 6, np.int32, 4, "int", "int", (1, 0)),
    DType("int64", 7, np.int64, 8, "int", "int64_t", (1, 0)),
    DType("uint8", 2, np.uint8, 1, "uint", "uint", (1, 0)),
    DType("int8", 3, np.int8, 1, "int", "int", (1, 0)),
    DType("bool", 9, np.bool_, 1, "bool", "bool", (1, 0)),
    DType("float64", 11, np.float64, 8, "float", "double", (1, 1)),
    DType("int16", 5, np.int16, 2, "int", "int", (1, 1)),
    DType("uint16", 4, np.uint16, 2, "uint", "uint", (1, 1)),
    DType("uint32", 12, np.uint32, 4, "uint", "uint", (1, 1)),
    DType("uint64", 13, np.uint64, 8, "uint", "uint64_t", (1, 1)),
)}
BY_ONNX = {d.onnx: d for d in DTYPES.values()}


def dtype_of(dtype) -> DType | None:
    """The entry of a numpy dtype (or its name), None for one bundles cannot hold."""
    return DTYPES.get(np.dtype(dtype).name)
