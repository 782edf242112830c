"""ScatterElements becomes a ScatterND of single elements: each element of the indices, with its
own position in every dim but the axis, is one full index tuple of the data, and each update one
element (what the dynamo exporter writes for `zeros.scatter(1, top_k_index, 1)`, the expert
mask of a mixture of experts). The tuples are the indices' positions (constants) with the indices
themselves (read at run time) as the axis' column: one Concat on the last dim, or, for constant
indices, tuples computed here. ScatterND counts a negative index from the end of its dim, as
ScatterElements does, and takes the same reductions.
"""
from __future__ import annotations

import numpy as np

from ..errors import CompileError
from ..ir import Graph, Node, Value, constant, expand_nodes, is_onnx
from ..registry import declare

declare("ScatterElements", handled_by="a ScatterND of single elements (passes/scatter_elements.py)",
        module=__name__, dtypes_doc="as ScatterND; indices int32 or int64",
        limits="as ScatterND (constant indices naming one element twice without a reduction: refused)")


def rewrite_scatter_elements(graph: Graph) -> Graph:
    return expand_nodes(graph, lambda node: _rewrite(node) if is_onnx(node, "ScatterElements") else None)


def _rewrite(node: Node) -> list[Node]:
    data, indices, updates = node.inputs
    rank = len(data.shape)
    axis = int(node.attrs.get("axis", 0))
    if not -rank <= axis < rank:
        raise CompileError(f"ScatterElements '{node.name}': axis {axis} is outside the rank-{rank} data.")
    axis %= rank
    if tuple(indices.shape) != tuple(updates.shape) or len(indices.shape) != rank:
        raise CompileError(f"ScatterElements '{node.name}': indices {list(indices.shape)} and updates "
                           f"{list(updates.shape)} must have one shape, of the data's rank {rank}.")
    name, int64 = node.name, np.dtype(np.int64)
    shape = tuple(indices.shape)
    positions = np.indices(shape, dtype=np.int64)              # [rank, *shape]
    tuples = Value(f"{name}/tuples", int64, shape + (rank,))
    nodes = []
    if indices.is_constant:
        positions[axis] = np.asarray(indices.data, np.int64)
        tuples = constant(f"{name}/tuples", np.moveaxis(positions, 0, -1))
    else:
        column = indices
        if np.dtype(indices.dtype) != int64:
            column = Value(f"{name}/indices64", int64, shape)
            nodes.append(Node("Cast", f"{name}/indices64", [indices], [column], {"to": 7},
                              sources=list(node.sources)))
        as_column = Value(f"{name}/column", int64, shape + (1,))
        if rank == 1:
            as_column = tuples
        nodes.append(Node("Reshape", f"{name}/column", [column, constant(f"{name}/column_shape",
                                                                         np.array(shape + (1,), np.int64))],
                          [as_column], sources=list(node.sources)))
        parts = []
        if axis:
            parts.append(constant(f"{name}/before", np.moveaxis(positions[:axis], 0, -1)))
        parts.append(as_column)
        if axis < rank - 1:
            parts.append(constant(f"{name}/after", np.moveaxis(positions[axis + 1:], 0, -1)))
        if rank > 1:
            nodes.append(Node("Concat", f"{name}/tuples", parts, [tuples], {"axis": -1},
                              sources=list(node.sources)))
    nodes.append(Node("ScatterND", name, [data, tuples, updates], list(node.outputs),
                      {"reduction": node.text("reduction", "none")}, sources=list(node.sources)))
    return nodes
