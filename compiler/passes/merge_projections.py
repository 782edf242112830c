"""The query, key and value projections of an attention block, as BERT's, DistilBERT's and
Whisper's exports write them (MatMuls of the same activations by constant weights, each with its
own bias Add), become one MatMul by the weights side by side, one bias Add and a Split: the form
GPT-2's export has. One GEMM of N = 3 * hidden fills the device where three of N = hidden each
needed split-K at batch 1 (twice the dispatches), and passes/fuse_attention.py reads Q, K and V in
place from its output through the Split, so the Split costs no copy.

Only projections whose results feed matmuls through views, Transposes and scalings by a constant
right before the product (which fuse_attention takes over) alone are merged: where another op (a
GLU's gate, Whisper's scaling before the head split) reads one, the Split would become copy kernels.

Runs on ONNX nodes, after views (Reshapes are aliases) and before fuse_attention.
"""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Node, Value, is_onnx, reaches_only
from .fuse_attention import scaling_factor
from .rotary_inputs import is_rotary_of


def merge_projections(graph: Graph) -> Graph:
    by_input: dict[int, list[tuple[Node, Node | None]]] = {}
    for node in graph.nodes:
        member = _projection(graph, node)
        if member is not None:
            by_input.setdefault(id(node.inputs[0]), []).append(member)
    for members in by_input.values():
        k = members[0][0].inputs[1].shape[0]
        members = [m for m in members if m[0].inputs[1].shape[0] == k
                   and m[0].inputs[1].dtype == members[0][0].inputs[1].dtype]
        if len(members) > 1:
            _merge(graph, members)
    graph.relink()
    return graph


def _projection(graph: Graph, node: Node) -> tuple[Node, Node | None] | None:
    """(MatMul, its bias Add or None) when `node` is X x W with W a constant 2-D weight whose
    result (after the bias) only feeds matmuls."""
    if not is_onnx(node, "MatMul") or len(node.inputs) != 2:
        return None
    x, w = node.inputs
    y = node.outputs[0]
    if (x.is_constant or not w.is_constant or len(w.shape) != 2 or len(x.shape) < 2
            or w.dtype != x.dtype or graph.is_output(y)):
        return None
    add = y.consumers[0] if len(y.consumers) == 1 else None
    if is_onnx(add, "Add") and y.alias_of is None and graph.used_only_by(y, add):
        bias = add.inputs[1] if add.inputs[0] is y else add.inputs[0]
        if bias.is_constant and bias.dtype == y.dtype and bias.size == w.shape[1] and \
                add.outputs[0].shape == y.shape and all(d == 1 for d in bias.shape[:-1]):
            return (node, add) if _feeds_matmuls(graph, add.outputs[0]) else None
    return (node, None) if _feeds_matmuls(graph, y) else None


def _feeds_matmuls(graph: Graph, v: Value) -> bool:
    """Whether every reader of v's bytes is a MatMul or a rotary embedding of v (which reads its
    part of the merged product in place: passes/rotary_inputs.py), or a Transpose, an Expand (GQA's
    repeated K/V heads, read at stride 0), a view of v or a scaling by
    a constant scalar (the split scale of SDPA's export, which fuse_attention takes over) whose own
    readers are."""
    return reaches_only(graph, v, ends=lambda n: is_onnx(n, "MatMul") or is_rotary_of(n, v),
                        through=lambda n: is_onnx(n, "Transpose", "Expand") or _scales_matmul_operand(graph, n))


def _scales_matmul_operand(graph: Graph, node: Node) -> bool:
    """A scaling by a constant scalar that only MatMuls read: SDPA's export scales Q and Kᵀ right
    before their product, where fuse_attention takes the factor into its kernel. (Whisper's
    scaling of Q before the head split is no such node: it stays a kernel.)"""
    out = node.outputs[0]
    return scaling_factor(graph, node) is not None and not graph.is_output(out) and \
        bool(out.consumers) and all(is_onnx(c, "MatMul") for c in out.consumers)


def _merge(graph: Graph, members: list[tuple[Node, Node | None]]) -> None:
    first = members[0][0]
    x = first.inputs[0]
    weights = [mm.inputs[1].data for mm, _ in members]
    sizes = [w.shape[1] for w in weights]
    name = "+".join(mm.name for mm, _ in members)
    weight = Value(f"{name}/weight", x.dtype, (weights[0].shape[0], sum(sizes)),
                   data=np.ascontiguousarray(np.concatenate(weights, axis=1)))
    results = [(add or mm).outputs[0] for mm, add in members]
    shape = tuple(results[0].shape[:-1]) + (sum(sizes),)
    product = Value(f"{name}/product", x.dtype, shape)
    sources = [s for mm, add in members for n in (mm, add) if n is not None for s in n.sources]
    nodes = [Node("MatMul", f"{name}/matmul", [x, weight], [product], sources=sources)]
    if any(add is not None for _, add in members):
        # A projection without a bias (Whisper's key) adds zeros.
        bias = np.concatenate([np.zeros(n, x.dtype) if add is None else
                               next(i for i in add.inputs if i.is_constant).data.reshape(-1)
                               for (_, add), n in zip(members, sizes)])
        biased = Value(f"{name}/biased", x.dtype, shape)
        nodes.append(Node("Add", f"{name}/bias", [product, Value(f"{name}/bias_values", x.dtype, bias.shape, data=bias)],
                          [biased], sources=sources))
        product = biased
    split = Value(f"{name}/split", np.dtype(np.int64), (len(sizes),), data=np.array(sizes, np.int64))
    nodes.append(Node("Split", f"{name}/split", [product, split], results, {"axis": len(shape) - 1},
                      sources=sources))
    gone = {id(n) for mm, add in members for n in (mm, add) if n is not None}
    at = graph.nodes.index(first)
    graph.nodes[at:at + 1] = nodes
    graph.nodes = [n for n in graph.nodes if id(n) not in gone]
