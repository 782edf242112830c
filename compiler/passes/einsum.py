"""Einsum of two operands, in the forms attention and bilinear layers export ("bhid,bhjd->bhij",
"bij,jk->bik", "i,j->ij", ...), becomes MatMul between Transposes and Reshapes, which existing
kernels lower (the Reshapes are views, Transposes of constants are done here).

Each letter is a batch index (in both operands and the output), a free index of one operand (and
the output) or a contracted index (in both operands, not the output): A is laid out [batch, free
A, contracted], B [batch, contracted, free B], and their MatMul [batch, M, N] is put back into
the output's order. One operand is a Transpose ('ij->ji'), or a product with ones over the
letters it sums ('ij->i'). Forms outside that (three operands, ellipses, repeated letters, a
letter summed within one of two operands) are refused naming the equation.
"""
from __future__ import annotations

import string

import numpy as np

from ..errors import CompileError
from ..ir import Graph, Node, Value, expand_nodes, is_onnx
from ..registry import declare, unsupported_dtype
from ..shapes import prod

declare("Einsum", handled_by="MatMul with Transposes and Reshapes (passes/einsum.py)",
        module=__name__, dtypes_doc="float32 (any for transposes: 'ij->ji')",
        limits="three or more operands, repeated letters (diagonals), a letter summed "
               "within one of two operands, broadcasting a dimension of 1")


def rewrite_einsum(graph: Graph) -> Graph:
    return expand_nodes(graph, lambda node: _rewrite(node) if is_onnx(node, "Einsum") else None)


def _parse(node: Node) -> tuple[list[str], str]:
    equation = node.text("equation").replace(" ", "")

    def refuse(why):
        return CompileError(f"Einsum '{node.name}': equation '{equation}' {why}; vkc rewrites "
                            "one- and two-operand forms whose letters are batch, free or "
                            "contracted (such as 'bhid,bhjd->bhij', 'bij,jk->bik' or 'ij->i') "
                            "into MatMul and Transpose.")

    spelled = _without_ellipsis(node, equation, refuse) if "." in equation else equation
    ins, _, out = spelled.partition("->")
    ins = ins.split(",")
    if "->" not in spelled:   # implicit output: the letters used once, in alphabetical order
        out = "".join(sorted(c for c in set("".join(ins)) if "".join(ins).count(c) == 1))
    if len(ins) > 2:
        raise refuse(f"has {len(ins)} operands")
    if any(len(set(t)) != len(t) for t in (*ins, out)):
        raise refuse("repeats a letter within one term (a diagonal)")
    for letter in out:
        if not any(letter in t for t in ins):
            raise refuse(f"has output letter '{letter}' in no operand")
    if len(ins) == 2:
        for letter in ins[0] + ins[1]:
            if letter not in out and not (letter in ins[0] and letter in ins[1]):
                raise refuse(f"sums letter '{letter}' within one operand")
    return ins, out


def _without_ellipsis(node: Node, equation: str, refuse) -> str:
    """The equation with each '...' spelled as letters of its own: an operand's ellipsis covers
    the dimensions its letters leave, the letters shared from the right (numpy's broadcasting);
    an implicit output puts them first."""
    ins, arrow, out = equation.partition("->")
    terms = ins.split(",")
    if len(terms) != len(node.inputs) or any(t.count("...") > 1 or "." in t.replace("...", "", 1)
                                             for t in (*terms, out)):
        raise refuse("has a malformed ellipsis")
    spans = [len(v.shape) - len(t.replace("...", "")) if "..." in t else 0
             for t, v in zip(terms, node.inputs)]
    if min(spans) < 0:
        raise refuse("names more letters than an operand has dimensions")
    width = max(spans)
    fresh = "".join(c for c in string.ascii_letters if c not in equation)[:width]

    def spelled(term: str, span: int) -> str:
        return term.replace("...", fresh[width - span:])

    if not arrow:   # implicit output: the ellipsis, then the letters used once, in alphabetical order
        letters = "".join(t.replace("...", "") for t in terms)
        out = "..." + "".join(sorted(c for c in set(letters) if letters.count(c) == 1))
    return ",".join(spelled(t, n) for t, n in zip(terms, spans)) + "->" + spelled(out, width)


