"""Scaled products: under `--precision fp16`, a product of two computed values that only matrix
products read (SwiGLU's silu(gate) * up, read by down_proj, float or MatMulNBits) is scaled by 2^-s and every matrix
product reading it by 2^s, where that lets both compute in float16.

float16_range bounds each factor by an activation's size (ACTIVATION), so their product may
reach ACTIVATION^2 = 65536, past float16's range: the product, the matrix product reading it and
its epilogue stayed float32 (no tensor cores for a third of a gated MLP). Scaled by 2^-s with
s = ceil(log2(bound / ACTIVATION)), the product is within an activation's size again, as a
matrix product's input is assumed to be, and the matrix product computes in float16. Powers of
two scale exactly: the values are the float16 rounding of the product with s more bits of
exponent range (only those below 2^(s-14), float16's smallest normal times 2^s, lose digits:
subnormal). The matrix product's result times 2^s has the bound it had before (ACTIVATION x
2^s), so float16_range keeps it, and what reads it, float32 as before.

Not done where a factor may itself pass float16's range (LIMIT), where the scaled product's
typical size would fall below float16's normal range, where a reader's result is not linear in
it (a bias: Conv's B, Gemm's C; the op declares `linear_in`), or where the product is a graph
output.

Runs on ONNX nodes right before apply_precision, which decides with the scaled values.
"""
from __future__ import annotations

import math

import numpy as np

from ..ir import Graph, Node, Value
from ..magnitudes import ACTIVATION, LIMIT, product_of
from ..registry import fact, find_rule
from .float16_range import SMALL, value_magnitudes

F32 = np.dtype(np.float32)


def scale_products(graph: Graph) -> Graph:
    precision = getattr(graph, "precision", None)
    if precision is None or not precision.float16 or precision.matmul_only:
        return graph
    size = value_magnitudes(graph)
    for node in list(graph.nodes):
        plan = _plan(graph, node, size)
        if plan is not None:
            _rewrite(graph, node, *plan)
    return graph


def _plan(graph: Graph, node: Node, size: dict) -> tuple[int, int] | None:
    """(the factor's input slot to scale, s) for a product worth scaling; None otherwise."""
    rule = find_rule(node.op_type, node.domain, graph.opset)
    if rule is None or rule.magnitude is not product_of or len(node.inputs) != 2:
        return None
    y = node.outputs[0]
    m = size.get(id(y))
    if np.dtype(y.dtype) != F32 or m is None or not LIMIT < m.top < math.inf:
        return None
    factors = [size.get(id(v)) for v in node.inputs]
    if any(v.root().is_constant or f is None or f.top > LIMIT for v, f in zip(node.inputs, factors)):
        return None
    s = math.ceil(math.log2(m.top / ACTIVATION))
    if m.rms * 2.0 ** -s < SMALL:   # float16 would keep few digits of it: float32 stays
        return None
    # read by matrix products only: not a graph output, not through a view
    if not y.consumers or not graph.used_only_by(y, *y.consumers) or \
            not all(_linear_in(r, y) for r in y.consumers):
        return None
    # the larger factor takes the scale: its typical size stays the further from the subnormals
    slot = max(range(2), key=lambda i: factors[i].rms)
    return slot, s


def _linear_in(reader: Node, y: Value) -> bool:
    """Whether the reader's result is linear in y, its one operand that is y (a matrix product
    without a bias: the op declares `linear_in`)."""
    slots = (fact(reader, "linear_in") or (lambda node: ()))(reader)
    return [i for i, v in enumerate(reader.inputs) if v is y] in ([i] for i in slots)


def _constant(name: str, k: float) -> Value:
    return Value(name, F32, (), data=np.array(k, F32))


def _rewrite(graph: Graph, node: Node, slot: int, s: int) -> None:
    factor = node.inputs[slot]
    scaled = Value(f"{factor.name}/scaled", factor.dtype, factor.shape)
    down = Node("Mul", f"{node.name}/scale", [factor, _constant(f"{node.name}/2^-{s}", 2.0 ** -s)],
                [scaled], sources=list(node.sources))
    node.inputs[slot] = scaled
    added = {id(node): [down, node]}
    for reader in list(node.outputs[0].consumers):
        out = reader.outputs[0]
        inner = Value(f"{out.name}/scaled", out.dtype, out.shape)
        reader.outputs[0] = inner
        up = Node("Mul", f"{reader.name}/rescale",
                  [inner, _constant(f"{reader.name}/2^{s}", 2.0 ** s)], [out], sources=list(reader.sources))
        added[id(reader)] = [reader, up]
    graph.nodes = [m for n in graph.nodes for m in added.get(id(n), [n])]
    graph.relink()
