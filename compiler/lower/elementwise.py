"""Fused elementwise expressions (`vkc.Elementwise`, built by passes/elementwise.py).

Expressions over float32 operands to a float32 output render into `elementwise` (their
intermediates may be bool: a comparison feeding a Where); every other dtype goes through
`elementwise_typed`, which loads each operand in its own dtype, computes each subtree in its type
(expr.Renderer) and writes packed 2- to 16-bit (and bool) outputs a whole 32-bit word per
invocation; it includes templates/low_precision.glsl where a type of format 1.2 takes part.
"""
from __future__ import annotations

import numpy as np

from .. import expr as E
from ..errors import CompileError
from ..dtypes import scalar_type
from ..shapes import broadcast_strides, collapse_dims, transposed_read
from .kernel import Kernel, buffer_view, grid_1d, register, texel_reads, unsupported_dtype


def operand_strides(node, j: int, v, out_shape) -> list[int] | None:
    """Operand j's element strides over the output's coordinates: broadcast, and where the node
    reads it transposed (`input_perms`, passes/transposes_in_place.py) permuted."""
    perm = node.attrs.get("input_perms", {}).get(j)
    if perm is None:
        return broadcast_strides(v.shape, out_shape)
    shape, strides = transposed_read(v.shape, perm)
    return broadcast_strides(shape, out_shape, strides)


def _indexing(node, operands, out):
    """(dims, modes, spec, index text per operand): each operand is read at the output index
    ("same"), at 0 ("scalar") or through its own strides over the output coordinates c0, c1..."""
    strides = [operand_strides(node, j, v, out.shape) for j, v in enumerate(operands)]
    for v, s in zip(operands, strides):
        if s is None:
            raise CompileError(f"{node.op_type} '{node.name}': operand '{v.name}' of shape {list(v.shape)} "
                               f"does not broadcast to its output's {list(out.shape)}.")
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


def _render(node, renderer, leaf) -> str:
    try:
        return renderer.render(node.attrs["expr"], leaf)
    except E.Unsupported as exc:
        # Name the tensor of the dtype the op would have computed in.
        v = next((v for v in [node.outputs[0], *node.inputs]
                  if exc.dtype is not None and np.dtype(v.dtype).name == exc.dtype.name),
                 node.outputs[0])
        raise unsupported_dtype(node, v, str(exc)) from None


@register("vkc.Elementwise", dtypes=None, float16=True, reads_transposed=True)
def lower_elementwise(node, target):
    out, operands = node.outputs[0], node.inputs
    if any(np.dtype(v.dtype) != np.float32 for v in [*operands, out]):
        return _lower_typed(node, target)
    dims, modes, spec, index = _indexing(node, operands, out)
    tree = node.attrs["expr"]
    renderer = E.Renderer(E.FLOAT32, [E.FLOAT32] * len(operands))
    expr = _render(node, renderer, lambda t: f"LOAD{t[1]}({index[t[1]]})")
    if renderer.int64 or renderer.low_precision:
        # a cast to int64 or through a low-precision type inside: the typed template enables
        # 64-bit integers and includes the low-precision conversions
        return _lower_typed(node, target)
    local = target.elementwise_local
    texel = texel_reads(target, *operands)
    params = dict(LOCAL=local, n_inputs=len(operands), rank=len(dims), TEXEL=texel,
                  strided="strided" in modes, expr=expr, helpers=list(renderer.helpers.values()))
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
    expr = _render(node, renderer, lambda leaf: f"x{leaf[1]}")
    dims, modes, spec, index = _indexing(node, operands, out)
    local = target.elementwise_local
    params = dict(LOCAL=local, rank=len(dims), strided="strided" in modes, expr=expr,
                  int64=renderer.int64, low_precision=renderer.low_precision,
                  helpers=list(renderer.helpers.values()),
                  index=index, out=t, ins=in_types)
    words = -(-out.size // t.per_word)
    return [Kernel("elementwise_typed", params, spec,
                   [*map(buffer_view, operands), buffer_view(out)], writes=[len(operands)],
                   groups=grid_1d(words, local), local_size=(local, 1, 1),
                   nodes=node.sources, flops=out.size * E.count_ops(tree))]
