"""The graph's dataflow as ONNX requires it: every tensor written once, every read defined, no
cycle. Nodes listed out of order but acyclic are put in order, as onnxruntime does."""
from __future__ import annotations

from graphlib import CycleError, TopologicalSorter

import onnx

from .errors import CompileError


def _node_name(node: onnx.NodeProto, index: int) -> str:
    return node.name or f"{node.op_type}_{index}"


def _subgraph_reads(graph: onnx.GraphProto) -> set[str]:
    """Names a subgraph (If, Loop, Scan body) reads from the scopes around it."""
    defined = {i.name for i in graph.input} | {t.name for t in graph.initializer} \
        | {t.values.name for t in graph.sparse_initializer}
    reads: set[str] = set()
    for node in graph.node:
        reads |= set(_reads(node)) - defined
        defined |= set(node.output)
    reads |= {o.name for o in graph.output} - defined
    return reads


def _reads(node: onnx.NodeProto) -> list[str]:
    """A node's inputs, then what its subgraphs read from outside them."""
    outer = set()
    for attr in node.attribute:
        for g in [attr.g] if attr.HasField("g") else list(attr.graphs):
            outer |= _subgraph_reads(g)
    return [x for x in node.input if x] + sorted(outer - set(node.input))


def ordered_nodes(graph: onnx.GraphProto) -> list[int] | None:
    """The indices of the graph's nodes in an order where each reads only what comes before it, or None when
    they are already in one. Refuses a tensor written twice, a read of a tensor nothing defines
    and a cycle, naming the node."""
    given = {i.name for i in graph.input} | {t.name for t in graph.initializer} \
        | {t.values.name for t in graph.sparse_initializer}
    writer: dict[str, int] = {}
    for i, node in enumerate(graph.node):
        for out in filter(None, node.output):
            if out in writer or out in given:
                first = (f"node '{_node_name(graph.node[writer[out]], writer[out])}'" if out in writer
                         else "a graph input or initializer")
                raise CompileError(f"tensor '{out}' is written by both {first} and node "
                                   f"'{_node_name(node, i)}' ({node.op_type}); an ONNX tensor has one "
                                   "writer (onnx.checker refuses this model too): re-export the model.")
            writer[out] = i
    needs = []
    for i, node in enumerate(graph.node):
        deps = set()
        for x in _reads(node):
            if x in writer:
                deps.add(writer[x])
            elif x not in given:
                raise CompileError(f"node '{_node_name(node, i)}' ({node.op_type}) reads '{x}', which no "
                                   "node, graph input or initializer defines (onnx.checker refuses this "
                                   "model too): the model is incomplete; re-export it.")
        needs.append(deps)
    if all(d < i for i, deps in enumerate(needs) for d in deps):
        return None
    try:
        return list(TopologicalSorter(dict(enumerate(needs))).static_order())
    except CycleError as e:
        names = " -> ".join(f"'{_node_name(graph.node[j], j)}'" for j in reversed(e.args[1]))
        raise CompileError(f"the graph has a cycle ({names}): a node reads, through others, "
                           "its own output. ONNX graphs are acyclic (onnx.checker and "
                           "onnxruntime refuse this model too); re-export the model.") from None
