"""vkc.Int8CacheWrite: a KV cache update into an int8 cache (passes/int8_cache.py, --kv-cache
int8). Inputs: the int8 cache [..., M, D], its float32 scales [..., M, 1], the update (float32 or
float16, [..., S, D]) and the write indices (TensorScatter's: each batch's first row, linear or
circular). Each update row of D values is written as int8 at its row, symmetric: scale =
max |x| / 127, q = roundEven(x * 127 / max |x|) (0 for a row of zeros), and its scale beside it;
a reader takes q * scale. Outputs: the cache and the scales, in place where
passes/in_place_scatter.py made them views of the inputs (a bundle state's are), else copied
first. One workgroup a row: its lanes find the row's largest magnitude together, then each packs
four values into one word."""
from __future__ import annotations

import numpy as np

from ..dtypes import kernel_types
from ..errors import CompileError
from ..shapes import contiguous_strides, prod
from .kernel import Kernel, register
from .strided_copy import strided_copy
from .tensor_scatter import MODES, rows_at_strides, update_layout

MAX_LANES = 64
MAX_WORKGROUPS = 65535


def quantize_rows(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """What the kernel stores for rows x [..., D] (float32 arithmetic): int8 values and scales
    [..., 1]. For tests and tools: dequantized, q * scale."""
    x = np.asarray(x, np.float32)
    amax = np.abs(x).max(axis=-1, keepdims=True)
    with np.errstate(divide="ignore"):
        inv = np.where(amax > 0, np.float32(127) / amax, np.float32(0)).astype(np.float32)
    q = np.clip(np.rint(x * inv), -127, 127).astype(np.int8)
    return q, (amax / np.float32(127)).astype(np.float32)


@register("vkc.Int8CacheWrite", dtypes=None, float16=True, updates_in_place=((0, 0), (1, 1)),
          dtypes_doc="int8 cache, float32 scales, float32 or float16 update")
def lower_int8_cache_write(node, target):
    cache, scales, update, indices = node.inputs
    out, scales_out = node.outputs
    columns = node.attrs.get("input_columns")
    update_shape, layout = update_layout(node, update)
    rank = len(cache.shape)
    axis = node.attrs.get("axis", -2) % rank
    mode = node.attrs.get("mode", "linear")
    d = cache.shape[-1]
    if mode not in MODES or axis != rank - 2 or axis == 0 or d % 4 or update_shape[-1] != d or \
            tuple(scales.shape) != tuple(cache.shape[:-1]) + (1,) or \
            any(u != c for i, (u, c) in enumerate(zip(update_shape, cache.shape)) if i != axis):
        raise CompileError(f"Int8CacheWrite '{node.name}': update {list(update_shape)} into cache "
                           f"{list(cache.shape)} along axis {axis} (a vkc bug: passes/int8_cache.py checks it).")
    kernels = []
    for src, dst in ((cache, out), (scales, scales_out)):
        if dst.root() is not src.root():
            kernels += strided_copy(node, target, src, dst, contiguous_strides(src.shape))
    rows = prod(update_shape[:-1])
    if rows == 0:
        return kernels
    lanes = 1
    while lanes < min(d // 4, MAX_LANES):
        lanes *= 2
    spec = [("ROWS", "int32", rows), ("S", "int32", update_shape[axis]), ("M", "int32", cache.shape[axis]),
            ("PER_BATCH", "int32", prod(cache.shape[1:axis]))]
    strided = rows_at_strides(layout, update_shape, axis) if layout is not None else None
    if layout is not None and strided is None:
        raise CompileError(f"Int8CacheWrite '{node.name}': its update '{update.name}' is not read in contiguous "
                           "rows (a vkc bug).")
    if strided:
        spec += [(name, "int32", x) for name, x in zip(("U_OFF", "U_SB", "U_SM", "U_SS"), strided)]
    elif columns:
        part = prod(update_shape) // (update.size // update.shape[-1])
        spec += [("U_OFF", "int32", columns[0]), ("U_ROW", "int32", update.shape[-1]), ("U_PART", "int32", part)]
    params = dict(kernel_types(update), LANES=lanes, D=d, WORDS=-(-(d // 4) // lanes), circular=mode == "circular",
                  indices=indices is not None, columns=bool(columns) and not strided, strided=bool(strided),
                  idx_words=np.dtype(indices.dtype).itemsize // 4 if indices is not None else 1)
    bindings = [update] + ([indices] if indices is not None else []) + [out, scales_out]
    n = len(bindings)
    return kernels + [Kernel("int8_cache_write", params, spec, bindings, writes=[n - 2, n - 1],
                             groups=(min(rows, MAX_WORKGROUPS), 1, 1), local_size=(lanes, 1, 1), shared_memory_bytes=4 * lanes,
                             nodes=node.sources)]
