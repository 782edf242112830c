"""Concat: one slice copy per input into the output, except for the inputs whose producers write
straight into their slice (passes/concat_slices.py)."""
from __future__ import annotations

from ..dtypes import kernel_types
from ..registry import FLOATS
from ..shapes import prod
from .kernel import Kernel, grid_1d, register


@register("Concat", dtypes=FLOATS)
def lower_concat(node, target):
    out = node.outputs[0]
    axis = node.attrs["axis"] % len(out.shape)
    outer, inner = prod(out.shape[:axis]), prod(out.shape[axis + 1:])
    local = target.elementwise_local
    params = dict(LOCAL=local, **kernel_types(out))
    kernels, offset = [], 0
    # Set by passes/concat_slices.py: the inputs already written into their slice.
    placed_inputs = node.attrs.get("written_in_place", (False,) * len(node.inputs))
    for x, placed in zip(node.inputs, placed_inputs):
        a_in = x.shape[axis]
        total = outer * a_in * inner
        if total and not placed:
            spec = [("TOTAL", "int32", total), ("INNER", "int32", inner), ("A_IN", "int32", a_in),
                    ("A_OUT", "int32", out.shape[axis]), ("OFFSET", "int32", offset)]
            kernels.append(Kernel("copy_slice", params, spec, [x, out], writes=[1],
                                  groups=grid_1d(total, local), local_size=(local, 1, 1),
                                  nodes=node.sources))
        offset += a_in
    return kernels
