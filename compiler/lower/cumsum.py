"""CumSum along one constant axis, inclusive or exclusive, forwards or reversed: one invocation
per line along the axis, summing in order (templates/cumsum.comp.j2)."""
from __future__ import annotations

import numpy as np

from ..dtypes import kernel_types
from ..errors import CompileError
from ..shapes import prod
from .kernel import Kernel, constant_input, grid_1d, register

CUMSUM_DTYPES = ("float32", "float64", "int32", "int64")


def _evaluate(node, x, axis):
    """CumSum of constants, for fold_constants: onnx's reference evaluator refuses an axis of
    shape [1], which onnxruntime takes (position ids as CumSum(ones, [1]) - 1)."""
    axis = int(np.asarray(axis).reshape(-1)[0])
    if node.attrs.get("reverse", 0):
        x = np.flip(x, axis)
    y = np.cumsum(x, axis=axis, dtype=x.dtype)
    if node.attrs.get("exclusive", 0):
        y = np.concatenate([np.zeros_like(np.take(y, [0], axis)), np.delete(y, -1, axis)], axis)
    return [np.flip(y, axis) if node.attrs.get("reverse", 0) else y]


@register("CumSum", since=11, dtypes=CUMSUM_DTYPES, constant_inputs=(1,),
          limits="axis computed at run time", evaluate=_evaluate)
def lower_cumsum(node, target):
    x, out = node.inputs[0], node.outputs[0]
    axis = constant_input(node, 1, "the axis")
    rank = max(len(x.shape), 1)
    axis = int(axis.reshape(-1)[0])
    if not -rank <= axis < rank:
        raise CompileError(f"CumSum '{node.name}': axis {axis} is outside the rank-{rank} input "
                           f"'{x.name}'.")
    axis %= rank
    shape = tuple(x.shape) or (1,)
    length, inner = shape[axis], prod(shape[axis + 1:])
    lines = out.size // max(length, 1)
    if out.size == 0:
        return []
    spec = [("LINES", "int32", lines), ("LENGTH", "int32", length), ("INNER", "int32", inner)]
    local = target.elementwise_local
    params = dict(LOCAL=local, exclusive=bool(node.attrs.get("exclusive", 0)),
                  reverse=bool(node.attrs.get("reverse", 0)), **kernel_types(out))
    return [Kernel("cumsum", params, spec, [x, out], writes=[1], groups=grid_1d(lines, local),
                   local_size=(local, 1, 1), nodes=node.sources, flops=out.size)]
