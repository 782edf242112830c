"""A selection of rows along one axis (a Gather of one constant index, or of a constant run of
them, or a Slice of step 1 on one axis) moves towards the graph inputs through the row-wise ops
that produce its data, so those compute only the rows the model uses. A classifier that reads
its CLS token (torchvision's ViT: last layer -> LayerNorm -> Gather(axis 1, index 0) -> head)
then runs its last layer's out-projection, FFN and LayerNorms, and the query side of its last
attention, on one token row instead of all of them (onnxruntime's compute optimizer does the same:
UpStreamGather, UpStreamSlice).

A selection of y = P(x, ...) moves above P when nothing but the selection reads y and P treats
the selected axis as rows: elementwise ops (each operand that spans the axis after broadcasting is
selected, operands of size 1 there stay), LayerNormalization before its normalized axes, Softmax
off its axis, reductions that keep the axis (the ReduceMean/Sub/Pow/Sqrt/Div chain of older
LayerNorm exports, op by op), MatMul on its rows (A) or a batch axis, Gemm on its rows (A and a
per-row bias), Transpose, and reshapes where the selected rows are a block of one input axis.
Anywhere else the selection stays, as a Slice of the value (one small copy kernel). Selections are
kept in the keep-dims form while they move; a Gather of one scalar index becomes, where it stood,
a Reshape that drops the axis (a view). Equal selections of one value (the residual stream read by
both the Add and the LayerNorm of a block) merge, so the value is read by one and moves on. A Slice
left on an attention's query (nn.MultiheadAttention's Q, a Gather of the projection K and V share)
is read in place by fuse_attention, as a Split's part is.

A selection that stops midway through a pattern leaves it unfused, computing the same: a Gather of
features after an old-style LayerNorm chain stops at its centred value, read by the variance too.

Runs on ONNX nodes with constant shapes folded (after rewrite_einsum) and before make_views and
the pattern fusions, which then match the same chains on fewer rows. How a selection moves
above each op its declaration says (registry `row_wise`, compiler/rows.py).
"""
from __future__ import annotations

import itertools

import numpy as np

from ..ir import Graph, Node, Value, is_onnx
from ..registry import fact
from ..rows import Rows, constant_ints as _ints
from .outputs import remove_dead_nodes


def sink_row_selection(graph: Graph) -> Graph:
    names = itertools.count()
    work = [n for n in graph.nodes if row_selection(graph, n) is not None]
    changed = False
    while work:
        node = work.pop()
        if node not in graph.nodes:  # merged into an equal one
            continue
        x, rows = row_selection(graph, node)
        node = _merge_equal(graph, node, x, rows)
        moved = _sink(graph, node, x, rows, names)
        if moved is not None:
            work += moved
            changed = True
    return remove_dead_nodes(graph) if changed else graph


def row_selection(graph: Graph, node: Node) -> tuple[Value, Rows] | None:
    """(data, rows) when `node` selects rows of one axis of a computed value, not all of them."""
    if not is_onnx(node, "Gather", "Slice") or node.inputs[0].is_constant or \
            node.inputs[0].shape is None:
        return None
    x = node.inputs[0]
    rank = len(x.shape)
    if node.op_type == "Gather":
        index = node.inputs[1]
        axis = node.attrs.get("axis", 0) % rank
        n = x.shape[axis]
        if not index.is_constant or index.data.ndim > 1 or index.size == 0:
            return None
        idx = [i + n if i < 0 else i for i in _ints(index)]
        if not all(0 <= i < n for i in idx) or idx != list(range(idx[0], idx[0] + len(idx))):
            return None
        rows = Rows(axis, idx[0], idx[-1] + 1, keep=index.data.ndim == 1)
    else:
        if graph.opset >= 10:
            starts, ends, axes, steps = (_ints(node.input(i)) for i in range(1, 5))
            if starts is None or ends is None or (node.input(3) is not None and axes is None) or \
                    (node.input(4) is not None and steps is None):
                return None
        else:
            starts, ends = list(node.attrs["starts"]), list(node.attrs["ends"])
            axes, steps = node.attrs.get("axes"), None
        axes = range(len(starts)) if axes is None else axes
        picked = []
        for start, end, axis, step in zip(starts, ends, axes, steps or [1] * len(starts)):
            first, last, _ = slice(start, end, 1).indices(x.shape[axis % rank])
            if step != 1 or last <= first:
                return None
            if last - first < x.shape[axis % rank]:
                picked.append(Rows(axis % rank, first, last))
        if len(picked) != 1:
            return None
        rows = picked[0]
    full = rows.stop - rows.start == x.shape[rows.axis]
    return None if full else (x, rows)


