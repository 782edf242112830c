"""A part of a packed projection read in place: where Q, K and V come out of one product
(passes/merge_projections.py) and a Split along its last axis, a node whose op declares
`reads_columns` (a rotary embedding's input, TensorScatter's cache update) reads its part's
columns of the product's rows (the node's `input_columns`), as fuse_attention's kernel reads V.
It may read the part through a view of all of it: a decode step's head split, [1, 1, heads *
size] as [1, heads, 1, size], keeps the order of the bytes. The Split then writes nothing any
kernel reads and goes. Two such readers of neighbouring columns whose op joins them (Q's and K's
rotary embeddings, same tables and positions) become one kernel with an output each.

Runs on ONNX nodes, after merge_projections and before fuse_attention.
"""
from __future__ import annotations

from ..ir import Graph, Node, Value, is_onnx
from ..registry import fact

# The kernels move whole 32-bit words of the part (TensorScatter's update) for elements of 8 bits
# and wider: parts start and end on a multiple of 4 columns.
COLUMN_STEP = 4


def column_slot(node: Node) -> int | None:
    """The input slot `node` can read as columns of a wider tensor (its op's `reads_columns`),
    where that input is present."""
    slots = fact(node, "reads_columns")
    return slots[0] if slots and node.input(slots[0]) is not None else None


def view_of_all(x: Value, v: Value) -> bool:
    """Whether x is v or a view (a reshape) of all of v's bytes, from the first."""
    offset, w = 0, x
    while w is not v:
        if w.alias_of is None:
            return False
        offset, w = offset + w.alias_offset, w.alias_of
    return offset == 0 and x.nbytes == v.nbytes


def reads_part(node: Node, v: Value) -> bool:
    """Whether `node` reads v, or a view of all of it, where it can read columns of a wider tensor."""
    slot = column_slot(node)
    return slot is not None and view_of_all(node.inputs[slot], v)


def read_split_parts_in_place(graph: Graph) -> Graph:
    changed = False
    for node in graph.nodes:
        slot = column_slot(node)
        if slot is None or "input_columns" in node.attrs:
            continue
        x = node.inputs[slot]
        part = x.root()
        split = part.producer
        if not is_onnx(split, "Split") or not view_of_all(x, part) or not graph.used_only_by(part, node):
            continue
        packed = split.inputs[0]
        axis = split.attrs.get("axis", 0) % len(packed.shape)
        first = sum(o.shape[axis] for o in split.outputs[:split.outputs.index(part)])
        if axis != len(packed.shape) - 1 or any(c % COLUMN_STEP for c in (first, part.shape[axis], packed.shape[axis])):
            continue
        node.inputs[slot] = packed
        node.attrs["input_columns"] = (first, packed.shape[axis], tuple(x.shape))
        changed = True
    if changed:
        graph.relink()
        _join(graph)
    return graph


def _join(graph: Graph) -> None:
    """Two nodes reading neighbouring columns of one tensor whose op `joins` them (Q's and K's
    rotary embeddings) become one kernel, where the first stood."""
    readers: dict[int, list[Node]] = {}
    for node in graph.nodes:
        slot = column_slot(node)
        if slot is not None and "input_columns" in node.attrs and fact(node, "joins"):
            readers.setdefault(id(node.inputs[slot]), []).append(node)
    for nodes in readers.values():
        nodes.sort(key=lambda n: n.attrs["input_columns"][0])
        for a, b in zip(nodes, nodes[1:]):
            if a not in graph.nodes:
                continue
            joined = fact(a, "joins")(a, b)
            if joined is not None:
                at = min(graph.nodes.index(a), graph.nodes.index(b))
                graph.nodes = [n for n in graph.nodes if n is not a and n is not b]
                graph.nodes.insert(at, joined)
    graph.relink()
