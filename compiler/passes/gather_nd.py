"""GatherND with constant indices (the dynamo exporter's mask indexing in transformers' SDPA
path: `mask[batch_idx, head_idx, q_idx, kv_idx]`) becomes a Gather of rows: the data viewed as
[rows, slice] (the slice being the dims the indices do not address), the rows picked by flat
indices computed here, and the result viewed in GatherND's output shape. Views cost no kernel,
so one gather kernel runs.

GatherND with indices computed at run time has no kernel: it is refused, naming the node.
"""
from __future__ import annotations

import numpy as np

from ..errors import CompileError
from ..ir import Graph, Node, Value, expand_nodes, is_onnx
from ..registry import declare
from ..shapes import prod

declare("GatherND", handled_by="a Gather of rows (passes/gather_nd.py)", module=__name__,
        dtypes_doc="any; indices int64", constant_inputs=(1,),
        limits="indices computed at run time")


def rewrite_gather_nd(graph: Graph) -> Graph:
    return expand_nodes(graph, lambda node: _rewrite(node) if is_onnx(node, "GatherND") else None)


def _const(name: str, array) -> Value:
    array = np.asarray(array)
    return Value(name, array.dtype, array.shape, data=array)


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
    if not indices.is_constant:
        raise CompileError(f"GatherND '{node.name}': its indices '{indices.name}' are computed at run "
                           "time; vkc takes GatherND with constant indices only (export with the "
                           "indices fixed, or use Gather/GatherElements).")
    batch_dims = int(node.attrs.get("batch_dims", 0))
    k = indices.shape[-1]
    rows = _flat_rows(node, data.shape, indices.data, batch_dims)
    slice_shape = tuple(data.shape[batch_dims + k:])
    name = node.name
    viewed = Value(f"{name}/rows", data.dtype, (prod(data.shape[:batch_dims + k]), prod(slice_shape)))
    picked = Value(f"{name}/picked", data.dtype, rows.shape + (prod(slice_shape),))
    return [_reshape(node, data, viewed, "as_rows"),
            Node("Gather", f"{name}/gather", [viewed, _const(f"{name}/flat_rows", rows)], [picked],
                 {"axis": 0}, sources=list(node.sources)),
            _reshape(node, picked, out, "as_output")]


def _reshape(node: Node, x: Value, y: Value, tag: str) -> Node:
    shape = _const(f"{node.name}/{tag}_shape", np.array(y.shape, np.int64))
    return Node("Reshape", f"{node.name}/{tag}", [x, shape], [y], sources=list(node.sources))
