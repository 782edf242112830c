"""TensorScatter (opset 24): a cache with each batch's update rows written at its write index
along one axis, the index read at run time. Where the cache is written in place
(passes/in_place_scatter.py: its output a view of its input, as a bundle state's is) one kernel
writes the update's rows and nothing else moves; otherwise the cache is copied first."""
from __future__ import annotations

import numpy as np

from ..dtypes import element_bits
from ..errors import CompileError
from ..ir import Node
from ..registry import shape_of_input0
from ..shapes import contiguous_strides, prod
from .kernel import Kernel, grid_1d, register
from .strided_copy import COPIES, strided_copy

MODES = ("linear", "circular")
LIMITS = "rows of fewer than 32 bits (an odd number of 16-bit elements after the axis)"


def _placement(node) -> tuple:
    """(write indices, axis, mode) of the update's rows."""
    return node.input(2), node.attrs.get("axis", -2) % len(node.inputs[0].shape), node.text("mode", "linear")


def update_layout(node, update) -> tuple[tuple, tuple | None]:
    """(the update's shape, (offset, strides) in elements of each of its dims in the tensor bound
    for it, or None where that is read in order from its first element): an update read through
    `update_perm` (a Transpose's, passes/transposes_in_place.py) of what is bound, that being
    `input_columns` (first, width, shape) of a wider tensor's rows or not."""
    columns, perm = node.attrs.get("input_columns"), node.attrs.get("update_perm")
    shape = tuple(columns[2]) if columns else tuple(update.shape)
    if perm is None:
        return shape, None
    strides, offset = contiguous_strides(shape), 0
    if columns:
        # the part's rows are its last dims from some k on: the dims before walk rows of `width`
        width = update.shape[-1]
        part = prod(shape) * width // update.size
        k = next((k for k in range(len(shape) + 1) if prod(shape[k:]) == part), None)
        if k is None:
            raise CompileError(f"{node.op_type} '{node.name}': columns {list(columns[:2])} of '{update.name}' "
                               f"{list(update.shape)} are no whole last dims of {list(shape)} (a vkc bug).")
        strides = [st // part * width if i < k else st for i, st in enumerate(strides)]
        offset = columns[0]
    return tuple(shape[p] for p in perm), (offset, tuple(strides[p] for p in perm))


def rows_at_strides(layout, shape, axis, unit: int = 1) -> list | None:
    """(offset, batch, middle, axis strides) in units of `unit` elements of an update read at
    `layout` (update_layout's), viewed as [batch, middle, S, inner]: its dims after the axis in
    order and contiguous, those between the batch and the axis one stride apart; None otherwise."""
    offset, strides = layout
    inner = [strides[i] == prod(shape[i + 1:]) for i in range(axis + 1, len(shape))]
    middle = [strides[i] == strides[i + 1] * shape[i + 1] for i in range(1, axis - 1)]
    picked = [offset, strides[0], strides[axis - 1] if axis > 1 else 0, strides[axis]]
    if not all(inner + middle) or any(x % unit for x in picked):
        return None
    return [x // unit for x in picked]


def _reads_permuted(node, slot, perm, x):
    """The cache write reading its update as Transpose(x, perm) (a prompt's K or V heads split,
    [B, S, H, D] written as the cache's [B, H, S, D] rows), where it reads it at strides: the
    dims after the axis x's last ones, in order."""
    if slot != 1 or any(k in node.attrs for k in ("update_perm", "input_columns")) or \
            node.text("mode", "linear") not in MODES:
        return None
    axis = _placement(node)[1]
    probe = Node(node.op_type, node.name, [node.inputs[0], x, *node.inputs[2:]], list(node.outputs),
                 {**node.attrs, "update_perm": list(perm)}, node.domain, node.sources)
    shape, layout = update_layout(probe, x)
    if axis == 0 or len(shape) != len(node.inputs[0].shape) or rows_at_strides(layout, shape, axis) is None:
        return None
    return probe


def _rows_written(node):
    """(update, write indices, axis, mode, the update's perm or None): what
    passes/cache_row_stores.py may have the update's producer store itself; None where the
    update is columns of a wider tensor."""
    if "input_columns" in node.attrs or node.text("mode", "linear") not in MODES:
        return None
    return (node.inputs[1], *_placement(node), node.attrs.get("update_perm"))


def _column_rows_written(node):
    """(packed tensor, (first column, columns of each of its rows), write indices, axis, mode,
    the update's perm or None): where the update is columns of a wider tensor's rows, what
    passes/cache_row_stores.py may have the kernel reading the neighbouring columns carry into
    the cache; None otherwise."""
    columns = node.attrs.get("input_columns")
    if columns is None or node.text("mode", "linear") not in MODES:
        return None
    packed = node.inputs[1]
    per_row = prod(columns[2]) // (packed.size // packed.shape[-1])
    return (packed, (columns[0], per_row), *_placement(node), node.attrs.get("update_perm"))


def _int8_rows(node, scales, scales_out):
    """The same update into an int8 cache with a scale per row (lower/int8_cache_write.py)."""
    attrs = {"axis": node.attrs.get("axis", -2), "mode": node.text("mode", "linear")}
    attrs.update({k: node.attrs[k] for k in ("input_columns", "update_perm") if k in node.attrs})
    return Node("vkc.Int8CacheWrite", node.name, [node.inputs[0], scales, node.inputs[1], node.input(2)],
                [node.outputs[0], scales_out], attrs, sources=node.sources)


# vkc.TensorScatter: the same, for passes that write a cache update into graphs of any opset
# (passes/group_query_attention.py).
@register("vkc.TensorScatter", dtypes=None, float16=True, updates_in_place=((0, 0),), reads_columns=(1,),
          writes_rows=_rows_written, writes_column_rows=_column_rows_written, writes_int8_rows=_int8_rows,
          reads_permuted=_reads_permuted)
@register("TensorScatter", since=24, dtypes=None, float16=True, output_shape=shape_of_input0,
          updates_in_place=((0, 0),), reads_columns=(1,), dtypes_doc=COPIES + "; write_indices int64",
          limits=LIMITS, writes_rows=_rows_written, writes_column_rows=_column_rows_written,
          writes_int8_rows=_int8_rows, reads_permuted=_reads_permuted)
def lower_tensor_scatter(node, target):
    cache, update, out = node.inputs[0], node.inputs[1], node.outputs[0]
    # input_columns (first, width, shape): the update, of `shape`, is columns of the rows of a
    # wider tensor (a part of a packed projection: passes/split_parts.py); update_perm: read
    # through that permutation, at strides
    columns = node.attrs.get("input_columns")
    update_shape, layout = update_layout(node, update)
    indices = node.input(2)
    mode = node.text("mode", "linear")
    if mode not in MODES:
        raise CompileError(f"TensorScatter '{node.name}': mode {mode!r} is not linear or circular.")
    rank = len(cache.shape)
    axis = node.attrs.get("axis", -2) % rank
    if axis == 0 or len(update_shape) != rank or \
            any(u != c for i, (u, c) in enumerate(zip(update_shape, cache.shape)) if i != axis):
        raise CompileError(f"TensorScatter '{node.name}': update {list(update_shape)} does not fit cache "
                           f"{list(cache.shape)} along axis {axis} (the batch axis 0 cannot be it).")
    if np.dtype(update.dtype) != np.dtype(cache.dtype):
        raise CompileError(f"TensorScatter '{node.name}': update is {np.dtype(update.dtype).name}, the cache "
                           f"{np.dtype(cache.dtype).name}; they must agree.")
    inner_bits = prod(cache.shape[axis + 1:]) * element_bits(cache.dtype)
    if inner_bits % 32:
        raise CompileError(f"TensorScatter '{node.name}': rows of {inner_bits} bits after axis {axis}; vkc "
                           "writes whole 32-bit words.")
    kernels = [] if out.root() is cache.root() else \
        strided_copy(node, target, cache, out, contiguous_strides(cache.shape))
    total = prod(update_shape) * element_bits(cache.dtype) // 32
    if total == 0:
        return kernels
    spec = [("TOTAL", "int32", total), ("INNER", "int32", inner_bits // 32),
            ("S", "int32", update_shape[axis]), ("M", "int32", cache.shape[axis]),
            ("PER_BATCH", "int32", prod(cache.shape[1:axis]))]
    if layout is not None:
        bits = element_bits(cache.dtype)
        words = rows_at_strides(layout, update_shape, axis, 32 // bits) if bits <= 32 else None
        if words is None:
            raise CompileError(f"TensorScatter '{node.name}': its update '{update.name}' is not read in whole "
                               "32-bit words of contiguous rows (a vkc bug).")
        spec += [(name, "int32", w) for name, w in zip(("U_OFF", "U_SB", "U_SM", "U_SS"), words)]
    elif columns:
        bits = element_bits(cache.dtype)
        rows = update.size // update.shape[-1]
        words = [columns[0] * bits, update.shape[-1] * bits, prod(update_shape) // rows * bits]
        if any(w % 32 for w in words) or prod(update_shape) % rows:
            raise CompileError(f"TensorScatter '{node.name}': its update's columns {list(columns[:2])} of "
                               f"'{update.name}' {list(update.shape)} are not whole 32-bit words (a vkc bug).")
        spec += [(name, "int32", w // 32) for name, w in zip(("U_OFF", "U_ROW", "U_PART"), words)]
    local = target.elementwise_local
    params = dict(LOCAL=local, circular=mode == "circular", indices=indices is not None,
                  columns=bool(columns) and layout is None, strided=layout is not None,
                  idx_words=np.dtype(indices.dtype).itemsize // 4 if indices is not None else 1)
    bindings = [update] + ([indices] if indices is not None else []) + [out]
    return kernels + [Kernel("tensor_scatter", params, spec, bindings, writes=[len(bindings) - 1],
                             groups=grid_1d(total, local), local_size=(local, 1, 1), nodes=node.sources)]
