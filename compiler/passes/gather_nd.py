"""GatherND becomes a Gather of rows: the data viewed as [rows, slice] (the slice being the dims
the indices do not address), the rows picked by flat indices, and the result viewed in
GatherND's output shape. Views cost no kernel.

Constant indices (the dynamo exporter's mask indexing in transformers' SDPA path:
`mask[batch_idx, head_idx, q_idx, kv_idx]`) give flat indices computed here, so one gather kernel
runs. Indices computed at run time (CLIP's pooling `h[torch.arange(B), input_ids.argmax(-1)]`)
give them from elementwise ops over each index column: the column wrapped once where negative,
clamped into its dim as vkc's Gather clamps an index (ONNX leaves an index outside undefined and
onnxruntime fails on it), times its stride, summed with the batch's row offset.
"""
from __future__ import annotations

import numpy as np

from ..errors import CompileError
from ..ir import Graph, Node, Value, constant, expand_nodes, is_onnx
from ..registry import declare
from ..shapes import prod

declare("GatherND", handled_by="a Gather of rows (passes/gather_nd.py)", module=__name__,
        dtypes_doc="any; indices int64",
        limits="an index outside its dim: clamped into it (computed at run time) or refused (constant)")


def rewrite_gather_nd(graph: Graph) -> Graph:
    return expand_nodes(graph, lambda node: _rewrite(node) if is_onnx(node, "GatherND") else None)


def _flat_rows(node: Node, data_shape, indices: np.ndarray, batch_dims: int) -> np.ndarray:
    """The row of the [rows, slice] view each index tuple picks, in the indices' order."""
    k = indices.shape[-1]
    addressed = list(data_shape[:batch_dims + k])
    idx = indices.astype(np.int64)
    limits = np.array(data_shape[batch_dims:batch_dims + k], np.int64)
    idx = np.where(idx < 0, idx + limits, idx)
    if (idx < 0).any() or (idx >= limits).any():
        raise CompileError(f"GatherND '{node.name}': an index is outside the data's dims "
                           f"{list(data_shape[batch_dims:batch_dims + k])} (onnxruntime fails too).")
    position = np.indices(idx.shape[:-1])   # the first batch_dims coordinates are the batch's
    tuples = [position[j] for j in range(batch_dims)] + [idx[..., j] for j in range(k)]
    return np.ravel_multi_index(tuples, addressed).astype(np.int64)


def _rewrite(node: Node) -> list[Node]:
    data, indices = node.inputs[0], node.inputs[1]
    out = node.outputs[0]
    batch_dims = int(node.attrs.get("batch_dims", 0))
    k = indices.shape[-1]
    slice_shape = tuple(data.shape[batch_dims + k:])
    name = node.name
    if indices.is_constant:
        rows, computing = constant(f"{name}/flat_rows", _flat_rows(node, data.shape, indices.data, batch_dims)), []
    else:
        rows = Value(f"{name}/flat_rows", np.dtype(np.int64), tuple(indices.shape[:-1]))
        computing = _runtime_rows(node, data.shape, indices, batch_dims, rows)
    viewed = Value(f"{name}/rows", data.dtype, (prod(data.shape[:batch_dims + k]), prod(slice_shape)))
    picked = Value(f"{name}/picked", data.dtype, rows.shape + (prod(slice_shape),))
    return [*computing, _reshape(node, data, viewed, "as_rows"),
            Node("Gather", f"{name}/gather", [viewed, rows], [picked], {"axis": 0},
                 sources=list(node.sources)),
            _reshape(node, picked, out, "as_output")]


def _runtime_rows(node: Node, data_shape, indices: Value, batch_dims: int, rows: Value) -> list[Node]:
    """Nodes computing `rows`, the row of the [rows, slice] view each index tuple of `indices`
    (computed at run time) picks: sum_j clamp(wrap(indices[..., j])) * stride_j, plus each
    tuple's batch offset where batch_dims > 0."""
    k = indices.shape[-1]
    dims = data_shape[batch_dims:batch_dims + k]
    strides = [prod(dims[j + 1:]) for j in range(k)]
    shape, int64 = rows.shape, np.dtype(np.int64)
    nodes = []

    def add(op: str, inputs: list, tag: str, **attrs) -> Value:
        y = Value(f"{node.name}/{tag}", int64, shape)
        nodes.append(Node(op, f"{node.name}/{tag}", inputs, [y], attrs, sources=list(node.sources)))
        return y

    def scalar(tag: str, x) -> Value:
        return constant(f"{node.name}/{tag}", np.array(x, np.int64))

    zero, total = scalar("zero", 0), None
    for j, (dim, stride) in enumerate(zip(dims, strides)):
        column = add("Gather", [indices, scalar(f"column{j}", j)], f"column{j}", axis=-1)
        negative = Value(f"{node.name}/negative{j}", np.dtype(bool), shape)
        nodes.append(Node("Less", f"{node.name}/negative{j}", [column, zero], [negative],
                          sources=list(node.sources)))
        wrapped = add("Where", [negative, add("Add", [column, scalar(f"dim{j}", dim)], f"plus_dim{j}"),
                                column], f"wrapped{j}")
        clamped = add("Clip", [wrapped, zero, scalar(f"last{j}", dim - 1)], f"clamped{j}")
        term = clamped if stride == 1 else add("Mul", [clamped, scalar(f"stride{j}", stride)], f"term{j}")
        total = term if total is None else add("Add", [total, term], f"sum{j}")
    if batch_dims:  # each tuple's batch position, times the rows a batch holds
        batch = data_shape[:batch_dims]
        offsets = (np.arange(prod(batch), dtype=np.int64) * prod(dims)).reshape(
            tuple(batch) + (1,) * (len(shape) - batch_dims))
        total = add("Add", [total, constant(f"{node.name}/batch_rows", offsets)], "batch_offset")
    nodes[-1].outputs = [rows]
    return nodes


def _reshape(node: Node, x: Value, y: Value, tag: str) -> Node:
    shape = constant(f"{node.name}/{tag}_shape", np.array(y.shape, np.int64))
    return Node("Reshape", f"{node.name}/{tag}", [x, shape], [y], sources=list(node.sources))