def _rewrite(node: Node) -> list[Node]:
    ins, out_sub = _parse(node)
    x, out = node.inputs[0], node.outputs[0]
    a_sub = ins[0]
    summed = "".join(c for c in a_sub if c not in out_sub)
    if len(ins) == 1 and not summed:
        return [_permute(node, x, a_sub, out_sub, out)]
    if np.dtype(x.dtype) != np.float32:   # the MatMul kernel's one dtype
        raise unsupported_dtype(node, x, "a matrix product")
    if len(ins) == 1:
        # Sums within the one operand ('ij->i') are a product with ones over those letters.
        ones = np.ones([x.shape[a_sub.index(c)] for c in summed], x.dtype)
        y, b_sub = Value(f"{node.name}/einsum_ones", ones.dtype, ones.shape, data=ones), summed
    else:
        (a_sub, b_sub), y = ins, node.inputs[1]
    batch = [c for c in out_sub if c in a_sub and c in b_sub]
    free_a = [c for c in a_sub if c in out_sub and c not in b_sub]
    free_b = [c for c in b_sub if c in out_sub and c not in a_sub]
    contracted = [c for c in a_sub if c in b_sub and c not in out_sub]
    if batch + free_b + free_a == list(out_sub) != batch + free_a + free_b:
        # B's free letters come first in the output ('ij,kj->ki'): B x A needs no Transpose
        # of the product.
        x, y, a_sub, b_sub, free_a, free_b = y, x, b_sub, a_sub, free_b, free_a
    size = {**dict(zip(b_sub, y.shape)), **dict(zip(a_sub, x.shape))}
    for c in set(a_sub) & set(b_sub):
        if x.shape[a_sub.index(c)] != y.shape[b_sub.index(c)]:
            written = node.text("equation").replace(" ", "")
            spelled = f"'{a_sub},{b_sub}->{out_sub}'"
            if "." in written:
                spelled = f"'{written}' (its ellipsis spelled {spelled})"
            raise CompileError(f"Einsum '{node.name}': letter '{c}' of equation "
                               f"{spelled} is {x.shape[a_sub.index(c)]} long in "
                               f"'{x.name}' but {y.shape[b_sub.index(c)]} in '{y.name}'; vkc does "
                               "not broadcast named letters.")
    nodes: list[Node] = []

    def value(tag, shape):
        return Value(f"{out.name}/einsum_{tag}", out.dtype, tuple(shape))

    def arrange(v, sub, order, shape, tag):
        """v's letters `sub` permuted into `order`, then reshaped to `shape`."""
        perm = [sub.index(c) for c in order]
        if perm == sorted(perm) and tuple(v.shape) == tuple(shape):
            return v
        if v.is_constant:
            data = np.ascontiguousarray(v.data.transpose(perm).reshape(shape))
            return Value(f"{v.name}/einsum_{tag}", data.dtype, tuple(shape), data=data)
        if perm != sorted(perm):
            t = value(f"{tag}_t", [v.shape[p] for p in perm])
            nodes.append(Node("Transpose", f"{node.name}/{tag}_transpose", [v], [t], {"perm": perm},
                              sources=list(node.sources)))
            v = t
        return _reshape(node, v, shape, value(tag, shape), nodes, tag)

    m, n, k = prod(size[c] for c in free_a), prod(size[c] for c in free_b), \
        prod(size[c] for c in contracted)
    batch_shape = [size[c] for c in batch]
    lhs = arrange(x, a_sub, batch + free_a + contracted, batch_shape + [m, k], "a")
    rhs = arrange(y, b_sub, batch + contracted + free_b, batch_shape + [k, n], "b")
    order = batch + free_a + free_b
    perm = [order.index(c) for c in out_sub]
    in_order = perm == sorted(perm)
    product = out if in_order and tuple(out.shape) == tuple(batch_shape + [m, n]) \
        else value("matmul", batch_shape + [m, n])
    nodes.append(Node("MatMul", f"{node.name}/matmul", [lhs, rhs], [product],
                      sources=list(node.sources)))
    if product is out:
        return nodes
    if in_order:
        return nodes + [_reshape_node(node, product, out, "out")]
    grouped_shape = batch_shape + [size[c] for c in free_a + free_b]
    grouped = _reshape(node, product, grouped_shape, value("grouped", grouped_shape), nodes,
                       "grouped")
    nodes.append(Node("Transpose", f"{node.name}/transpose", [grouped], [out], {"perm": perm},
                      sources=list(node.sources)))
    return nodes


def _permute(node, x, sub, out_sub, out):
    """A one-operand Einsum without sums: a Transpose, or a view when the order stays."""
    perm = [sub.index(c) for c in out_sub]
    if perm == sorted(perm):
        return _reshape_node(node, x, out, "out")
    return Node("Transpose", f"{node.name}/transpose", [x], [out], {"perm": perm},
                sources=list(node.sources))


def _reshape(node, v, shape, target, nodes, tag):
    """v reshaped to `shape` (into `target`), or v itself when it has that shape already."""
    if tuple(v.shape) == tuple(shape):
        return v
    nodes.append(_reshape_node(node, v, target, tag))
    return target


def _reshape_node(node, v, target, tag):
    shape = np.array(target.shape, np.int64)
    spec = Value(f"{target.name}/shape", shape.dtype, shape.shape, data=shape)
    return Node("Reshape", f"{node.name}/{tag}_reshape", [v, spec], [target],
                sources=list(node.sources))
