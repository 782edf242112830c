"""Elementwise expressions: small trees fused passes build, and the one renderer that turns a
tree into GLSL computing on any dtype (float32 included).

A tree is a tuple: ("in", j) reads operand j, ("acc",) the producing kernel's accumulator,
("const", x) a literal (a Python int or float, exact: integer constants stay ints), or
(op, *children) with op an entry of elementwise_ops.OPS; ("clip", x, lo, hi) carries its bounds as
numbers (None: no bound). An op's attributes (LeakyRelu's alpha, ...) are ("const", x) children
after its operand.

One tree computes in one dtype, its output's: fusion joins only chains of one dtype (see
passes/elementwise.py), so the only operand of another dtype is a Pow exponent (ONNX's Pow
returns its base's type whatever the exponent's). Every op's result is brought back into the
dtype (8/16-bit integers wrap, float16 computes in float32 and rounds), so a fused chain computes
exactly what the ops one by one would. Integer semantics are ONNX's (C's): + - * wrap around
modulo 2^bits, division truncates toward zero (and gives 0 for a zero divisor, which ONNX leaves
undefined).

Templates splice the rendered expression into one statement, so there are no local variables: an
op that reads its operand twice (x < 0 ? a * x : x) repeats the operand's text. The fusion pass
bounds how large that can grow (`render_size`).
"""
from __future__ import annotations

import string

import numpy as np

from .dtypes import TYPES, ScalarType, float_literal
from .elementwise_ops import OPS, SPECIAL

NAN = float_literal(float("nan"))
FLOAT32 = TYPES["float32"]


class Unsupported(ValueError):
    """The tree uses an op the dtype does not take; the lowering turns it into a CompileError."""


def _kind(t: ScalarType) -> str:
    """Which of an op's texts computes in `t` (elementwise_ops.KINDS)."""
    return "double" if t.glsl == "double" else t.kind


def _unsigned(t: ScalarType) -> str:
    return {"int": "uint", "int64_t": "uint64_t"}.get(t.glsl, t.glsl)


class Renderer:
    """GLSL for trees computing in `out`'s type, over operands of the types `operands` (all of
    `out`'s type when not given). Helper functions the text calls (integer division, integer
    powers) collect in `helpers`; `int64` says whether the text needs 64-bit integers."""

    def __init__(self, out: ScalarType = FLOAT32, operands: list[ScalarType] | None = None):
        self.t, self.operands = out, operands
        self.helpers: dict[str, str] = {}
        self.int64 = out.int64 or any(o.int64 for o in operands or ())

    def render(self, tree, leaf) -> str:
        """GLSL for `tree`; `leaf(tree)` renders ("in", j) and ("acc",) leaves."""
        op, t = tree[0], self.t
        if op in ("in", "acc"):
            return leaf(tree)
        if op == "const":
            return t.literal(tree[1])
        text = OPS[op].text(_kind(t))
        if text is None:
            raise Unsupported(op)
        if op == "clip":
            x = self.render(tree[1], leaf)
            if tree[2] is not None:
                x = f"max({x}, {t.literal(tree[2])})"
            if tree[3] is not None:
                x = f"min({x}, {t.literal(tree[3])})"
            return x
        if op == "pow":
            return t.wrap(self._pow(tree[1], tree[2], leaf))
        assert text is not SPECIAL, op
        children = [self.render(c, leaf) for c in tree[1:]]
        text = string.Formatter().vformat(text, children, _Names(self))
        return text if OPS[op].exact else t.wrap(text)

    # ---- Pow: the exponent may have its own dtype -------------------------------------------

    def _pow(self, base, exponent, leaf) -> str:
        t = self.t
        x = self.render(base, leaf)
        if exponent[0] == "const":
            e = float(exponent[1])
            if t.glsl == "float":
                return pow_text(x, None, e)
            if not e.is_integer():
                if t.glsl == "double":
                    raise Unsupported("pow with a fractional exponent")
                return f"{t.glsl}(pow(float({x}), {float_literal(e)}))"
            ei = _int_type("int" if abs(e) < 2**31 else "int64_t")
            kind = "fpowi" if t.kind == "float" else "ipow"
            return f"{self.helper(kind, ei)}({x}, {ei.literal(int(e))})"
        et = self.operands[exponent[1]] if exponent[0] == "in" and self.operands else t
        y = self.render(exponent, leaf)
        if et.kind != "float":  # an integer exponent: repeated squaring, exact where pow() is not
            return f"{self.helper('ipow' if t.kind != 'float' else 'fpowi', et)}({x}, {y})"
        if t.glsl == "double":
            raise Unsupported("pow with a floating-point exponent tensor")
        if t.glsl == "float":
            return pow_text(x, f"float({y})" if et.glsl == "double" else y, None)
        # An integer base and a float exponent: ONNX runtimes compute in floating point and
        # truncate; an integral exponent goes the exact integer way.
        i = "int64_t" if t.int64 else "int"
        return (f"(floor({y}) == {y} ? {self.helper('ipow', _int_type(i))}({x}, {i}({y})) : "
                f"{t.glsl}(pow(float({x}), float({y}))))")

    def helper(self, kind: str, e: ScalarType | None = None) -> str:
        """The name of helper `kind` (HELPERS) on the compute type (and exponent type `e`),
        adding its text to `helpers` on first use."""
        t = self.t
        e = e or t
        name = f"{kind}_{t.glsl}_{e.glsl}"
        if name not in self.helpers:
            self.helpers[name] = HELPERS[kind].format(
                name=name, T=t.glsl, E=e.glsl, U=_unsigned(e), UT=_unsigned(t))
            self.int64 = self.int64 or "64" in name
        return name


