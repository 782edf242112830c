"""Softmax (and LogSoftmax) along one axis; before opset 13 over all axes from `axis` on."""
from __future__ import annotations

from ..dtypes import kernel_types
from ..magnitudes import bounded
from ..shapes import prod
from ..registry import FLOATS
from ..rows import Rows
from .kernel import Kernel, grid_1d, register


def _softmax(node, target, log: bool, coerce_2d: bool):
    x, out = node.inputs[0], node.outputs[0]
    rank = len(x.shape)
    axis = node.attrs.get("axis", 1 if coerce_2d else -1) % rank
    if coerce_2d:  # opset < 13 flattens to 2-D at `axis`
        length, inner = prod(x.shape[axis:]), 1
    else:
        length, inner = x.shape[axis], prod(x.shape[axis + 1:])
    rows = x.size // length
    local = min(64, target.elementwise_local)
    spec = [("ROWS", "int32", rows), ("L", "int32", length), ("INNER", "int32", inner)]
    params = dict(LOCAL=local, log=log, **kernel_types(out))
    return [Kernel("softmax", params, spec, [x, out], writes=[1],
                   groups=grid_1d(rows, local), local_size=(local, 1, 1), nodes=node.sources,
                   flops=5 * x.size)]


def _rows_v1(graph, node, rows: Rows):
    """Before opset 13 the op normalizes over all dims from `axis` on."""
    return [rows] if rows.axis < node.attrs.get("axis", 1) % len(node.inputs[0].shape) else None


def _rows(graph, node, rows: Rows):
    return [rows] if rows.axis != node.attrs.get("axis", -1) % len(node.inputs[0].shape) else None


@register("Softmax", since=1, dtypes=FLOATS, magnitude=bounded(1.0, weighs=True, nonnegative=True), row_wise=_rows_v1)
def lower_softmax_v1(node, target):
    return _softmax(node, target, log=False, coerce_2d=True)


@register("Softmax", since=13, dtypes=FLOATS, magnitude=bounded(1.0, weighs=True, nonnegative=True), row_wise=_rows)
def lower_softmax(node, target):
    return _softmax(node, target, log=False, coerce_2d=False)


@register("LogSoftmax", since=1, dtypes=FLOATS, row_wise=_rows_v1)
def lower_log_softmax_v1(node, target):
    return _softmax(node, target, log=True, coerce_2d=True)


@register("LogSoftmax", since=13, dtypes=FLOATS, row_wise=_rows)
def lower_log_softmax(node, target):
    return _softmax(node, target, log=True, coerce_2d=False)
