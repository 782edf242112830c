"""Rows of one axis, what passes/sink_row_selection.py moves towards the graph inputs, and the
row rules ops share (declared with each op: registry `row_wise`). A rule takes the graph, the
node and the rows of its output that are selected, and gives per input the rows of it to take
(None: the input stays) or None where the selection cannot move above the node."""
from __future__ import annotations

from dataclasses import dataclass

from .ir import Value
from .shapes import prod


@dataclass(frozen=True)
class Rows:
    """Rows [start, stop) of `axis`; keep=False: one row, the axis dropped (a scalar Gather)."""
    axis: int
    start: int
    stop: int
    keep: bool = True


def constant_ints(v: Value | None) -> list[int] | None:
    return None if v is None or not v.is_constant else [int(i) for i in v.data.reshape(-1)]


def aligned(v: Value, out: Value, rows: Rows) -> Rows | None:
    """The rows of an operand broadcast to `out`'s shape; None where it does not span the axis."""
    axis = rows.axis - (len(out.shape) - len(v.shape))
    if axis < 0 or v.shape[axis] == 1:
        return None
    return Rows(axis, rows.start, rows.stop)


def unary_rows(graph, node, rows: Rows):
    """An elementwise op of one data operand (bounds or attributes as further inputs)."""
    return [aligned(node.inputs[0], node.outputs[0], rows)]


def broadcasting_rows(graph, node, rows: Rows):
    """An elementwise op broadcasting all its inputs together: each operand that spans the axis
    is selected, operands of size 1 there stay."""
    y = node.outputs[0]
    return [None if v is None else aligned(v, y, rows) for v in node.inputs]


def reshape_rows(graph, node, rows: Rows):
    """The selected rows are, in every block of the dims before them, one contiguous run of the
    elements after them: a run of one input axis j whose dims before it hold as many elements.
    That is the same axis, the leading factor of a merged one (out [S, B, E] from in [S*B, E]:
    rows [i, i+1) of S are [i*B, (i+1)*B) of S*B) or a merge whose rows cover whole inner blocks."""
    x, y = node.inputs[0], node.outputs[0]
    if 0 in x.shape or 0 in y.shape:
        return None
    before, after = prod(y.shape[:rows.axis]), prod(y.shape[rows.axis + 1:])
    axis = next((j for j, n in enumerate(x.shape) if prod(x.shape[:j]) == before and n > 1), None)
    if axis is None:
        return None
    inner = prod(x.shape[axis + 1:])
    if (rows.start * after) % inner or (rows.stop * after) % inner:
        return None
    return [Rows(axis, rows.start * after // inner, rows.stop * after // inner)]
