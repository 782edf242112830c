"""Transpose, Expand and the copies of graph outputs: strided copies (strided_copy.py)."""
from __future__ import annotations

from ..errors import CompileError
from ..noops import identity_perm, same_shape
from ..rows import Rows
from ..shapes import broadcast_strides, contiguous_strides
from .kernel import register
from .strided_copy import COPIES, strided_copy


@register("vkc.Copy", dtypes=None, float16=True)
def lower_copy(node, target):
    """A graph output that is a constant or an input, copied as it is (any dtype but float32,
    which an elementwise kernel copies)."""
    x, out = node.inputs[0], node.outputs[0]
    return strided_copy(node, target, x, out, contiguous_strides(x.shape))


def _transpose_rows(graph, node, rows: Rows):
    rank = len(node.inputs[0].shape)
    perm = list(node.attrs.get("perm", range(rank - 1, -1, -1)))
    return [Rows(perm[rows.axis], rows.start, rows.stop)]


@register("Transpose", dtypes=None, float16=True, dtypes_doc=COPIES, noop=identity_perm,
          row_wise=_transpose_rows)
def lower_transpose(node, target):
    x, out = node.inputs[0], node.outputs[0]
    rank = len(x.shape)
    perm = list(node.attrs.get("perm", range(rank - 1, -1, -1)))
    in_strides = contiguous_strides(x.shape)
    return strided_copy(node, target, x, out, [in_strides[p] for p in perm])


@register("Expand", since=8, dtypes=None, float16=True, dtypes_doc=COPIES, constant_inputs=(1,),
          limits="shape computed at run time", noop=same_shape)
def lower_expand(node, target):
    x, out = node.inputs[0], node.outputs[0]
    strides = broadcast_strides(x.shape, out.shape)
    if strides is None:
        raise CompileError(f"Expand '{node.name}': {list(x.shape)} does not broadcast to "
                           f"{list(out.shape)}.")
    return strided_copy(node, target, x, out, strides)