def _merge_equal(graph: Graph, node: Node, x: Value, rows: Rows) -> Node:
    """Every selection of x equal to `node`'s becomes the first of them in the graph."""
    same = [n for n in x.consumers if row_selection(graph, n) == (x, rows)]
    same = sorted({id(n): n for n in same}.values(), key=graph.nodes.index)
    keeper = same[0]
    kept = keeper.outputs[0]
    for other in same[1:]:
        out = other.outputs[0]
        if graph.is_output(out):
            continue
        for reader in out.consumers:
            reader.inputs = [kept if v is out else v for v in reader.inputs]
        graph.nodes.remove(other)
    if len(same) > 1:
        graph.relink()
    return keeper


def _sink(graph: Graph, node: Node, x: Value, rows: Rows, names) -> list[Node] | None:
    """Move `node`'s selection above x's producer; the selections of its inputs, or None where
    it stays."""
    producer = x.producer
    if (producer is None or x.consumers != [node] or graph.is_output(x) or x.alias_of is not None
            or producer.domain not in ("", "ai.onnx") or producer.outputs[0] is not x
            or any(v is not None and v.shape is None for v in producer.inputs)
            or any(o is not None and (o.consumers or graph.is_output(o))
                   for o in producer.outputs[1:])
            or any(v.alias_of is x for v in graph.family(x))):
        return None
    rule = fact(producer, "row_wise", graph.opset)
    picks = rule(graph, producer, rows) if rule is not None else None
    if picks is None:
        return None
    shape = list(x.shape)
    shape[rows.axis] = rows.stop - rows.start
    out = node.outputs[0]
    result = out if rows.keep else Value(f"{x.name}/rows{next(names)}", x.dtype, tuple(shape))
    inputs, selections, done = [], [], {}
    for v, pick in zip(producer.inputs, picks + [None] * (len(producer.inputs) - len(picks))):
        if v is None or pick is None:
            inputs.append(v)
            continue
        if (id(v), pick) not in done:
            done[id(v), pick] = _select(graph, v, pick, node.sources, names)
        selected, by = done[id(v), pick]
        inputs.append(selected)
        selections += [by] if by is not None and by not in selections else []
    if fact(producer, "reshapes", graph.opset):
        rebuilt = Node("Reshape", producer.name, [inputs[0], _shape(result, names)], [result],
                       sources=producer.sources)
    else:
        rebuilt = Node(producer.op_type, producer.name, inputs, [result], dict(producer.attrs),
                       producer.domain, producer.sources)
    at = graph.nodes.index(producer)
    graph.nodes[at:at + 1] = selections + [rebuilt]
    at = graph.nodes.index(node)
    graph.nodes[at:at + 1] = [] if rows.keep else [
        Node("Reshape", node.name, [result, _shape(out, names)], [out], sources=node.sources)]
    graph.relink()
    return selections


def _shape(v: Value, names) -> Value:
    shape = np.array(v.shape, np.int64)
    return Value(f"{v.name}/shape{next(names)}", shape.dtype, shape.shape, data=shape)


def _select(graph: Graph, v: Value, rows: Rows, sources, names) -> tuple[Value, Node | None]:
    """Rows of v: a constant sliced here, or the output of a Slice node (and the node), which
    stands for the selection it came from."""
    index = [slice(None)] * len(v.shape)
    index[rows.axis] = slice(rows.start, rows.stop)
    shape = list(v.shape)
    shape[rows.axis] = rows.stop - rows.start
    name = f"{v.name}/rows{next(names)}"
    if v.is_constant:
        data = np.ascontiguousarray(v.data[tuple(index)])
        return Value(name, v.dtype, tuple(shape), data=data), None
    out = Value(name, v.dtype, tuple(shape))
    if graph.opset < 10:
        return out, Node("Slice", name, [v], [out], {"starts": [rows.start], "ends": [rows.stop],
                                                     "axes": [rows.axis]}, sources=sources)
    ints = [Value(f"{name}/{what}", np.dtype(np.int64), (1,), data=np.array([i], np.int64))
            for what, i in (("starts", rows.start), ("ends", rows.stop), ("axes", rows.axis))]
    return out, Node("Slice", name, [v, *ints], [out], sources=sources)
