"""Elementwise expressions: small trees fused passes build and templates render as GLSL.

A tree is a tuple: ("in", j) reads operand j, ("acc",) the producing kernel's accumulator,
("const", x) a literal (a Python int or float, exact: integer constants stay ints), or
(op, *children) with op in UNARY / BINARY / "clip". An op's attributes (LeakyRelu's alpha, ...)
are ("const", x) children after its operand. This module renders float32 trees; typed_expr.py
renders trees computing on other dtypes.

Templates splice the rendered expression into one statement, so there are no local variables: an
op that reads its operand twice (x < 0 ? a * x : x) repeats the operand's text. The fusion pass
bounds how large that can grow (`render_size`).
"""
from __future__ import annotations

import numpy as np

BINARY = {"add": "({0} + {1})", "sub": "({0} - {1})", "mul": "({0} * {1})", "div": "({0} / {1})",
          "max": "max({0}, {1})", "min": "min({0}, {1})",
          "prelu": "({0} < 0.0 ? {1} * {0} : {0})"}
# exp(x) - 1 without cancelling near 0 (a Taylor polynomial below |x| = 0.125, error < 3e-7).
_EXPM1 = ("(abs({0}) < 0.125 ? {0} * (1.0 + {0} * (0.5 + {0} * (0.16666667 + {0} * 0.041666668)))"
          " : exp({0}) - 1.0)")
# Ops of one operand; more children are constant attributes ({1}, {2}).
UNARY = {"relu": "max({0}, 0.0)", "sigmoid": "(1.0 / (1.0 + exp(-{0})))", "neg": "(-{0})",
         "abs": "abs({0})", "exp": "exp({0})", "log": "log({0})", "sqrt": "sqrt({0})",
         "reciprocal": "(1.0 / {0})", "floor": "floor({0})", "ceil": "ceil({0})",
         "round": "roundEven({0})", "sign": "sign({0})",
         # tanh(x) = sign(x) (1 - 2 / (exp(2|x|) + 1)); below |x| = 0.125 that form cancels, so
         # an odd Taylor polynomial (error under 1e-9 there) takes over. GLSL's tanh is only
         # specified through the cancelling exp() quotient.
         "tanh": "(abs({0}) < 0.125 ? {0} * (1.0 + {0} * {0} * (-0.33333334 + {0} * {0} * "
                 "(0.13333334 - 0.053968254 * {0} * {0}))) : "
                 "sign({0}) * (1.0 - 2.0 / (exp(2.0 * abs({0})) + 1.0)))",
         "hardswish": "({0} * clamp({0} * 0.16666667 + 0.5, 0.0, 1.0))",
         "softsign": "({0} / (1.0 + abs({0})))",
         # log(1 + exp(x)) without overflow for large x
         "softplus": "(max({0}, 0.0) + log(1.0 + exp(-abs({0}))))",
         "hardsigmoid": "clamp({1} * {0} + {2}, 0.0, 1.0)",
         "elu": "({0} < 0.0 ? {1} * " + _EXPM1 + " : {0})",
         "selu": "({0} <= 0.0 ? {2} * {1} * " + _EXPM1 + " : {2} * {0})",
         "thresholded_relu": "({0} > {1} ? {0} : 0.0)"}

ONNX_BINARY = {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div", "PRelu": "prelu",
               "Pow": "pow"}
ONNX_UNARY = {"Relu": "relu", "Sigmoid": "sigmoid", "Neg": "neg", "Abs": "abs", "Exp": "exp",
              "Log": "log", "Sqrt": "sqrt", "Reciprocal": "reciprocal", "Floor": "floor",
              "Ceil": "ceil", "Round": "round", "Sign": "sign", "Tanh": "tanh",
              "HardSwish": "hardswish", "Softsign": "softsign", "Softplus": "softplus",
              "HardSigmoid": "hardsigmoid", "LeakyRelu": "prelu", "Elu": "elu", "Selu": "selu",
              "ThresholdedRelu": "thresholded_relu"}
ONNX_VARIADIC = {"Sum": "add", "Max": "max", "Min": "min", "Mean": "add"}
# Attributes of unary ops, in the order the tree carries them, with ONNX's defaults.
ONNX_ATTRS = {"HardSigmoid": (("alpha", 0.2), ("beta", 0.5)), "LeakyRelu": (("alpha", 0.01),),
              "Elu": (("alpha", 1.0),),
              "Selu": (("alpha", 1.67326319217681884765625), ("gamma", 1.05070102214813232421875)),
              "ThresholdedRelu": (("alpha", 1.0),)}


def float_literal(x: float) -> str:
    """A GLSL literal that rounds to exactly the float32 value."""
    x = np.float32(x)
    if np.isinf(x):
        return "uintBitsToFloat(0x7f800000u)" if x > 0 else "uintBitsToFloat(0xff800000u)"
    if np.isnan(x):
        return "uintBitsToFloat(0x7fc00000u)"
    text = f"{float(x):.9g}"
    return text if any(c in text for c in ".e") else text + ".0"


NAN = float_literal(float("nan"))


def pow_text(x: str, y: str, exponent: float | None) -> str:
    """x ** y as ONNX (numpy) defines it. GLSL's pow() is undefined for x < 0 and for x = 0 with
    y <= 0, so the sign and the zero cases are handled here; small integer exponents multiply."""
    if exponent is not None:
        e = float(np.float32(exponent))
        simple = {0.0: "1.0", 1.0: x, 2.0: f"({x} * {x})", 3.0: f"({x} * {x} * {x})",
                  4.0: f"(({x} * {x}) * ({x} * {x}))", 0.5: f"sqrt({x})", -1.0: f"(1.0 / {x})",
                  -2.0: f"(1.0 / ({x} * {x}))", -0.5: f"inversesqrt({x})"}
        if e in simple:
            return simple[e]
        if e.is_integer():
            mag = f"pow(abs({x}), {float_literal(e)})"
            return f"({x} < 0.0 ? -{mag} : {mag})" if e % 2 else mag
        return f"({x} < 0.0 ? {NAN} : pow({x}, {float_literal(e)}))"
    mag = f"pow(abs({x}), {y})"
    odd = f"(floor({y}) == {y} && mod({y}, 2.0) == 1.0)"
    return (f"({y} == 0.0 ? 1.0 : {x} == 0.0 ? ({y} < 0.0 ? {float_literal(np.inf)} : 0.0) : "
            f"{x} > 0.0 ? {mag} : floor({y}) != {y} ? {NAN} : {odd} ? -{mag} : {mag})")


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
    children = [render(c, leaf) for c in tree[1:]]
    if op == "pow":
        return pow_text(*children, tree[2][1] if tree[2][0] == "const" else None)
    return (UNARY.get(op) or BINARY[op]).format(*children)


def render_size(tree) -> int:
    """Length of the rendered GLSL with every leaf as a one-character name."""
    return len(render(tree, lambda t: "x"))


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
