"""When a node computes nothing: the no-op tests ops declare with the registry (`noop=`). Each
takes a node whose first input and output are typed and says whether the output is that input,
element for element, in its dtype and shape."""
from __future__ import annotations

import numpy as np

from .ir import Node


def always(node: Node) -> bool:
    return True


def _typed(node: Node) -> bool:
    x, y = node.inputs[0] if node.inputs else None, node.outputs[0]
    return (x is not None and x.shape is not None and y.shape is not None
            and x.dtype is not None and y.dtype is not None)


def same_dtype(node: Node) -> bool:
    """A Cast (or CastLike) to the dtype its input has (HF's GPT-2 exports one after every
    attention softmax)."""
    return _typed(node) and np.dtype(node.inputs[0].dtype) == np.dtype(node.outputs[0].dtype)


def same_shape(node: Node) -> bool:
    """A Reshape, Squeeze, Unsqueeze, Flatten or Expand to the shape its input has."""
    return same_dtype(node) and tuple(node.inputs[0].shape) == tuple(node.outputs[0].shape)


def identity_perm(node: Node) -> bool:
    """A Transpose that keeps every dim where it is."""
    if not same_dtype(node):
        return False
    rank = len(node.inputs[0].shape)
    return list(node.attrs.get("perm", range(rank - 1, -1, -1))) == list(range(rank))


def zero_pads(node: Node) -> bool:
    """A Pad that adds nothing on any side (Swin pads its maps to whole windows: nothing where
    they are whole already)."""
    if not same_shape(node):
        return False
    if len(node.inputs) > 1:  # opset 11 on: the pads are an input
        pads = node.inputs[1]
        return pads is not None and pads.is_constant and not pads.data.any()
    return not any(node.attrs.get("pads", node.attrs.get("paddings", [])))


def whole_slice(node: Node) -> bool:
    """A Slice that keeps every element in order (Swin's crop back to the size before padding,
    where nothing was padded): its output's shape is its input's and no axis longer than 1 is
    stepped through backwards. n elements picked at a positive step from n in order are all of
    them, whatever the starts and ends say."""
    if not same_shape(node):
        return False
    if len(node.inputs) == 1:  # opset 1: starts, ends and axes attributes, no steps
        return True
    starts, axes, steps = node.inputs[1], node.input(3), node.input(4)
    if starts is None or any(v is not None and not v.is_constant for v in (axes, steps)):
        return False
    count = starts.size
    axes = range(count) if axes is None else [int(a) for a in axes.data.reshape(-1)]
    steps = [1] * count if steps is None else [int(s) for s in steps.data.reshape(-1)]
    shape = node.inputs[0].shape
    return all(step > 0 or shape[axis] <= 1 for axis, step in zip(axes, steps))


def rest_empty(node: Node) -> bool:
    """A Concat whose inputs after the first are all empty (Phi-3's rotary embedding of the whole
    head joined to the zero dims it leaves unrotated): the output is the first input."""
    return same_shape(node) and all(v is not None and v.shape is not None and 0 in tuple(v.shape)
                                    for v in node.inputs[1:])
