"""Transposes of leading dims move across the row-wise product next to them, towards an attention
that then reads (or writes) them as strides instead of running a copy kernel.

nn.MultiheadAttention with batch_first=True, as torchvision's ViT exports it at batch > 1:

    LN [B, S, E] -> Transpose(1, 0, 2) -> MatMul(in_proj) -> Add(bias) -> ... attention ...
    attention -> Transpose [S, B, H, D] -> Reshape [S*B, E] -> Gemm(out_proj) -> Reshape [S, B, E]
              -> Transpose(1, 0, 2) -> residual Add

A Transpose that keeps the last dim only reorders rows, and a product by a 2-D weight (plus a bias
along its last dim) treats every row alike, so the two commute:

  - into the product: MatMul(Transpose(X), W) [+ bias] = Transpose(MatMul(X, W) [+ bias]), done
    where the product's result reaches only matmuls through views, Transposes, Splits, constant
    Gathers, one-axis Slices and scalings (attention's Q, K and V: fuse_attention then reads them
    in place);
  - out of the product: Transpose(view(MatMul(view(X), W))) computes the product over the rows of
    X transposed alike, done where X is itself a Transpose's output (the two Transposes become one,
    which fuse_attention writes as the attention's output strides); where the product has a bias
    or X's rows are regrouped (Swin's windows put back in place after the output projection:
    [B * nW, ws * ws, C] viewed [B, nW, ws, ws, C] and transposed to [B, H, W, C]), it moves
    next to X's Transpose, the attention's heads merge, and fuse_attention writes both.

Either way a copy of the activations per layer goes (ViT-B/16 at batch 8: 24 of 4.8 MB each).

Runs on ONNX nodes, after views (Reshapes are aliases) and before merge_projections and
fuse_attention.
"""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Node, Value, is_onnx, reaches_only, written_in_shape
from .fuse_attention import scaling_factor
from .sink_row_selection import row_selection


def move_row_transposes(graph: Graph) -> Graph:
    for node in [n for n in graph.nodes if is_onnx(n, "Transpose")]:
        if node in graph.nodes and _row_perm(node) is not None:
            if not _into_product(graph, node) and not _out_of_product(graph, node):
                _before_product(graph, node)
    return graph


def _perm(node: Node) -> list[int]:
    rank = len(node.inputs[0].shape)
    return list(node.attrs.get("perm", range(rank - 1, -1, -1)))


def _row_perm(node: Node) -> list[int] | None:
    """The perm of a Transpose that keeps the last dim in place (it reorders whole rows)."""
    if node.inputs[0].shape is None or len(node.inputs[0].shape) < 2:
        return None
    perm = _perm(node)
    return perm if perm[-1] == len(perm) - 1 else None


def _product(node: Node | None, a: Value) -> bool:
    """A MatMul or Gemm by a 2-D weight reading `a` as its rows: a Gemm without transA and with
    at most a bias along its columns (a bias per row would move with them)."""
    if is_onnx(node, "Gemm"):
        c = node.input(2)
        return (node.inputs[0] is a and not node.attrs.get("transA", 0)
                and (c is None or len(c.shape) < 2 or c.shape[0] == 1))
    return is_onnx(node, "MatMul") and node.inputs[0] is a and len(node.inputs[1].shape) == 2 \
        and node.inputs[1] is not a


def _row_bias(graph: Graph, y: Value) -> Node | None:
    """An Add of a constant along the last dim of y, y's only reader."""
    add = y.consumers[0] if len(y.consumers) == 1 else None
    if not is_onnx(add, "Add") or not graph.used_only_by(y, add) or add.outputs[0].shape != y.shape:
        return None
    bias = add.inputs[1] if add.inputs[0] is y else add.inputs[0]
    ok = bias.is_constant and bias is not y and all(d == 1 for d in bias.shape[:-1])
    return add if ok else None


def _feeds_attention(graph: Graph, v: Value) -> bool:
    return reaches_only(
        graph, v, ends=lambda n: is_onnx(n, "MatMul"),
        through=lambda n: (is_onnx(n, "Transpose", "Split") or scaling_factor(graph, n) is not None or (
            is_onnx(n, "Gather") and n.inputs[1].is_constant and n.inputs[1].data.ndim == 0)
            or (is_onnx(n, "Slice") and row_selection(graph, n) is not None)))


def _sole_reader(graph: Graph, y: Value) -> tuple[Node, Value] | None:
    """(node, what it reads) when one node alone reads all of y's bytes, through y itself or
    through reshapes of it (of reshapes: HF's Swin views its windows twice)."""
    reads = {(id(n), id(w)): (n, w) for w in graph.family(y) if w.root() is y for n in w.consumers}
    if len(reads) != 1:
        return None
    node, read = next(iter(reads.values()))
    ok = graph.used_only_by(y, node) and read.nbytes == y.nbytes and not read.root_offset()
    return (node, read) if ok else None


