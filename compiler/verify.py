"""The IR verifier: what every pass must leave true of a Graph, checked between passes.

run_passes calls verify(graph, after=<pass>) after every pass when VKC_VERIFY=1 (the test suite
sets it), so a pass that leaves a dangling producer, a node before its inputs or a wrong shape
fails there, named with the node, instead of in a later pass or a kernel.

A graph is valid when:
- every value has a dtype and a static shape (an unnamed optional output nothing reads may
  have none), and a constant's agree with its data;
- every node's inputs are ready where it stands: a graph input, a constant, an output of a node
  earlier in the list, or a view of a ready value; so there are no cycles;
- producer and consumer links are those of the node list, and no value has two producers;
- every node's outputs are read by a node, through a view or as a graph output (only from
  remove_dead_nodes on: before it, passes leave what they bypass for it to drop);
- every graph output is ready at the end;
- each ONNX node's outputs have the dtype and shape onnx's shape inference gives it (a kernel
  that computes float16 may store float16 where ONNX says float32, or the reverse: it rounds
  at the store), and a vkc.Elementwise node's operands broadcast to its output.
"""
from __future__ import annotations

import os

import numpy as np

from .errors import CompileError
from .ir import Graph, Node, Value
from .passes.onnx_node import infer_output_types
from .registry import find_rule
from .lower.elementwise import operand_strides

# From this pass on every node must have a reader (passes/outputs.py).
DEAD_NODES_GONE_AFTER = "remove_dead_nodes"
# Attributes passes add to ONNX nodes for the lowering; onnx's inference does not know them.
IR_ATTRIBUTES = ("epilogue", "n_op_inputs", "written_in_place", "input_columns", "paired", "input_perms", "output_perm", "epilogue_perms")


class InvalidGraph(CompileError):
    """A pass left the IR inconsistent: a compiler bug, named with the pass and the node."""


def enabled() -> bool:
    return os.environ.get("VKC_VERIFY", "") not in ("", "0")


def verify(graph: Graph, after: str = "the frontend", *, dead_nodes: bool = False) -> None:
    """Raise InvalidGraph naming `after` (the pass that ran last) and the node at fault."""
    problem = _first_problem(graph, dead_nodes)
    if problem is not None:
        raise InvalidGraph(f"the IR is invalid after {after}: {problem} (a compiler bug; "
                           "VKC_VERIFY=0 skips this check)")


def _describe(node: Node) -> str:
    return f"{node.op_type} node '{node.name}'"


def _first_problem(graph: Graph, dead_nodes: bool) -> str | None:
    listed = {id(n) for n in graph.nodes}
    if len(listed) != len(graph.nodes):
        twice = next(n for i, n in enumerate(graph.nodes) if n in graph.nodes[:i])
        return f"{_describe(twice)} is listed twice"
    producer: dict[int, Node] = {}
    for node in graph.nodes:
        for v in node.outputs:
            if id(v) in producer:
                return f"'{v.name}' is produced by {_describe(producer[id(v)])} and {_describe(node)}"
            producer[id(v)] = node
    ready = {id(v) for v in graph.inputs}
    for node in graph.nodes:
        for v in node.inputs:
            if v is not None and not _ready(v, ready):
                made = f"{_describe(v.producer)}, listed after it," if id(v) in producer \
                    else "no node of the graph"
                return f"{_describe(node)} reads '{v.name}', which {made} produces"
            if v is not None and node not in v.consumers:
                return f"'{v.name}' does not list its reader {_describe(node)} (relink)"
        for v in node.outputs:
            if v.producer is not node:
                return f"'{v.name}' does not link its producer {_describe(node)} (relink)"
            ready.add(id(v))
        problem = _shape_problem(graph, node)
        if problem is not None:
            return problem
    for v in graph.values():
        problem = _value_problem(graph, v, listed)
        if problem is not None:
            return problem
    for v in graph.outputs:
        if not _ready(v, ready):
            return f"graph output '{v.name}' is produced by no node of the graph"
    if dead_nodes:
        read = set()
        for v in [*graph.outputs, *(v for n in graph.nodes for v in n.inputs if v is not None)]:
            while v is not None:  # a view reads the values along its alias chain
                read.add(id(v))
                v = v.alias_of
        for node in graph.nodes:
            if not any(id(v) in read for v in node.outputs):
                return f"nothing reads the outputs of {_describe(node)}"
    return None


