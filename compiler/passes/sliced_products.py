"""A product whose result only Slices of its columns read (Phi-3's qkv_proj and gate_up_proj: one
MatMul by the projections' weights side by side, then a Slice for each) becomes one product per
Slice, by that Slice's columns of the weight: the Slices' copies go, and the products take the
forms the later passes know. Q, K and V merge again into one product whose parts their readers
read in place (merge_projections, split_parts); gate and up pair into one kernel that stores
silu(gate) * up (paired_products).

Taken: a MatMul of a constant 2-D weight, read only by Slices of its last axis (constant starts
and ends, step 1) whose column ranges do not overlap. Runs on ONNX nodes, after views and before
merge_projections.
"""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Node, Value, is_onnx


def slice_products(graph: Graph) -> Graph:
    changed = False
    for product in list(graph.nodes):
        ranges = _column_slices(graph, product)
        if ranges is None:
            continue
        a, w = product.inputs
        at = graph.nodes.index(product)
        parts = []
        for piece, (start, stop) in ranges:
            data = np.ascontiguousarray(w.data[:, start:stop])
            weight = Value(f"{w.name}/columns_{start}_{stop}", data.dtype, data.shape, data=data)
            parts.append(Node("MatMul", f"{product.name}/columns_{start}_{stop}", [a, weight], list(piece.outputs),
                              {}, "", product.sources + piece.sources))
        graph.nodes = graph.nodes[:at] + parts + [n for n in graph.nodes[at + 1:]
                                                   if all(n is not piece for piece, _ in ranges)]
        changed = True
    if changed:
        graph.relink()
    return graph


def _column_slices(graph: Graph, product: Node):
    """[(Slice node, (start, stop))] where `product` is taken, else None."""
    if not is_onnx(product, "MatMul") or len(product.inputs) != 2:
        return None
    a, w = product.inputs
    y = product.outputs[0]
    if not w.is_constant or len(w.shape) != 2 or y.alias_of is not None or graph.is_output(y) or not y.consumers:
        return None
    if not graph.used_only_by(y, *y.consumers):
        return None
    ranges = []
    for reader in y.consumers:
        columns = _columns(reader, y, w.shape[1])
        if columns is None:
            return None
        ranges.append((reader, columns))
    spans = sorted(r for _, r in ranges)
    if any(stop > start2 for (_, stop), (start2, _) in zip(spans, spans[1:])):
        return None
    return ranges


def _columns(node: Node, y: Value, n: int):
    """(start, stop) of the columns a Slice of y's last axis takes, step 1; else None."""
    if not is_onnx(node, "Slice") or node.inputs[0] is not y or len(node.inputs) < 3:
        return None
    rank = len(y.shape)
    consts = [node.input(i) for i in range(1, 5)]
    if any(v is not None and not v.is_constant for v in consts):
        return None
    starts, ends, axes, steps = (None if v is None else np.asarray(v.data).reshape(-1) for v in consts)
    axes = np.arange(len(starts)) if axes is None else axes
    if len(starts) != 1 or int(axes[0]) % rank != rank - 1 or (steps is not None and int(steps[0]) != 1):
        return None
    start, stop = (int(x) + n if int(x) < 0 else int(x) for x in (starts[0], ends[0]))
    start, stop = min(max(start, 0), n), min(max(stop, 0), n)
    return (start, stop) if stop > start else None
