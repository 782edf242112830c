"""Elementwise ops become `vkc.Elementwise` nodes holding an expression tree; chains of them
fuse into one kernel when the intermediate has no other reader and both compute in the same
dtype (a kernel computes in one dtype, see expr.py). Which ONNX ops are elementwise, and as which
tree op, is elementwise_ops.py's table."""
from __future__ import annotations

import numpy as np
import onnx

from .. import expr as E
from ..elementwise_ops import (FLOAT64_OPS, INTEGER_OPS, ONNX_ATTRS, ONNX_BINARY, ONNX_UNARY,
                              ONNX_VARIADIC)
from ..errors import CompileError
from ..frontend import MAX_OPSET
from ..ir import Graph, Node
from ..registry import declare

ELEMENTWISE_OPS = set(ONNX_BINARY) | set(ONNX_UNARY) | set(ONNX_VARIADIC) | {"Clip"}
# Fusion stops before a kernel's expression passes this many characters of GLSL: ops that read
# their operand twice (Elu, PRelu, HardSwish) repeat its text, so a long chain would grow
# exponentially.
MAX_EXPR_CHARS = 4000


def _dtypes_doc(op: str) -> str:
    """The dtypes vkc computes an elementwise op on: those ONNX allows (its first input's type
    constraint) that the expression renderer takes (float32 and float16 take every op)."""
    name = ONNX_BINARY.get(op) or ONNX_UNARY.get(op) or ONNX_VARIADIC.get(op) or op.lower()
    vkc = {"float", "float16"}  # ONNX's names: float is float32, double float64
    if name in FLOAT64_OPS:
        vkc.add("double")
    if name in INTEGER_OPS:
        vkc |= {f"{u}int{b}" for u in ("", "u") for b in (8, 16, 32, 64)}
    schema = onnx.defs.get_schema(op, max_inclusive_version=MAX_OPSET)
    allowed = {t[len("tensor("):-1] for t in schema.type_constraints[0].allowed_type_strs}
    have = vkc & allowed
    names = [n for n in ("float", "float16", "double") if n in have]
    for u in ("int", "uint"):
        ints = [f"{u}{b}" for b in (8, 16, 32, 64) if f"{u}{b}" in have]
        names += [f"{u}8-64"] if len(ints) == 4 else ints
    text = ", ".join("float64" if n == "double" else "float32" if n == "float" else n for n in names)
    return text + ("; any numeric exponent" if op == "Pow" else "")


_LIMITS = {"Clip": "min and max computed at run time",
           "Pow": "float64 base with a floating-point exponent tensor or a fractional constant"}
for _op in sorted(ELEMENTWISE_OPS):
    # The elementwise kernel checks dtypes per expression (lower/elementwise.py).
    declare(_op, handled_by="fused elementwise", module=__name__, dtypes=None,
            dtypes_doc=_dtypes_doc(_op), constant_inputs=(1, 2) if _op == "Clip" else (),
            limits=_LIMITS.get(_op, "-"))


def _clip_bounds(node: Node) -> tuple[float | None, float | None]:
    if "min" in node.attrs or "max" in node.attrs or len(node.inputs) == 1:  # opset < 11
        return node.attrs.get("min"), node.attrs.get("max")
    bounds = []
    for v in (node.input(1), node.input(2)):
        if v is None:
            bounds.append(None)
        elif not v.is_constant:
            raise CompileError(f"Clip '{node.name}': min/max come from the computation "
                               f"('{v.name}'); vkc needs them constant.")
        else:
            bounds.append(v.data.reshape(-1)[0].item())  # exact: an int64 bound stays an int
    return bounds[0], bounds[1]


def to_elementwise(graph: Graph) -> Graph:
    for node in graph.nodes:
        if node.op_type not in ELEMENTWISE_OPS or node.domain not in ("", "ai.onnx"):
            continue
        if node.op_type == "Clip":
            lo, hi = _clip_bounds(node)
            tree, operands = ("clip", ("in", 0), lo, hi), [node.inputs[0]]
        elif node.op_type in ONNX_UNARY:
            # ONNX float attributes are float32, for every dtype the op computes on.
            attrs = [("const", float(np.float32(node.attrs.get(name, default))))
                     for name, default in ONNX_ATTRS.get(node.op_type, ())]
            tree, operands = (ONNX_UNARY[node.op_type], ("in", 0), *attrs), [node.inputs[0]]
        else:
            leaves, operands = [], []
            for v in node.inputs:
                if v.is_constant and v.size == 1:  # scalars become literals in the kernel
                    leaves.append(("const", v.data.reshape(-1)[0].item()))
                else:  # the same value twice (x * x) is one operand
                    same = [i for i, o in enumerate(operands) if o is v]
                    leaves.append(("in", same[0] if same else len(operands)))
                    if not same:
                        operands.append(v)
            if node.op_type in ONNX_VARIADIC:  # Sum(a, b, c) = add(add(a, b), c)
                tree = leaves[0]
                for leaf in leaves[1:]:
                    tree = (ONNX_VARIADIC[node.op_type], tree, leaf)
                if node.op_type == "Mean":
                    tree = ("div", tree, ("const", float(len(leaves))))
            else:
                tree = (ONNX_BINARY[node.op_type], *leaves)
        node.op_type, node.attrs, node.inputs = "vkc.Elementwise", {"expr": tree}, operands
    graph.relink()
    return graph


def fuse_elementwise_chains(graph: Graph) -> Graph:
    changed = True
    while changed:
        changed = False
        for consumer in graph.nodes:
            if consumer.op_type != "vkc.Elementwise":
                continue
            for k, v in enumerate(consumer.inputs):
                prod = v.producer
                if (prod is None or prod.op_type != "vkc.Elementwise"
                        or not graph.used_only_by(v, consumer) or v.alias_of is not None
                        or tuple(v.shape) != tuple(consumer.outputs[0].shape)
                        or v.dtype != consumer.outputs[0].dtype
                        or _merged_size(consumer, k, prod) > MAX_EXPR_CHARS):
                    continue
                merge_into(consumer, k, prod)
                graph.nodes.remove(prod)
                graph.relink()
                changed = True
                break
            if changed:
                break
    return graph


def _merged_size(consumer: Node, k: int, prod: Node) -> int:
    tree = E.substitute(consumer.attrs["expr"],
                        lambda t: prod.attrs["expr"] if t == ("in", k) else None)
    return E.render_size(tree)


def merge_into(consumer: Node, k: int, prod: Node) -> None:
    """Substitute producer `prod`'s expression for operand k of `consumer`, sharing operands."""
    operands = [v for i, v in enumerate(consumer.inputs) if i != k]
    old_index = {i: operands.index(v) for i, v in enumerate(consumer.inputs) if i != k}

    def index_of(v):
        for i, o in enumerate(operands):
            if o is v:
                return i
        operands.append(v)
        return len(operands) - 1

    prod_tree = E.substitute(prod.attrs["expr"],
                             lambda t: ("in", index_of(prod.inputs[t[1]])) if t[0] == "in" else None)
    tree = E.substitute(consumer.attrs["expr"],
                        lambda t: prod_tree if t == ("in", k) else ("in", old_index[t[1]]))
    consumer.attrs["expr"] = tree
    consumer.inputs = operands
    consumer.sources = prod.sources + consumer.sources
