"""Nodes that compute the same thing become one: the same op with the same attributes on the same
inputs, where equal small constants (the scalars and shape vectors exporters write once per
layer) count as the same input. Exporters repeat per-layer work that does not depend on the
layer: the TorchScript export of scaled_dot_product_attention turns the padding mask into an
additive one (`Where(mask, 0, -inf)`) in every layer, and a model builder casts the cache length
once per layer. One kernel then serves every layer.

Runs first, on ONNX nodes as the frontend left them.
"""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Node, Value
from ..registry import fact

# Constants up to this many elements are compared by value; larger ones (weights) by identity.
SMALL_CONSTANT = 64
# Ops that draw new values at every call: two such nodes are two draws.
RANDOM_OPS = ("RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike",
              "Multinomial", "Bernoulli")


def merge_common_subexpressions(graph: Graph) -> Graph:
    kept: dict[tuple, Node] = {}
    same: dict[int, Value] = {}   # id(value of a merged node) -> the kept node's value
    nodes = []
    for node in graph.nodes:
        node.inputs = [same.get(id(v), v) if v is not None else None for v in node.inputs]
        key = _key(graph, node)
        first = kept.get(key) if key is not None else None
        if first is None:
            if key is not None:
                kept[key] = node
            nodes.append(node)
            continue
        for mine, theirs in zip(node.outputs, first.outputs):
            same[id(mine)] = theirs
        first.sources += [s for s in node.sources if s not in first.sources]
    if same:
        graph.nodes = nodes
        graph.relink()
    return graph


def _key(graph: Graph, node: Node) -> tuple | None:
    """What makes two nodes compute the same outputs; None for a node that is never merged."""
    if node.op_type in RANDOM_OPS or fact(node, "updates_in_place") or \
            any(graph.is_output(o) for o in node.outputs if o is not None):
        return None
    attrs = _hashable(node.attrs)
    if attrs is None:
        return None
    return (node.domain, node.op_type, len(node.outputs), attrs,
            tuple(_input_key(v) for v in node.inputs))


def _input_key(v: Value | None):
    if v is None:
        return None
    if v.is_constant and v.data.size <= SMALL_CONSTANT:
        data = np.ascontiguousarray(v.data)
        return ("constant", data.dtype.str, data.shape, data.tobytes())
    return id(v)


def _hashable(x):
    """x as a hashable key, or None where an attribute is something else (a subgraph)."""
    if isinstance(x, dict):
        items = [(k, _hashable(v)) for k, v in sorted(x.items())]
        return None if any(v is None and x[k] is not None for k, v in items) else tuple(items)
    if isinstance(x, (list, tuple)):
        items = tuple(_hashable(v) for v in x)
        return None if any(v is None and e is not None for v, e in zip(items, x)) else ("seq",) + items
    if isinstance(x, np.ndarray):
        return ("array", x.dtype.str, x.shape, x.tobytes())
    if x is None or isinstance(x, (bool, int, float, str, bytes, np.generic)):
        return x
    return None
