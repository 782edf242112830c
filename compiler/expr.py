"""Elementwise expressions: small trees fused passes build and templates render as GLSL.

A tree is a tuple: ("in", j) reads operand j, ("acc",) the producing kernel's accumulator,
("const", x) a float literal, or (op, *children) with op in UNARY / BINARY / "clip".
"""
from __future__ import annotations

import numpy as np

BINARY = {"add": "({} + {})", "sub": "({} - {})", "mul": "({} * {})", "div": "({} / {})",
          "max": "max({}, {})", "min": "min({}, {})"}
UNARY = {"relu": "max({}, 0.0)", "sigmoid": "(1.0 / (1.0 + exp(-{})))", "neg": "(-{})"}

ONNX_BINARY = {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div"}
ONNX_UNARY = {"Relu": "relu", "Sigmoid": "sigmoid", "Neg": "neg"}
ONNX_VARIADIC = {"Sum": "add", "Max": "max", "Min": "min", "Mean": "add"}


def float_literal(x: float) -> str:
    """A GLSL literal that rounds to exactly the float32 value."""
    x = np.float32(x)
    if np.isinf(x):
        return "uintBitsToFloat(0x7f800000u)" if x > 0 else "uintBitsToFloat(0xff800000u)"
    text = f"{float(x):.9g}"
    return text if any(c in text for c in ".e") else text + ".0"


def render(tree, leaf) -> str:
    """GLSL for `tree`; `leaf(tree)` renders ("in", j) and ("acc",) leaves."""
    op = tree[0]
    if op in ("in", "acc"):
        return leaf(tree)
    if op == "const":
        return float_literal(tree[1])
    if op == "clip":
        x = render(tree[1], leaf)
        if tree[2] is not None:
            x = f"max({x}, {float_literal(tree[2])})"
        if tree[3] is not None:
            x = f"min({x}, {float_literal(tree[3])})"
        return x
    if op in UNARY:
        return UNARY[op].format(render(tree[1], leaf))
    return BINARY[op].format(render(tree[1], leaf), render(tree[2], leaf))


def substitute(tree, mapping):
    """Replace leaves: mapping(tree) returns a new subtree for a leaf or None to keep it."""
    if tree[0] in ("in", "acc"):
        new = mapping(tree)
        return tree if new is None else new
    if tree[0] == "const":
        return tree
    if tree[0] == "clip":
        return ("clip", substitute(tree[1], mapping), tree[2], tree[3])
    return (tree[0], *(substitute(c, mapping) for c in tree[1:]))


def count_ops(tree) -> int:
    if tree[0] in ("in", "acc", "const"):
        return 0
    children = tree[1:2] if tree[0] == "clip" else tree[1:]
    return 1 + sum(count_ops(c) for c in children)
