"""torch.roll as exporters write it becomes one vkc.Roll node: per rolled axis, the last `shift`
elements and the rest, sliced and concatenated back in the other order,

    Concat(Slice(x, n - s : n, axis a), Slice(x, 0 : n - s, axis a), axis=a)

(Swin's shifted windows roll over two axes, forward and back). As written that is two strided
copies and a concatenation per axis; as one node, one copy for all its axes (a roll of a roll
whose result nothing else reads merges into it).

Runs on ONNX nodes, before make_views.
"""
from __future__ import annotations

from ..ir import Graph, Node, Value, is_onnx

INT_MAX = 2 ** 62


def roll_slices(graph: Graph) -> Graph:
    for concat in [n for n in graph.nodes if is_onnx(n, "Concat")]:
        found = _match(graph, concat)
        if found is not None:
            _rewrite(graph, concat, *found)
    for roll in [n for n in graph.nodes if n.op_type == "vkc.Roll"]:
        _merge_into_reader(graph, roll)
    return graph


def _slice_of(node: Node | None, rank: int) -> tuple[Value, int, int, int] | None:
    """(data, axis, first, end) of a Slice along one axis with step 1 and constant bounds."""
    if not is_onnx(node, "Slice") or len(node.inputs) < 3:
        return None
    const = [v.data.reshape(-1).tolist() if v is not None and v.is_constant else None
             for v in (node.inputs + [None, None])[1:5]]
    starts, ends, axes, steps = const
    if starts is None or ends is None or len(starts) != 1 or (node.input(3) is not None and axes is None) \
            or (node.input(4) is not None and steps not in ([1],)):
        return None
    x = node.inputs[0]
    axis = (axes or [0])[0] % rank
    first, end, step = slice(int(starts[0]), int(min(ends[0], INT_MAX)), 1).indices(x.shape[axis])
    return x, axis, first, end


def _match(graph: Graph, concat: Node):
    if len(concat.inputs) != 2 or any(v is None or v.producer is None for v in concat.inputs):
        return None
    rank = len(concat.outputs[0].shape)
    axis = concat.attrs.get("axis", 0) % rank
    tail, head = (_slice_of(v.producer, rank) for v in concat.inputs)
    if tail is None or head is None or tail[0] is not head[0] or tail[1] != axis or head[1] != axis:
        return None
    x, n = tail[0], tail[0].shape[axis]
    shift = n - tail[2]
    if not 0 < shift < n or tail[3] != n or head[2] != 0 or head[3] != n - shift:
        return None
    return x, axis, shift


def _rewrite(graph: Graph, concat: Node, x: Value, axis: int, shift: int) -> None:
    slices = [v.producer for v in concat.inputs]
    roll = Node("vkc.Roll", concat.name, [x], list(concat.outputs), {"shifts": {axis: shift}},
                domain="", sources=[s for n in slices + [concat] for s in n.sources])
    gone = {id(n) for n, v in zip(slices, concat.inputs) if graph.sole_consumer(v) is concat}
    graph.nodes = [roll if n is concat else n for n in graph.nodes if id(n) not in gone]
    graph.relink()


def _merge_into_reader(graph: Graph, roll: Node) -> None:
    """Roll(Roll(x)) where the inner result has no other reader: one roll over both's axes."""
    reader = graph.sole_consumer(roll.outputs[0])
    if reader is None or reader.op_type != "vkc.Roll" or reader not in graph.nodes:
        return
    shifts = dict(roll.attrs["shifts"])
    for axis, s in reader.attrs["shifts"].items():
        shifts[axis] = (shifts.get(axis, 0) + s) % reader.inputs[0].shape[axis]
    reader.inputs[0] = roll.inputs[0]
    reader.attrs["shifts"] = {a: s for a, s in shifts.items() if s}
    reader.sources = roll.sources + reader.sources
    graph.nodes = [n for n in graph.nodes if n is not roll]
    graph.relink()
