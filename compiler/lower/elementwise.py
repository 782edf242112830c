"""Fused elementwise expressions (`vkc.Elementwise`, built by passes/elementwise.py)."""
from __future__ import annotations

from .. import expr as E
from ..shapes import broadcast_strides, collapse_dims
from .registry import Kernel, grid_1d, register, require_float32


@register("vkc.Elementwise")
def lower_elementwise(node, target):
    out = node.outputs[0]
    require_float32(node, [*node.inputs, out])
    operands = node.inputs
    strides = [broadcast_strides(v.shape, out.shape) for v in operands]
    out_strides = broadcast_strides(out.shape, out.shape)
    dims, collapsed = collapse_dims(out.shape, [out_strides, *strides])
    out_c, in_c = collapsed[0], collapsed[1:]
    # How each operand is read: at the output index, at 0, or through its own strides.
    modes = []
    for v, s in zip(operands, in_c):
        modes.append("same" if s == out_c and v.size == out.size else
                     "scalar" if all(x == 0 for x in s) else "strided")
    spec = [("TOTAL", "int32", out.size)]
    spec += [(f"D{d}", "int32", dims[d]) for d in range(1, len(dims))]
    for j, (mode, s) in enumerate(zip(modes, in_c)):
        if mode == "strided":
            spec += [(f"S{j}_{d}", "int32", s[d]) for d in range(len(dims))]

    def leaf(t):
        j = t[1]
        if modes[j] == "same":
            return f"IN{j}[i]"
        if modes[j] == "scalar":
            return f"IN{j}[0]"
        return f"IN{j}[" + " + ".join(f"c{d} * S{j}_{d}" for d in range(len(dims))) + "]"

    tree = node.attrs["expr"]
    local = target.elementwise_local
    params = dict(LOCAL=local, n_inputs=len(operands), rank=len(dims),
                  strided="strided" in modes, expr=E.render(tree, leaf))
    return [Kernel("elementwise", params, spec, [*operands, out], writes=[len(operands)],
                   groups=grid_1d(out.size, local), local_size=(local, 1, 1),
                   nodes=node.sources, flops=out.size * E.count_ops(tree))]
