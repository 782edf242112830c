"""Rotary position embedding as exporters write it becomes one rotary kernel (lower/rotary.py).
transformers' apply_rotary_pos_emb with rotate_half (Llama, Qwen2, Mistral, Phi-3, Gemma), over
the last axis of x [B, H, S, D]:

    x1 = Slice(x, 0:D/2)    x2 = Slice(x, D/2:D)    r = Concat(Neg(x2), x1)
    y  = Add(Mul(x, cos), Mul(r, sin))           (either operand order of each Mul and the Add)

with cos and sin constant [.., S, D] tables whose two halves are equal (cos(cat(freqs, freqs)),
the positions fixed at export, as when position_ids is no model input), the same for every batch
and head, or such tables' rows [.., N, D] gathered at run-time positions, for batch 1 (a growing
cache's rotary, compiler/growing_cache.py). The node it becomes is com.microsoft's
RotaryEmbedding with the tables' first halves (one pair of constants for every rotation by the
same tables), from position 0 or at the gathered positions. Where x is the head split
`Transpose(Reshape(p, [B, S, H, D]), [0, 2, 1, 3])` of a projection p, p itself is rotated
([B, S, H*D], num_heads H) and the head split moves after the rotation, where fuse_attention
reads it as strides: no copy kernel for it. A rotation of the first r elements of each head
x = Slice(X, 0:r), its result joined to the rest, Concat(y, Slice(X, r:D)) (partial_rotary_factor:
StableLM, GPT-NeoX, Phi), is one rotation of X with rotary_embedding_dim r: no Slice or Concat
copies, and the head split moves after it as above.

Runs on ONNX nodes, before make_views.
"""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Node, Value, is_onnx
from .sink_row_selection import row_selection

MS = "com.microsoft"
HEAD_SPLIT = [0, 2, 1, 3]


def fuse_rotary(graph: Graph) -> Graph:
    halves: dict = {}   # rotations of the same tables share their halves (and the zero start)
    for add in [n for n in graph.nodes if is_onnx(n, "Add")]:
        match = _match(graph, add)
        if match is not None:
            _rewrite(graph, add, *match, halves, _partial(graph, match[1], add.outputs[0], match[0]))
    return graph


def _partial(graph: Graph, x: Value, y: Value, rotation: list[Node]) -> tuple[Value, Value, list[Node]] | None:
    """(X, Y, [Slice, Slice, Concat]) where x = Slice(X, 0:r) of the last axis, read only by the
    rotation, and its result y only by Y = Concat(y, Slice(X, r:D)) on the last axis: a rotation
    of the first r elements of each head of X, the rest passed (StableLM's, GPT-NeoX's and Phi's
    partial_rotary_factor)."""
    cut = x.producer
    picked = row_selection(graph, cut) if is_onnx(cut, "Slice") else None
    inside = {id(n) for n in rotation}
    if picked is None or len(picked[0].shape) != 4 or graph.is_output(x) or \
            any(id(c) not in inside for c in x.consumers):
        return None
    whole, rows = picked
    d = whole.shape[-1]
    concat = graph.sole_consumer(y)
    if rows.axis != 3 or rows.start != 0 or not is_onnx(concat, "Concat") or len(concat.inputs) != 2 or \
            concat.inputs[0] is not y or concat.attrs.get("axis") % 4 != 3:
        return None
    rest = concat.inputs[1]
    kept = row_selection(graph, rest.producer) if is_onnx(rest.producer, "Slice") else None
    if kept is None or kept[0] is not whole or (kept[1].axis, kept[1].start, kept[1].stop) != (3, rows.stop, d) or \
            graph.sole_consumer(rest) is not concat:
        return None
    return whole, concat.outputs[0], [cut, rest.producer, concat]


