"""Fused elementwise expressions (`vkc.Elementwise`, built by passes/elementwise.py).

float32 expressions render into `elementwise`; every other dtype goes through
`elementwise_typed`, which computes in the output's dtype (expr.Renderer) and writes packed
8/16-bit outputs a whole 32-bit word per invocation.
"""
from __future__ import annotations

import numpy as np

from .. import expr as E
from ..dtypes import scalar_type
from ..shapes import broadcast_strides, collapse_dims
from .kernel import Kernel, buffer_view, grid_1d, register, texel_reads, unsupported_dtype


def _indexing(operands, out):
    """(dims, modes, spec, index text per operand): each operand is read at the output index
    ("same"), at 0 ("scalar") or through its own strides over the output coordinates c0, c1..."""
    strides = [broadcast_strides(v.shape, out.shape) for v in operands]
    out_strides = broadcast_strides(out.shape, out.shape)
    dims, collapsed = collapse_dims(out.shape, [out_strides, *strides])
    out_c, in_c = collapsed[0], collapsed[1:]
    modes = []
    for v, s in zip(operands, in_c):
        modes.append("same" if s == out_c and v.size == out.size else
                     "scalar" if all(x == 0 for x in s) else "strided")
    spec = [("TOTAL", "int32", out.size)]
    spec += [(f"D{d}", "int32", dims[d]) for d in range(1, len(dims))]
    index = []
    for j, (mode, s) in enumerate(zip(modes, in_c)):
        if mode == "strided":
            spec += [(f"S{j}_{d}", "int32", s[d]) for d in range(len(dims))]
        index.append("i" if mode == "same" else "0" if mode == "scalar" else
                     " + ".join(f"c{d} * S{j}_{d}" for d in range(len(dims))))
    return dims, modes, spec, index


@register("vkc.Elementwise", dtypes=None)
def lower_elementwise(node, target):
    out, operands = node.outputs[0], node.inputs
    if any(np.dtype(v.dtype) != np.float32 for v in [*operands, out]):
        return _lower_typed(node, target)
    dims, modes, spec, index = _indexing(operands, out)
    tree = node.attrs["expr"]
    leaf = lambda t: f"LOAD{t[1]}({index[t[1]]})"
    local = target.elementwise_local
    texel = texel_reads(target, *operands)
    params = dict(LOCAL=local, n_inputs=len(operands), rank=len(dims), TEXEL=texel,
                  strided="strided" in modes, expr=E.render(tree, leaf))
    return [Kernel("elementwise", params, spec, [*operands, out], writes=[len(operands)],
                   groups=grid_1d(out.size, local), local_size=(local, 1, 1),
                   nodes=node.sources, flops=out.size * E.count_ops(tree),
                   texel_buffers={j: "r32f" for j in range(len(operands))} if texel else {})]


def _lower_typed(node, target):
    out, operands = node.outputs[0], node.inputs
    types = []
    for v in [*operands, out]:
        t = scalar_type(v.dtype)
        if t is None:
            raise unsupported_dtype(node, v, "arithmetic")
        types.append(t)
    *in_types, t = types
    tree = node.attrs["expr"]
    renderer = E.Renderer(t, in_types)
    try:
        expr = renderer.render(tree, lambda leaf: f"x{leaf[1]}")
    except E.Unsupported as exc:
        raise unsupported_dtype(node, out, str(exc)) from None
    dims, modes, spec, index = _indexing(operands, out)
    local = target.elementwise_local
    params = dict(LOCAL=local, rank=len(dims), strided="strided" in modes, expr=expr,
                  int64=renderer.int64, helpers=list(renderer.helpers.values()),
                  index=index, out=t, ins=in_types)
    words = -(-out.size // t.per_word)
    return [Kernel("elementwise_typed", params, spec,
                   [*map(buffer_view, operands), buffer_view(out)], writes=[len(operands)],
                   groups=grid_1d(words, local), local_size=(local, 1, 1),
                   nodes=node.sources, flops=out.size * E.count_ops(tree))]