def _ready(v: Value, ready: set[int]) -> bool:
    while True:
        if id(v) in ready or v.is_constant:
            return True
        if v.alias_of is None:
            return False
        v = v.alias_of


def _value_problem(graph: Graph, v: Value, listed: set[int]) -> str | None:
    if v.producer is not None and id(v.producer) not in listed:
        return f"'{v.name}' links producer {_describe(v.producer)}, which is not in the graph"
    if any(id(c) not in listed for c in v.consumers):
        gone = next(c for c in v.consumers if id(c) not in listed)
        return f"'{v.name}' lists reader {_describe(gone)}, which is not in the graph"
    if v.dtype is None or v.shape is None:
        if v.name or v.consumers or graph.is_output(v):
            return f"'{v.name}' has no {'dtype' if v.dtype is None else 'static shape'}"
        return None
    if v.is_constant and (np.dtype(v.dtype) != v.data.dtype or tuple(v.shape) != v.data.shape):
        return (f"constant '{v.name}' is typed {np.dtype(v.dtype).name}{list(v.shape)} but holds "
                f"{v.data.dtype.name}{list(v.data.shape)}")
    if v.alias_of is not None:
        root = v.alias_of
        if root.shape is not None and root.dtype is not None and \
                v.alias_offset + v.nbytes > root.nbytes:
            return (f"view '{v.name}' ({v.nbytes} bytes at {v.alias_offset}) runs past the "
                    f"{root.nbytes} bytes of '{root.name}'")
    return None


def _shape_problem(graph: Graph, node: Node) -> str | None:
    if node.op_type == "vkc.Elementwise":
        out = node.outputs[0]
        for j, v in enumerate(node.inputs):
            if operand_strides(node, j, v, out.shape) is None:
                return (f"{_describe(node)}: operand '{v.name}' {list(v.shape)} does not "
                        f"broadcast to its output {list(out.shape)}")
        return None
    if node.domain not in ("", "ai.onnx") or node.op_type.startswith("vkc."):
        return None
    inferred = _inferred(graph, node)
    for v, (dtype, shape) in zip(node.outputs, inferred or []):
        if v.shape is None or not v.name:
            continue
        if (shape is not None and tuple(shape) != tuple(v.shape)) or (
                dtype is not None and np.dtype(dtype) != np.dtype(v.dtype)
                and not _float_store(graph, node, np.dtype(dtype), np.dtype(v.dtype))):
            return (f"{_describe(node)} output '{v.name}' is typed {np.dtype(v.dtype).name}"
                    f"{list(v.shape)} but ONNX infers {np.dtype(dtype).name if dtype else '?'}"
                    f"{list(shape) if shape is not None else '?'}")
    return None


def _float_store(graph: Graph, node: Node, onnx_dtype: np.dtype, dtype: np.dtype) -> bool:
    """Whether `node` stores in float16 what ONNX types float32, or the reverse, as kernels
    that compute float16 may (they compute in float32 and round at the store: the precision
    pass's store casts, passes/store_casts.py)."""
    floats = {np.dtype(np.float16), np.dtype(np.float32)}
    rule = find_rule(node.op_type, node.domain, graph.opset)
    return {onnx_dtype, dtype} == floats and rule is not None and rule.computes("float16")


def _inferred(graph: Graph, node: Node):
    """onnx's output types for `node`, cached on the node's form (op, attributes, input types);
    None where the node carries the lowering's additions or onnx cannot infer it."""
    if any(a in node.attrs for a in IR_ATTRIBUTES):
        return None
    key = (node.op_type, repr(sorted(node.attrs.items())), tuple(
        None if v is None else (np.dtype(v.dtype).name, tuple(v.shape),
                                _small_data(v)) for v in node.inputs))
    cache = graph.__dict__.setdefault("_inferred_types", {})
    if key not in cache:
        try:
            cache[key] = infer_output_types(node, graph.opset, max_initializer_size=64)
        except Exception:  # noqa: BLE001 - onnx raises several types; nothing to compare then
            cache[key] = None
    return cache[key]


def _small_data(v: Value):
    """The values of a small constant (shapes, axes): inference reads them."""
    return v.data.tobytes() if v.is_constant and v.size <= 64 else None
