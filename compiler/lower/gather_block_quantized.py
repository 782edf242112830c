"""com.microsoft GatherBlockQuantized: rows of a block-quantized table (an LLM's token
embedding, as onnxruntime-genai's model builder writes it) gathered and dequantized, on
templates/gather_block_quantized.comp.j2. The table stays packed in the bundle.

data is [V, K] of uint8 holding 4- or 8-bit values (two 4-bit values a byte, the first in the
low bits; [V, K * bits / 8] bytes), or int4 / uint4; scales [V, K / block_size]; zero points
like data (uint8 packed, int4, uint4) or absent: 2^(bits - 1) for uint8 data, 0 for int4 and
uint4 (as onnxruntime dequantizes). Y[i..., k] = (q[v, k] - zero_point) * scale, v = indices[i...].
"""
from __future__ import annotations

import numpy as np

from ..dtypes import kernel_types
from ..errors import CompileError
from ..registry import FLOATS
from .kernel import Kernel, buffer_view, grid_1d, register, unsupported_dtype

MS = "com.microsoft"
LIMITS = "data of rank other than 2; gather_axis other than 0; quantize_axis other than the last"


def _output_shape(shapes: list, attrs: dict, dtypes: list) -> tuple | None:
    """indices' shape + [K]: K is data's last dim (int4, uint4), or that unpacked (uint8 bytes)."""
    data, idx = (shapes + [None] * 2)[:2]
    if data is None or idx is None or not dtypes or dtypes[0] is None:
        return None
    unpacked = np.dtype(dtypes[0]) == np.uint8
    return (*idx, data[-1] * 8 // attrs.get("bits", 4) if unpacked else data[-1])


def _row_length(node, data) -> int:
    """K: the elements of a row of data."""
    bits = node.attrs.get("bits", 4)
    return data.shape[-1] * 8 // bits if np.dtype(data.dtype) == np.uint8 else data.shape[-1]


@register("GatherBlockQuantized", domain=MS, dtypes=None, float16=True,
          constant_inputs=(0, 2, 3), limits=LIMITS, output_shape=_output_shape,
          output_dtype_from=2,
          dtypes_doc="float32, float16 scales; data uint8 (4 or 8 bits), int4, uint4; "
                     "indices int32, int64")
def lower_gather_block_quantized(node, target):
    data, idx, scales = node.inputs[:3]
    zp, y = node.input(3), node.outputs[0]
    where = f"GatherBlockQuantized '{node.name}'"
    bits = node.attrs.get("bits", 4)
    block = node.attrs.get("block_size", 128)
    dtype = np.dtype(data.dtype).name
    if np.dtype(scales.dtype).name not in FLOATS:
        raise unsupported_dtype(node, scales, "a dequantization")
    if np.dtype(idx.dtype) not in (np.int32, np.int64):
        raise CompileError(f"{where}: indices '{idx.name}' are {np.dtype(idx.dtype).name}; the op "
                           "takes int32 and int64.")
    if len(data.shape) != 2:
        raise CompileError(f"{where}: data '{data.name}' is {len(data.shape)}-D; vkc takes a 2-D "
                           "table [rows, K] (an embedding).")
    if node.attrs.get("gather_axis", 0) % 2 != 0 or node.attrs.get("quantize_axis", 1) % 2 != 1:
        raise CompileError(f"{where}: vkc gathers rows (gather_axis 0) of a table quantized "
                           "along its rows (quantize_axis 1 or -1) only.")
    if (dtype, bits) not in (("uint8", 4), ("uint8", 8), ("int4", 4), ("uint4", 4)):
        raise CompileError(f"{where}: {dtype} data with bits {bits} is not supported (uint8 "
                           "with 4 or 8 bits, int4 or uint4 with 4).")
    rows, k = data.shape[0], _row_length(node, data)
    blocks = -(-k // block)
    if scales.size != rows * blocks:
        raise CompileError(f"{where}: scales '{scales.name}' {list(scales.shape)} must be "
                           f"[{rows}, {blocks}] (K = {k}, block_size {block}).")
    if zp is not None and np.dtype(zp.dtype).name != dtype:
        raise CompileError(f"{where}: zero_points '{zp.name}' are {np.dtype(zp.dtype).name}, "
                           f"data {dtype}; they must have one type.")
    # Zero points a row: uint8 packs whole bytes per row, int4 / uint4 rows pack continuously.
    zp_row = zero_point_row(blocks, bits) if dtype == "uint8" else blocks
    return dequantize_rows(node, target, data=data, scales=scales, zero_points=zp, y=y, idx=idx,
                           rows=rows, k=k, row_stride=k, bits=bits, block=block,
                           zp_row=zp_row, signed=dtype == "int4",
                           default_zp=2 ** (bits - 1) if dtype == "uint8" else 0)


def zero_point_row(blocks: int, bits: int) -> int:
    """The zero points a row holds where rows of them are packed in whole bytes (uint8): its
    blocks' rounded up to a byte."""
    return -(-blocks * bits // 8) * 8 // bits


def dequantize_rows(node, target, *, data, scales, zero_points, y, idx, rows: int, k: int,
                    row_stride: int, bits: int, block: int, zp_row: int, signed: bool,
                    default_zp: int) -> list[Kernel]:
    """The kernel: Y [.., K] = rows of `data` ([rows, row_stride] values of `bits` bits, packed),
    the rows idx names (None: every row in order), dequantized with per-block scales
    [rows, ceil(K / block)] and zero points ([rows, zp_row] values packed like data, or None:
    default_zp). Also MatMulNBits' weights for a prompt's GEMM (matmul_nbits.py): every row,
    where rows are whole words, a word an invocation."""
    blocks = -(-k // block)
    per = 32 // bits if idx is None and k % (32 // bits) == 0 else 1  # values an invocation
    spec = [("TOTAL", "int32", y.size // per), ("K", "int32", k), ("ROWS", "int32", rows),
            ("BLOCK", "int32", block), ("BLOCKS", "int32", blocks), ("ZP_ROW", "int32", zp_row),
            ("ROW_STRIDE", "int32", row_stride)]
    local = target.elementwise_local
    params = dict(LOCAL=local, BITS=bits, signed=signed, has_zp=zero_points is not None,
                  default_zp=default_zp, gather=idx is not None, PER=per,
                  # a word's values stored four at a time (rows of whole words start on 16 bytes)
                  Y_VEC4=per % 4 == 0 and kernel_types(y)["T"].vec4 is not None,
                  idx_words=np.dtype(idx.dtype).itemsize // 4 if idx is not None else 0,
                  **kernel_types(scales),
                  # Y's type: float16 under float32 scales in a --precision fp16 bundle
                  TY=kernel_types(y)["T"])
    bindings = [buffer_view(data)] + ([idx] if idx is not None else []) + [scales]
    bindings += [buffer_view(zero_points)] if zero_points is not None else []
    bindings.append(y)
    return [Kernel("gather_block_quantized", params, spec, bindings, writes=[len(bindings) - 1],
                   groups=grid_1d(y.size // per, local), local_size=(local, 1, 1),
                   nodes=node.sources, flops=2 * y.size)]
