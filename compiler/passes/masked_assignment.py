"""An assignment through a boolean mask, `x[mask] = value` (torch's index_put), becomes a Where.

The dynamo exporter writes it as ScatterND(x, Transpose(NonZero(mask)), updates): the positions
where the mask holds, and as many updates, a count known only at run time (NonZero's length),
which no kernel of fixed shapes can take. Where the updates are one value repeated (an Expand of
a single element to that count, as `input_ids[input_ids == image_token] = pad` in Gemma 3) or
the same positions gathered from a tensor of the data's shape (`x[mask] = y[mask]`), the result
is Where(mask, value, x): the mask widened with trailing 1s where it covers only the leading
dims of the data. Where the updates repeat one row of the data's trailing dims and the mask is
an Expand of one holding 1 in those dims, every masked position takes the row: Where(that
mask, row, x). The NonZero and what computed the count go with it, once nothing else reads
them. Runs at the end of fold_constants, before the unsupported-op check sees NonZero.
"""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Node, Value, ancestors, constant, drop_unread, expand_nodes, is_onnx


def rewrite_masked_assignments(graph: Graph) -> Graph:
    feeding = []

    def rewrite(node: Node) -> list[Node] | None:
        where = _as_where(node) if is_onnx(node, "ScatterND") else None
        if where:
            feeding.extend(node.inputs[1:3])
        return where
    graph = expand_nodes(graph, rewrite)
    return drop_unread(graph, ancestors(feeding))


def _producer(v: Value | None, *ops: str) -> Node | None:
    p = v.producer if v is not None else None
    return p if p is not None and is_onnx(p, *ops) else None


def _as_where(node: Node) -> list[Node] | None:
    data, indices, updates = node.inputs[:3]
    if node.text("reduction", "none") != "none" or data.shape is None:
        return None
    transpose = _producer(indices, "Transpose")
    nonzero = _producer(transpose.inputs[0], "NonZero") if transpose else None
    if nonzero is None or list(transpose.attrs.get("perm", [1, 0])) != [1, 0]:
        return None
    mask = nonzero.inputs[0]
    rank = len(data.shape)
    if mask.shape is None or not 1 <= len(mask.shape) <= rank \
            or tuple(mask.shape) != tuple(data.shape[:len(mask.shape)]):
        return None
    value, widen = _repeated_value(updates, indices, data), True
    if value is None and tuple(mask.shape) == tuple(data.shape):
        value, mask = _repeated_row(updates, mask, data) or (None, mask)
        widen = False   # the Expand's own source: it broadcasts as the Expand did
    if value is None:
        return None
    name, sources, nodes = node.name, list(node.sources), []
    if np.dtype(mask.dtype) != np.dtype(bool):
        as_bool = Value(f"{name}/mask", np.dtype(bool), tuple(mask.shape))
        nodes.append(Node("Cast", f"{name}/mask", [mask], [as_bool], {"to": 9}, sources=sources))
        mask = as_bool
    if widen and len(mask.shape) < rank:
        shape = tuple(mask.shape) + (1,) * (rank - len(mask.shape))
        widened = Value(f"{name}/mask_widened", np.dtype(bool), shape)
        nodes.append(Node("Reshape", f"{name}/mask_widened", [mask, constant(f"{name}/mask_shape",
                                                                            np.array(shape, np.int64))],
                          [widened], sources=sources))
        mask = widened
    nodes.append(Node("Where", name, [mask, value, data], list(node.outputs), sources=sources))
    return nodes


def _repeated_row(updates: Value, mask: Value, data: Value) -> tuple[Value, Value] | None:
    """(row, small mask) where the updates are one row of the data's trailing dims repeated (an
    Expand of it to [count, *row], flattened: T5Gemma 2's `embeds[image_mask] = eoi_embedding`)
    and the mask an Expand of a small mask holding 1 in those dims, so that every masked position
    takes the row whole; None otherwise."""
    v = updates
    while _producer(v, "Reshape"):
        v = v.producer.inputs[0]
    expand = _producer(mask, "Expand")
    if expand is None or _producer(v, "Expand") is None:
        return None
    row, small, rank = v.producer.inputs[0], expand.inputs[0], len(data.shape)
    if row.shape is None or small.shape is None or not row.shape or len(small.shape) > rank:
        return None
    width = len(row.shape)
    aligned = (1,) * (rank - len(small.shape)) + tuple(small.shape)
    if tuple(row.shape) != tuple(data.shape[rank - width:]) or np.dtype(row.dtype) != np.dtype(data.dtype) \
            or any(d != 1 for d in aligned[rank - width:]):
        return None
    return row, small


def _repeated_value(updates: Value, indices: Value, data: Value) -> Value | None:
    """What every update is: a single element (through Reshapes and an Expand), or the data-shaped
    tensor the same positions were gathered from; None otherwise."""
    v = updates
    while _producer(v, "Reshape"):
        v = v.producer.inputs[0]
    gathered = _producer(v, "GatherND")
    if gathered is not None and gathered.inputs[1] is indices and not gathered.attrs.get("batch_dims", 0) \
            and gathered.inputs[0].shape is not None and tuple(gathered.inputs[0].shape) == tuple(data.shape):
        return gathered.inputs[0]
    if _producer(v, "Expand"):
        v = v.producer.inputs[0]
    if v.shape is not None and int(np.prod(v.shape)) == 1 and np.dtype(v.dtype) == np.dtype(data.dtype):
        return v
    return None
