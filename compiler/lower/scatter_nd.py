"""ScatterND: the data with slices replaced by updates at the positions the indices name (what
PyTorch's slice assignment `x[..., a:b] = y` exports to). The data is copied to the output, then
templates/scatter_nd.comp.j2 writes every word of the updates; indices are read at run time and
count from the end where negative. Constant indices are checked here: one out of range, or two
alike without a reduction (ONNX leaves the result undefined, and on a GPU the writes race), is
refused. With a reduction (add, mul, max, min) the updates combine with the data in their order."""
from __future__ import annotations

import numpy as np

from ..dtypes import element_bits
from ..errors import CompileError
from ..registry import shape_of_input0
from ..shapes import contiguous_strides, prod
from .kernel import Kernel, buffer_view, grid_1d, register
from .strided_copy import COPIES, strided_copy

LIMITS = ("reduction add, mul, max and min on other data than float32 and int32; constant indices "
          "that repeat without a reduction")
REDUCTIONS = ("none", "add", "mul", "max", "min")
REDUCED_KINDS = {"float32": "float", "int32": "int"}   # what a reduction computes on


def _check_constant_indices(node, indices: np.ndarray, dims: tuple) -> None:
    flat = indices.reshape(-1, len(dims)).astype(np.int64)
    bad = (flat < -np.array(dims)) | (flat >= np.array(dims))
    if bad.any():
        at = tuple(int(i) for i in flat[bad.any(axis=1)][0])
        raise CompileError(f"ScatterND '{node.name}': index {list(at)} is outside the data's leading dims "
                           f"{list(dims)}.")
    positions = np.ravel_multi_index(tuple((flat % np.array(dims)).T), dims)
    if len(np.unique(positions)) != len(positions):
        raise CompileError(f"ScatterND '{node.name}': its indices name one slice more than once; ONNX leaves "
                           "which update wins undefined, so vkc refuses it: scatter each slice once.")


@register("ScatterND", dtypes=None, float16=True, output_shape=shape_of_input0, limits=LIMITS,
          dtypes_doc=COPIES + "; indices int64")
def lower_scatter_nd(node, target):
    data, indices, updates = node.inputs
    out = node.outputs[0]
    reduction = node.text("reduction", "none")
    if reduction not in REDUCTIONS:
        raise CompileError(f"ScatterND '{node.name}': reduction {reduction!r} is not one of ONNX's "
                           f"({', '.join(REDUCTIONS)}).")
    kind = REDUCED_KINDS.get(np.dtype(data.dtype).name)
    if reduction != "none" and kind is None:
        raise CompileError(f"ScatterND '{node.name}': reduction '{reduction}' on {np.dtype(data.dtype).name} "
                           "data is not built; vkc reduces float32 and int32.")
    k = indices.shape[-1] if indices.shape else 0
    if not 1 <= k <= len(data.shape):
        raise CompileError(f"ScatterND '{node.name}': indices {list(indices.shape)} index {k} dims of the "
                           f"rank-{len(data.shape)} data; 1 to its rank.")
    if np.dtype(updates.dtype) != np.dtype(data.dtype):
        raise CompileError(f"ScatterND '{node.name}': updates are {np.dtype(updates.dtype).name}, the data "
                           f"{np.dtype(data.dtype).name}; they must agree.")
    dims = tuple(data.shape[:k])
    if indices.is_constant and reduction == "none":
        _check_constant_indices(node, np.asarray(indices.data), dims)
    bits = element_bits(data.dtype)
    slice_bits = prod(data.shape[k:]) * bits
    # Slices of whole 32-bit words move a word an invocation; others (single float16 elements)
    # an element, set inside its word with atomic AND and OR, since a neighbour may share it.
    unit = 32 if slice_bits % 32 == 0 else bits
    if unit < 32 and reduction != "none":
        raise CompileError(f"ScatterND '{node.name}': slices of {slice_bits} bits after the {k} indexed dims "
                           "with a reduction; vkc reduces whole 32-bit words.")
    kernels = strided_copy(node, target, data, out, contiguous_strides(data.shape))
    total = updates.size * bits // unit
    if total == 0:
        return kernels
    inner = slice_bits // unit
    strides = [prod(dims[j + 1:]) * inner for j in range(k)]   # in units
    spec = [("TOTAL", "int32", total), ("INNER", "int32", inner)]
    spec += [(f"D{j}", "int32", d) for j, d in enumerate(dims)]
    spec += [(f"S{j}", "int32", s) for j, s in enumerate(strides)]
    local = target.elementwise_local
    params = dict(LOCAL=local, K=k, reduction=None if reduction == "none" else reduction, kind=kind, bits=unit)
    if reduction != "none":
        # One invocation a slice word, walking the updates in order: repeated indices combine as
        # ONNX applies them, one after another, without atomics.
        spec += [("UPDATES", "int32", total // inner)]
        total = inner
    # Y is bound as words (the atomics set an element inside its word): a last, partial word too.
    return kernels + [Kernel("scatter_nd", params, spec, [updates, indices, buffer_view(out)], writes=[2],
                             groups=grid_1d(total, local), local_size=(local, 1, 1), nodes=node.sources)]
