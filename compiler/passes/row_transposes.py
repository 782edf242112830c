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
    which fuse_attention writes as the attention's output strides).

Either way a copy of the activations per layer goes (ViT-B/16 at batch 8: 24 of 4.8 MB each).

Runs on ONNX nodes, after views (Reshapes are aliases) and before merge_projections and
fuse_attention.
"""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Node, Value, is_onnx, reaches_only
from .sink_row_selection import row_selection


def move_row_transposes(graph: Graph) -> Graph:
    for node in [n for n in graph.nodes if is_onnx(n, "Transpose")]:
        if node in graph.nodes and _row_perm(node) is not None:
            if not _into_product(graph, node):
                _out_of_product(graph, node)
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


def _scaling(node: Node) -> bool:
    """A Mul or Div by one constant (Q's and K's scale before attention's first MatMul)."""
    return is_onnx(node, "Mul", "Div") and any(
        v is not None and v.is_constant and v.size == 1 for v in node.inputs)


def _feeds_attention(graph: Graph, v: Value) -> bool:
    return reaches_only(
        graph, v, ends=lambda n: is_onnx(n, "MatMul"),
        through=lambda n: (is_onnx(n, "Transpose", "Split") or _scaling(n) or (
            is_onnx(n, "Gather") and n.inputs[1].is_constant and n.inputs[1].data.ndim == 0)
            or (is_onnx(n, "Slice") and row_selection(graph, n) is not None)))


def _into_product(graph: Graph, t: Node) -> bool:
    x, y = t.inputs[0], t.outputs[0]
    product = y.consumers[0] if len(y.consumers) == 1 else None
    if not is_onnx(product, "MatMul") or not _product(product, y) or not graph.used_only_by(y, product):
        return False
    chain = [product]
    if (add := _row_bias(graph, product.outputs[0])) is not None:
        chain.append(add)
    result = chain[-1].outputs[0]
    if not _feeds_attention(graph, result):
        return False
    # The product (and bias) run over X's rows as they are; the Transpose moves after them.
    rows, read = x, y
    for node in chain:
        out = node.outputs[0]
        mine = Value(f"{out.name}/rows", out.dtype, tuple(x.shape[:-1]) + (out.shape[-1],))
        node.inputs = [rows if v is read else v for v in node.inputs]
        node.outputs = [mine]
        rows, read = mine, out
    moved = Node("Transpose", t.name, [rows], [result], {"perm": _perm(t)}, sources=t.sources)
    graph.nodes.remove(t)
    graph.nodes.insert(graph.nodes.index(chain[-1]) + 1, moved)
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