class _Names:
    """The named fields of an op's text: {z}, {one} and helper names (elementwise_ops.py)."""

    def __init__(self, renderer: Renderer):
        self.r = renderer

    def __getitem__(self, key: str) -> str:
        if key in ("z", "one"):
            return self.r.t.literal(0 if key == "z" else 1)
        return self.r.helper(key)


def _int_type(glsl: str) -> ScalarType:
    return ScalarType(glsl, glsl, "int", 64 if "64" in glsl else 32)


def pow_text(x: str, y: str, exponent: float | None) -> str:
    """x ** y in float as ONNX (numpy) defines it. GLSL's pow() is undefined for x < 0 and for
    x = 0 with y <= 0, so the sign and the zero cases are handled here; small integer exponents
    multiply."""
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
    """GLSL for a float32 tree over float32 operands (Renderer's default types)."""
    return Renderer().render(tree, leaf)


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


HELPERS = {
    # Truncating division through magnitudes, defined for every operand pair: the most negative
    # value divided by -1 wraps around (as in C on two's complement), and x / 0 is 0 (as numpy
    # gives; SPIR-V leaves integer division by zero undefined).
    "idiv": """{T} {name}({T} a, {T} b) {{
    if (b == {T}(0)) return {T}(0);
    const {UT} q = (a < {T}(0) ? {UT}(0) - {UT}(a) : {UT}(a)) / (b < {T}(0) ? {UT}(0) - {UT}(b) : {UT}(b));
    return (a < {T}(0)) != (b < {T}(0)) ? {T}(0) - {T}(q) : {T}(q);
}}""",
    "udiv": """{T} {name}({T} a, {T} b) {{
    return b == {T}(0) ? {T}(0) : a / b;
}}""",
    # x ** e in wraparound integers; a negative exponent gives 1 / x ** |e| truncated toward zero.
    "ipow": """{T} {name}({T} x, {E} e) {{
    const bool negative = e < {E}(0);
    {U} n = negative ? {U}(0) - {U}(e) : {U}(e);
    if (negative) return x == {T}(1) ? {T}(1) : x == {T}(0) - {T}(1) ? ((n & {U}(1)) != {U}(0) ? x : {T}(1)) : {T}(0);
    {T} r = {T}(1);
    for (; n != {U}(0); n >>= 1) {{
        if ((n & {U}(1)) != {U}(0)) r *= x;
        x *= x;
    }}
    return r;
}}""",
    # x ** e for an integer e by repeated squaring (pow() is only approximately exact on integers).
    "fpowi": """{T} {name}({T} x, {E} e) {{
    const bool negative = e < {E}(0);
    {U} n = negative ? {U}(0) - {U}(e) : {U}(e);
    {T} r = {T}(1);
    for (; n != {U}(0); n >>= 1) {{
        if ((n & {U}(1)) != {U}(0)) r *= x;
        x *= x;
    }}
    return negative ? {T}(1) / r : r;
}}""",
}
