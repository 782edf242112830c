"""The tanh approximation of GELU as exporters write it becomes one com.microsoft FastGelu node:

    0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)))

(GPT-2's gelu_new, torch's gelu(approximate="tanh"): Gemma, Phi, BLOOM), with the products
in any order and grouping, x^3 as Pow(x, 3) or x * x * x. As separate nodes its x^3 overflows
float16 storage for |x| above 40, which keeps the whole chain float32 under --precision fp16
(passes/float16_range.py); as one node nothing in between is stored, and it fuses into the
product before it like any activation.

Runs on ONNX nodes, after views and before apply_precision.
"""
from __future__ import annotations

import math

import numpy as np

from ..ir import Graph, Node, Value, is_onnx

MS = "com.microsoft"
SQRT_2_OVER_PI = math.sqrt(2 / math.pi)
CUBIC = 0.044715


def fuse_gelu(graph: Graph) -> Graph:
    for tanh in [n for n in graph.nodes if is_onnx(n, "Tanh")]:
        match = _match(graph, tanh)
        if match is not None:
            _rewrite(graph, *match)
    return graph


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-5 * abs(b)


def _scalar(v: Value) -> float | None:
    if v.is_constant and v.size == 1 and np.dtype(v.dtype).kind == "f":
        return float(v.data.reshape(-1)[0])
    return None


def _product(graph: Graph, v: Value, nodes: list[Node], root: bool = True) -> tuple[list[Value], float]:
    """v as a product: its non-constant factors and the constant one, looking through Mul nodes
    whose results only the product reads (those are added to `nodes`)."""
    node = v.producer
    if not is_onnx(node, "Mul") or not (root or graph.sole_consumer(v) is not None):
        return [v], 1.0
    nodes.append(node)
    leaves, k = [], 1.0
    for x in node.inputs:
        c = _scalar(x)
        if c is not None:
            k *= c
        else:
            sub, sk = _product(graph, x, nodes, root=False)
            leaves += sub
            k *= sk
    return leaves, k


def _cube_of(graph: Graph, v: Value, nodes: list[Node]) -> Value | None:
    """x when v is Pow(x, 3) read only by its consumer (x * x * x is a product's three leaves)."""
    node = v.producer
    if is_onnx(node, "Pow") and _scalar(node.inputs[1]) == 3.0 and graph.sole_consumer(v) is not None:
        nodes.append(node)
        return node.inputs[0]
    return None


def _match(graph: Graph, tanh: Node):
    nodes = [tanh]
    # Inside: tanh(c1 * (x + c2 * x^3))
    u = tanh.inputs[0]
    if graph.sole_consumer(u) is None:
        return None
    inner, c1 = _product(graph, u, nodes, root=False)
    if len(inner) != 1 or not _close(c1, SQRT_2_OVER_PI):
        return None
    add = inner[0].producer
    if not is_onnx(add, "Add") or graph.sole_consumer(inner[0]) is None:
        return None
    nodes.append(add)
    x = None
    for a, b in (add.inputs, add.inputs[::-1]):
        found = []
        terms, c2 = _product(graph, b, found, root=False) if graph.sole_consumer(b) is not None else ([b], 1.0)
        if len(terms) == 3 and terms[0] is terms[1] is terms[2]:
            cubed = terms[0]
        else:
            cubed = _cube_of(graph, terms[0], found) if len(terms) == 1 else None
        if cubed is a and _close(c2, CUBIC):
            x = a
            nodes += found
            break
    if x is None:
        return None
    # Outside: 0.5 * x * (1 + tanh(..))
    t = tanh.outputs[0]
    one_plus = graph.sole_consumer(t)
    if not is_onnx(one_plus, "Add") or _scalar(one_plus.inputs[0] if one_plus.inputs[1] is t else
                                                 one_plus.inputs[1]) != 1.0:
        return None
    nodes.append(one_plus)
    a = one_plus.outputs[0]
    top = a
    while is_onnx(graph.sole_consumer(top), "Mul"):
        top = top.consumers[0].outputs[0]
        found = []
        leaves, k = _product(graph, top, found)
        if _close(k, 0.5) and len(leaves) == 2 and {id(v) for v in leaves} == {id(x), id(a)}:
            return nodes + found, x, top
    return None


def _rewrite(graph: Graph, nodes: list[Node], x: Value, y: Value) -> None:
    order = {id(n): i for i, n in enumerate(graph.nodes)}
    nodes = sorted({id(n): n for n in nodes}.values(), key=lambda n: order[id(n)])
    last = nodes[-1]
    gelu = Node("FastGelu", last.name, [x], [y], domain=MS,
                sources=[s for n in nodes for s in n.sources])
    gone = {id(n) for n in nodes}
    graph.nodes = [gelu if n is last else n for n in graph.nodes if n is last or id(n) not in gone]
    graph.relink()
