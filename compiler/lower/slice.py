"""Slice and Split: strided copies out of the input (strided_copy.py)."""
from __future__ import annotations

from ..errors import CompileError
from ..shapes import contiguous_strides
from .strided_copy import COPIES, strided_copy
from .kernel import constant_input, register

SLICE_LIMIT = "starts, ends, axes, steps computed at run time"


def _constant_ints(node, index: int, what: str):
    data = constant_input(node, index, what)
    return None if data is None else [int(i) for i in data.reshape(-1)]


def _slice(node, target, starts, ends, axes, steps):
    x, out = node.inputs[0], node.outputs[0]
    rank = len(x.shape)
    axes = list(range(len(starts))) if axes is None else axes
    steps = [1] * len(starts) if steps is None else steps
    in_strides = contiguous_strides(x.shape)
    strides, offset = list(in_strides), 0
    for start, end, axis, step in zip(starts, ends, axes, steps):
        axis %= rank
        if step == 0:
            raise CompileError(f"Slice '{node.name}': step 0 on axis {axis}.")
        # ONNX clamps starts and ends exactly as Python's slice.indices does.
        first, _, _ = slice(start, end, step).indices(x.shape[axis])
        offset += first * in_strides[axis]
        strides[axis] = in_strides[axis] * step
    return strided_copy(node, target, x, out, strides, offset)


@register("Slice", since=1, dtypes=None, float16=True, dtypes_doc=COPIES, limits=SLICE_LIMIT)
def lower_slice_v1(node, target):
    a = node.attrs
    return _slice(node, target, list(a["starts"]), list(a["ends"]), a.get("axes"), None)


@register("Slice", since=10, dtypes=None, float16=True, dtypes_doc=COPIES,
          constant_inputs=(1, 2, 3, 4), limits=SLICE_LIMIT)
def lower_slice(node, target):
    starts = _constant_ints(node, 1, "starts")
    ends = _constant_ints(node, 2, "ends")
    return _slice(node, target, starts, ends, _constant_ints(node, 3, "axes"),
                  _constant_ints(node, 4, "steps"))


@register("Split", dtypes=None, float16=True, dtypes_doc=COPIES, constant_inputs=(1,),
          limits="split sizes computed at run time")
def lower_split(node, target):
    """Each output is the next block along the axis; its shape (from shape inference) already
    says how long, whichever of the split attribute, input or num_outputs set it."""
    x = node.inputs[0]
    axis = node.attrs.get("axis", 0) % len(x.shape)
    strides = contiguous_strides(x.shape)
    kernels, begin = [], 0
    for out in node.outputs:
        if out.shape is None:
            raise CompileError(f"Split '{node.name}': output '{out.name}' has no static shape.")
        kernels += strided_copy(node, target, x, out, strides, begin * strides[axis])
        begin += out.shape[axis]
    if begin != x.shape[axis]:
        raise CompileError(f"Split '{node.name}': the parts cover {begin} of the {x.shape[axis]} "
                           f"elements on axis {axis}.")
    return kernels
