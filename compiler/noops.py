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