def _into_product(graph: Graph, t: Node) -> bool:
    x, y = t.inputs[0], t.outputs[0]
    reader = _sole_reader(graph, y)
    product, read = reader if reader is not None else (None, None)
    if not is_onnx(product, "MatMul") or not _product(product, read) or \
            (read is not y and read.shape[-1] != y.shape[-1]):
        return False
    chain = [product]
    if (add := _row_bias(graph, product.outputs[0])) is not None:
        chain.append(add)
    result = chain[-1].outputs[0]
    if not _feeds_attention(graph, result):
        return False
    # The product (and bias) run over X's rows as they are; the Transpose moves after them. Where
    # the product read Y through a view (Swin's windows, [B, nW, ws, ws, C] read as
    # [B * nW, ws * ws, C]), its result becomes that view of the Transpose's.
    rows = x
    for node in chain:
        out = node.outputs[0]
        mine = Value(f"{out.name}/rows", out.dtype, tuple(x.shape[:-1]) + (out.shape[-1],))
        node.inputs = [rows if v is read else v for v in node.inputs]
        node.outputs = [mine]
        rows, read = mine, out
    moved_out = result if read is y else written_in_shape(result, tuple(y.shape[:-1]) + (result.shape[-1],))
    moved = Node("Transpose", t.name, [rows], [moved_out], {"perm": _perm(t)}, sources=t.sources)
    graph.nodes.remove(t)
    graph.nodes.insert(graph.nodes.index(chain[-1]) + 1, moved)
    graph.relink()
    return True


def _attention_output(x: Value) -> bool:
    """Whether x is an attention's P·V (a MatMul of a Softmax, SDPA's guard after it or not), or
    its Transpose (the heads merged): what fuse_attention writes at its output strides."""
    pv = x.producer
    if is_onnx(pv, "Transpose"):
        pv = pv.inputs[0].root().producer
    probs = pv.inputs[0].producer if is_onnx(pv, "MatMul") else None
    return is_onnx(probs, "Softmax") or (is_onnx(probs, "Where") and is_onnx(probs.inputs[2].producer, "Softmax"))


def _before_product(graph: Graph, t: Node) -> bool:
    """Transpose(view(MatMul(view(X), W) [+ bias])) -> MatMul(Transpose(view(X)), W) [+ bias],
    where X is an attention's output: fuse_attention then writes the Transpose."""
    y, z = t.inputs[0], t.outputs[0]
    g = y.root()
    if y.root_offset() or g.producer is None or y.shape[-1] != g.shape[-1] or not graph.used_only_by(g, t):
        return False
    chain = [g.producer]
    if is_onnx(g.producer, "Add"):
        product = next((v.producer for v in g.producer.inputs if v is not None and v.producer is not None), None)
        if product is None or _row_bias(graph, product.outputs[0]) is not g.producer:
            return False
        chain.insert(0, product)
    product = chain[0]
    a = product.inputs[0] if product.inputs else None
    if a is None or not _product(product, a) or a.root_offset() or not graph.used_only_by(a, product):
        return False
    x = a.root()
    if not _attention_output(x):
        return False
    # X's rows grouped as Y's and transposed alike; the product (and bias) over them writes Z.
    lead = tuple(y.shape[:-1])
    grouped = Value(f"{x.name}/{'x'.join(map(str, lead))}", x.dtype, lead + (a.shape[-1],), alias_of=x)
    rows = Value(f"{t.name}/rows", x.dtype, tuple(z.shape[:-1]) + (a.shape[-1],))
    moved = Node("Transpose", t.name, [grouped], [rows], {"perm": _perm(t)}, sources=t.sources)
    read = a
    for node in chain:
        old = node.outputs[0]
        new = z if node is chain[-1] else Value(f"{old.name}/rows", old.dtype, tuple(z.shape[:-1]) + (old.shape[-1],))
        node.inputs = [rows if v is read else v for v in node.inputs]
        node.outputs = [new]
        read, rows = old, new
    graph.nodes.remove(t)
    graph.nodes.insert(graph.nodes.index(product), moved)
    graph.relink()
    return True


def _out_of_product(graph: Graph, t: Node) -> bool:
    y, z = t.inputs[0], t.outputs[0]
    g = y.alias_of
    if g is None or y.alias_offset or g.shape is None or len(g.shape) != 2 or \
            tuple(y.shape[-1:]) != tuple(g.shape[-1:]) or not graph.used_only_by(g, t):
        return False
    product = g.producer
    a = product.inputs[0] if product is not None and product.inputs else None
    if a is None or not _product(product, a) or len(a.shape) != 2 or a.alias_of is None or a.alias_offset:
        return False
    x, lead = a.alias_of, list(y.shape[:-1])
    inner = x.producer
    if not is_onnx(inner, "Transpose") or list(x.shape[:len(lead)]) != lead or \
            int(np.prod(x.shape[len(lead):])) != a.shape[1] or not graph.used_only_by(x, product):
        return False
    # X's rows reordered as the Transpose reorders Y's: one Transpose where two were.
    perm = _perm(t)[:-1] + list(range(len(lead), len(x.shape)))
    first = _perm(inner)
    inner.attrs = dict(inner.attrs, perm=[first[p] for p in perm])
    x.shape = tuple(x.shape[p] for p in perm)
    inner.sources = inner.sources + t.sources
    z.alias_of, z.alias_offset = g, 0
    graph.nodes.remove(t)
    graph.relink()
    return True
