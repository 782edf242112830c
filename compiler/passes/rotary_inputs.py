"""A rotary embedding reads its part of a packed projection in place: where Q, K and V come out of
one product (passes/merge_projections.py) and a Split, the rotary kernels of Q and K read their
columns of the product's rows (the node's `input_columns`), as fuse_attention's kernel reads V,
so the Split writes nothing any kernel reads and goes.

Runs on ONNX nodes, after merge_projections and before fuse_attention.
"""
from __future__ import annotations

from ..ir import Graph, Node, is_onnx

MS = "com.microsoft"


def is_rotary_of(node: Node, v) -> bool:
    """Whether `node` is a rotary embedding of the 3-D tensor `v` (its input 0), which can read
    v as columns of a wider tensor."""
    return node.domain == MS and node.op_type == "RotaryEmbedding" and node.inputs[0] is v \
        and v.shape is not None and len(v.shape) == 3


def read_rotary_inputs_in_place(graph: Graph) -> Graph:
    changed = False
    for node in graph.nodes:
        if node.domain != MS or node.op_type != "RotaryEmbedding" or "input_columns" in node.attrs:
            continue
        x = node.inputs[0]
        split = x.producer
        if not is_rotary_of(node, x) or not is_onnx(split, "Split") or x.alias_of is not None \
                or not graph.used_only_by(x, node):
            continue
        packed = split.inputs[0]
        axis = split.attrs.get("axis", 0) % len(packed.shape)
        if len(packed.shape) != 3 or axis != 2 or tuple(packed.shape[:2]) != tuple(x.shape[:2]):
            continue
        first = sum(o.shape[2] for o in split.outputs[:split.outputs.index(x)])
        node.inputs[0] = packed
        node.attrs["input_columns"] = (first, packed.shape[2])
        changed = True
    if changed:
        graph.relink()
    return graph
