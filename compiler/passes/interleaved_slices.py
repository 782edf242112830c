"""A Concat of strided Slices of one tensor that together hold each of its elements once, along
an axis the Slices keep whole, is that tensor reshaped and transposed: Swin's patch merging,

    Concat(x[:, 0::2, 0::2, :], x[:, 1::2, 0::2, :], x[:, 0::2, 1::2, :], x[:, 1::2, 1::2, :], axis=-1)
    = Reshape(Transpose(Reshape(x, [B, H/2, 2, W/2, 2, C]), perm=[0, 1, 3, 4, 2, 5]), [B, H/2, W/2, 4C])

(YOLOv5's Focus and space-to-depth written out are the same with channels first). As exported
that is a strided copy per Slice (six: the rows' Slice is shared) and a copy per Concat input;
as one Transpose, one copy (the Reshapes are views).

Each Concat input is its source reached through one or more Slices of constant bounds and
positive steps, each axis either kept whole or taken at a step s from a start below s, s times
its length the axis's; the inputs differ only in their starts, and their starts, read as digits
in some order of the stepped axes, count the inputs 0, 1, 2, ...: that order is the one the
Transpose puts them in, before the Concat's axis. Slices nothing else reads go with the Concat.

Runs on ONNX nodes, after roll_slices (a roll's Concat joins Slices along their own axis) and
before make_views (which makes the Reshapes views).
"""
from __future__ import annotations

import itertools

import numpy as np

from ..ir import Graph, Node, Value, is_onnx
from .rolls import INT_MAX


def merge_interleaved_slices(graph: Graph) -> Graph:
    for concat in [n for n in graph.nodes if is_onnx(n, "Concat")]:
        found = _match(graph, concat)
        if found is not None:
            _rewrite(graph, concat, *found)
    return graph


def _ints(v: Value | None) -> list[int] | None:
    return None if v is None or not v.is_constant else [int(i) for i in v.data.reshape(-1)]


def _steps(graph: Graph, node: Node) -> dict[int, tuple[int, int]] | None:
    """{axis: (first, step)} of a Slice of constant bounds and positive steps: element i of its
    output along `axis` is element first + i * step of its input (axes it does not slice: absent)."""
    x = node.inputs[0]
    rank = len(x.shape)
    if graph.opset < 10:  # no steps before opset 10
        return None
    starts, ends, axes, steps = (_ints(node.input(i)) for i in range(1, 5))
    if starts is None or ends is None or (node.input(3) is not None and axes is None) \
            or (node.input(4) is not None and steps is None):
        return None
    out = {}
    for start, end, axis, step in zip(starts, ends, axes if axes is not None else range(len(starts)),
                                      steps or [1] * len(starts)):
        axis %= rank
        if step <= 0:
            return None
        out[axis] = (slice(start, min(end, INT_MAX), step).indices(x.shape[axis])[0], step)
    return out


def _source(graph: Graph, v: Value) -> tuple[Value, list[int], list[int], list[Node]] | None:
    """(source, first, step per axis, the Slices passed) of a value a chain of Slices takes out of
    its source."""
    rank = len(v.shape)
    first, step, passed = [0] * rank, [1] * rank, []
    while is_onnx(v.producer, "Slice") and v.producer.inputs[0].shape is not None:
        node = v.producer
        taken = _steps(graph, node)
        if taken is None:
            return None
        for axis, (f, s) in taken.items():  # the outer Slice's steps scale this one's
            first[axis], step[axis] = f + first[axis] * s, step[axis] * s
        passed.append(node)
        v = node.inputs[0]
    return (v, first, step, passed) if passed else None


def _match(graph: Graph, concat: Node):
    out = concat.outputs[0]
    if len(concat.inputs) < 2 or out.shape is None or any(v is None for v in concat.inputs):
        return None
    rank = len(out.shape)
    axis = concat.attrs.get("axis", 0) % rank
    found = [_source(graph, v) for v in concat.inputs]
    if any(f is None for f in found) or len({id(f[0]) for f in found}) != 1:
        return None
    x = found[0][0]
    step = found[0][2]
    if any(f[2] != step for f in found) or step[axis] != 1:
        return None
    stepped = [a for a in range(rank) if step[a] > 1]
    for v, (_, first, _, _) in zip(concat.inputs, found):
        for a in range(rank):  # each axis whole, or a start below the step and all of its steps
            if v.shape[a] * step[a] != x.shape[a] or first[a] >= step[a]:
                return None
    digits = [tuple(f[1][a] for a in stepped) for f in found]
    # The order of the stepped axes in which the starts count the inputs, most significant first.
    for order in itertools.permutations(range(len(stepped))):
        radices = [step[stepped[i]] for i in order]
        count = [int(np.ravel_multi_index([d[i] for i in order], radices)) for d in digits]
        if count == list(range(len(found))) and len(found) == int(np.prod(radices)):
            return x, axis, [stepped[i] for i in order], step, [f[3] for f in found]
    return None


def _rewrite(graph: Graph, concat: Node, x: Value, axis: int, order: list[int], step: list[int],
             chains: list[list[Node]]) -> None:
    """x split per stepped axis into (count, step), the step digits moved before `axis` in
    `order`, merged back into the Concat's shape."""
    split, where = [], {}
    for a, n in enumerate(x.shape):
        where[a] = len(split)
        split += [n // step[a], step[a]] if step[a] > 1 else [n]
    perm = []
    for a in range(len(x.shape)):
        if a == axis:
            perm += [where[s] + 1 for s in order]
        perm.append(where[a])
    out = concat.outputs[0]
    name = concat.name
    grouped = Value(f"{name}/grouped", x.dtype, tuple(split))
    moved = Value(f"{name}/moved", x.dtype, tuple(split[p] for p in perm))
    nodes = [_reshape(f"{name}/group", x, grouped),
             Node("Transpose", f"{name}/interleave", [grouped], [moved], {"perm": perm},
                  sources=[s for chain in chains for n in chain for s in n.sources] + concat.sources),
             _reshape(f"{name}/merge", moved, out)]
    at = graph.nodes.index(concat)
    graph.nodes[at:at + 1] = nodes
    graph.relink()
    slices = {id(n): n for chain in chains for n in chain}
    while True:  # the Slices nothing reads any more
        unread = [n for n in slices.values() if n in graph.nodes and not n.outputs[0].consumers
                  and not graph.is_output(n.outputs[0])]
        if not unread:
            break
        graph.nodes = [n for n in graph.nodes if all(n is not u for u in unread)]
        graph.relink()


def _reshape(name: str, x: Value, y: Value) -> Node:
    shape = Value(f"{name}/shape", np.dtype(np.int64), (len(y.shape),),
                  data=np.array(y.shape, np.int64))
    return Node("Reshape", name, [x, shape], [y])