def _half_of(graph: Graph, node: Node | None, x: Value, first: bool) -> bool:
    """Whether `node` is a Slice of the first (or second) half of x's last axis."""
    picked = row_selection(graph, node) if is_onnx(node, "Slice") else None
    if picked is None or picked[0] is not x:
        return False
    rows, d = picked[1], x.shape[-1]
    return rows.axis == len(x.shape) - 1 and \
        (rows.start, rows.stop) == ((0, d // 2) if first else (d // 2, d))


def _table(v: Value, s: int, d: int) -> np.ndarray | None:
    """The [S, D/2] first half of a constant [.., S, D] table with equal halves."""
    if not v.is_constant or v.shape is None or len(v.shape) < 2 or tuple(v.shape[-2:]) != (s, d) \
            or any(n != 1 for n in v.shape[:-2]) or np.dtype(v.dtype).kind != "f":
        return None
    plane = v.data.reshape(s, d)
    return np.ascontiguousarray(plane[:, :d // 2]) if (plane[:, :d // 2] == plane[:, d // 2:]).all() else None


def _gathered(v: Value, s: int, d: int) -> tuple[np.ndarray, Value, Value] | None:
    """(the [N, D/2] first half, the positions [S], the table) of v = Gather(table, positions)
    along the rows of a constant [1, .., 1, N, D] table with equal halves."""
    g = v.producer
    if not is_onnx(g, "Gather") or not g.inputs[0].is_constant:
        return None
    table, rows = g.inputs
    rank = len(table.shape)
    if rank < 2 or g.attrs.get("axis", 0) % rank != rank - 2 or any(n != 1 for n in table.shape[:-2]) or \
            tuple(rows.shape) != (s,) or np.dtype(rows.dtype) != np.int64 or table.shape[-1] != d:
        return None
    half = _table(table, table.shape[-2], d)
    return (half, rows, table) if half is not None else None


def _tables(cos: Value, sin: Value, s: int, d: int):
    """(cos half, sin half, positions or None, the constants they come from) of constant tables
    or tables gathered at the same positions, else None."""
    cos_t, sin_t = _table(cos, s, d), _table(sin, s, d)
    if cos_t is not None and sin_t is not None:
        return cos_t, sin_t, None, (cos, sin)
    cos_g, sin_g = _gathered(cos, s, d), _gathered(sin, s, d)
    if cos_g is None or sin_g is None or cos_g[1] is not sin_g[1]:
        return None
    return cos_g[0], sin_g[0], cos_g[1], (cos_g[2], sin_g[2])


def _rotated_half(graph: Graph, r: Value, x: Value) -> list[Node] | None:
    """[Concat, Neg, Slice x2, Slice x1] when r = Concat(Neg(x2), x1) over x's last axis."""
    concat = r.producer
    if not is_onnx(concat, "Concat") or len(concat.inputs) != 2 or \
            concat.attrs.get("axis") % len(r.shape) != len(r.shape) - 1:
        return None
    neg_out, x1 = concat.inputs
    neg = neg_out.producer
    if not is_onnx(neg, "Neg") or graph.sole_consumer(neg_out) is not concat:
        return None
    slice2, slice1 = neg.inputs[0].producer, x1.producer
    if not (_half_of(graph, slice2, x, first=False) and _half_of(graph, slice1, x, first=True)) or \
            graph.sole_consumer(neg.inputs[0]) is not neg or graph.sole_consumer(x1) is not concat:
        return None
    return [concat, neg, slice2, slice1]


def _match(graph: Graph, add: Node):
    products = [v.producer for v in add.inputs]
    if not all(is_onnx(p, "Mul") and graph.sole_consumer(v) is add for p, v in zip(products, add.inputs)):
        return None
    for plain, rotated in (products, products[::-1]):
        for x, cos in (plain.inputs, plain.inputs[::-1]):
            if x.is_constant or x.shape is None or len(x.shape) != 4 or x.shape[-1] % 2 or \
                    tuple(add.outputs[0].shape) != tuple(x.shape):
                continue
            for r, sin in (rotated.inputs, rotated.inputs[::-1]):
                half = _rotated_half(graph, r, x) if r.producer is not None else None
                b, h, s, d = x.shape
                tables = _tables(cos, sin, s, d)
                if half is None or tables is None or graph.sole_consumer(r) is not rotated or \
                        (tables[2] is not None and b != 1):
                    continue
                cos_t, sin_t, positions, sources = tables
                return [plain, rotated, *half], x, cos_t.astype(cos.dtype), sin_t.astype(sin.dtype), positions, \
                    sources
    return None


def _head_split_of(graph: Graph, x: Value):
    """(p, split shape) when x = Transpose(Reshape(p, [B, S, H, D]), [0, 2, 1, 3]) with p
    [B, S, H*D]."""
    t = x.producer
    if not is_onnx(t, "Transpose") or list(t.attrs.get("perm", [])) != HEAD_SPLIT:
        return None
    r = t.inputs[0].producer
    if not is_onnx(r, "Reshape"):
        return None
    p = r.inputs[0]
    b, h, s, d = x.shape
    if p.shape is None or tuple(p.shape) != (b, s, h * d):
        return None
    return p, r.inputs[1]


def _rewrite(graph: Graph, add: Node, removed: list[Node], x: Value, cos: np.ndarray,
             sin: np.ndarray, positions: Value | None, origin: tuple[Value, Value], halves: dict,
             partial: tuple[Value, Value, list[Node]] | None) -> None:
    y = add.outputs[0]
    attrs = {"num_heads": x.shape[1]}
    if partial is not None:   # the whole head rotated in its first r elements
        attrs["rotary_embedding_dim"] = x.shape[-1]
        x, y, passed = partial
        removed = removed + passed
    b, h, s, d = x.shape
    name = add.name
    tables = halves.setdefault((id(origin[0]), id(origin[1])), [_const(f"{name}/cos", cos), _const(f"{name}/sin", sin)])
    chosen = {id(n) for n in removed + [add]}
    sources = [src for n in graph.nodes if id(n) in chosen for src in n.sources]

    def const(what, array):
        return _const(f"{name}/{what}", array)

    gathered = []
    if positions is None:  # one start for all, so that Q's and K's rotations join (split_parts.py)
        start = halves.setdefault("start", const("start", np.zeros(1, np.int64)))
    else:  # the gathered rows' positions as [1, S]
        start = Value(f"{name}/positions", positions.dtype, (1, s))
        gathered = [Node("Reshape", f"{name}/positions", [positions, const("positions_shape", [1, s])], [start],
                         sources=sources)]
    split = _head_split_of(graph, x)
    if split is None:
        nodes = [Node("RotaryEmbedding", f"{name}/rotary", [x, start, *tables], [y],
                      attrs, domain=MS, sources=sources)]
    else:
        p, shape = split
        rotated = Value(f"{name}/rotated", p.dtype, p.shape)
        heads = Value(f"{name}/rotated_heads", p.dtype, (b, s, h, d))
        nodes = [Node("RotaryEmbedding", f"{name}/rotary", [p, start, *tables], [rotated],
                      attrs, domain=MS, sources=sources),
                 Node("Reshape", f"{name}/split_heads", [rotated, shape], [heads], sources=sources),
                 Node("Transpose", f"{name}/heads_first", [heads], [y], {"perm": HEAD_SPLIT},
                      sources=sources)]
    at = graph.nodes.index(add)
    gone = {id(n) for n in removed}
    graph.nodes[at:at + 1] = gathered + nodes
    graph.nodes = [n for n in graph.nodes if id(n) not in gone]
    graph.relink()
    # The unrotated head split goes when nothing else reads it (a dead Transpose would keep
    # merge_projections from seeing that the projection feeds only products).
    while split is not None and x.producer is not None and not x.consumers and not graph.is_output(x):
        dead = x.producer
        graph.nodes.remove(dead)
        graph.relink()
        x = dead.inputs[0]


def _const(name: str, array) -> Value:
    array = np.asarray(array)
    return Value(name, array.dtype, array.shape, data=array)
