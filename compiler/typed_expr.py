"""Render expression trees (expr.py) that compute on a dtype other than float32.

One tree computes in one dtype, its output's: fusion joins only chains of one dtype (see
passes/elementwise.py), so the only operand of another dtype is a Pow exponent (ONNX's Pow
returns its base's type whatever the exponent's). Every op's result is brought back into the
dtype (8/16-bit integers wrap, float16 rounds), so a fused chain computes exactly what the ops one
by one would. Integer semantics are ONNX's (C's): + - * wrap around modulo 2^bits, division
truncates toward zero (and gives 0 for a zero divisor, which ONNX leaves undefined).
"""
from __future__ import annotations

from . import expr as E
from .dtypes import ScalarType

# Ops integer dtypes take (ONNX defines no others on integers), and float64 those whose GLSL has
# double overloads (GLSL has no double exp, log or pow).
INTEGER_OPS = {"add", "sub", "mul", "div", "max", "min", "clip", "neg", "abs", "relu", "sign",
               "prelu", "pow"}
FLOAT64_OPS = INTEGER_OPS | {"sqrt", "reciprocal", "floor", "ceil", "round", "softsign",
                             "thresholded_relu"}
# Ops whose result is always one of their operands' values: nothing to wrap or round.
EXACT = {"max", "min", "clip", "relu", "sign"}
# {z}, {one}: zero and one of the compute type.
TEXT = {"add": "({0} + {1})", "sub": "({0} - {1})", "mul": "({0} * {1})", "div": "({0} / {1})",
        "max": "max({0}, {1})", "min": "min({0}, {1})", "prelu": "({0} < {z} ? {1} * {0} : {0})",
        "relu": "max({0}, {z})", "neg": "(-{0})", "abs": "abs({0})", "sign": "sign({0})",
        "sqrt": "sqrt({0})", "reciprocal": "({one} / {0})", "floor": "floor({0})",
        "ceil": "ceil({0})", "round": "roundEven({0})", "softsign": "({0} / ({one} + abs({0})))",
        "thresholded_relu": "({0} > {1} ? {0} : {z})"}
UNSIGNED = {"neg": "({z} - {0})", "abs": "{0}", "sign": "min({0}, {one})", "relu": "{0}",
            "prelu": "{0}"}


class Unsupported(ValueError):
    """The tree uses an op the dtype does not take; the lowering turns it into a CompileError."""


def _unsigned(t: ScalarType) -> str:
    return {"int": "uint", "int64_t": "uint64_t"}.get(t.glsl, t.glsl)


class TypedRenderer:
    """GLSL for trees over operands of the given types, computing in `out`'s type. Helper
    functions the text calls (integer division, integer powers) collect in `helpers`."""

    def __init__(self, out: ScalarType, operands: list[ScalarType]):
        self.t, self.operands = out, operands
        self.helpers: dict[str, str] = {}
        self.int64 = out.int64 or any(o.int64 for o in operands)

    def render(self, tree, leaf) -> str:
        op, t = tree[0], self.t
        if op == "in":
            return leaf(tree)
        if op == "const":
            return t.literal(tree[1])
        if op == "clip":
            x = self.render(tree[1], leaf)
            if tree[2] is not None:
                x = f"max({x}, {t.literal(tree[2])})"
            if tree[3] is not None:
                x = f"min({x}, {t.literal(tree[3])})"
            return x
        allowed = FLOAT64_OPS if t.glsl == "double" else INTEGER_OPS if t.kind != "float" else None
        if allowed is not None and op not in allowed:
            raise Unsupported(op)
        if op == "pow":
            return t.wrap(self._pow(tree[1], tree[2], leaf))
        children = [self.render(c, leaf) for c in tree[1:]]
        if t.glsl == "float":  # float16: float32 arithmetic, rounded after each op
            text = (E.UNARY.get(op) or E.BINARY[op]).format(*children)
        elif op == "div" and t.kind != "float":
            kind = "idiv" if t.kind == "int" else "udiv"
            text = f"{self._helper(kind, t, t)}({children[0]}, {children[1]})"
        else:
            table = UNSIGNED if t.kind == "uint" and op in UNSIGNED else TEXT
            text = table[op].format(*children, z=t.literal(0), one=t.literal(1))
        return text if op in EXACT else t.wrap(text)

    # ---- Pow: the exponent may have its own dtype -------------------------------------------

    def _pow(self, base, exponent, leaf) -> str:
        t = self.t
        x = self.render(base, leaf)
        if exponent[0] == "const":
            e = float(exponent[1])
            if t.glsl == "float":
                return E.pow_text(x, None, e)
            if not e.is_integer():
                if t.glsl == "double":
                    raise Unsupported("pow with a fractional exponent")
                return f"{t.glsl}(pow(float({x}), {E.float_literal(e)}))"
            ei = _int_type("int" if abs(e) < 2**31 else "int64_t")
            kind = "fpowi" if t.kind == "float" else "ipow"
            return f"{self._helper(kind, t, ei)}({x}, {ei.literal(int(e))})"
        et = self.operands[exponent[1]] if exponent[0] == "in" else t
        y = self.render(exponent, leaf)
        if et.kind != "float":  # an integer exponent: repeated squaring, exact where pow() is not
            return f"{self._helper('ipow' if t.kind != 'float' else 'fpowi', t, et)}({x}, {y})"
        if t.glsl == "double":
            raise Unsupported("pow with a floating-point exponent tensor")
        if t.glsl == "float":
            return E.pow_text(x, f"float({y})" if et.glsl == "double" else y, None)
        # An integer base and a float exponent: ONNX runtimes compute in floating point and
        # truncate; an integral exponent goes the exact integer way.
        i = "int64_t" if t.int64 else "int"
        return (f"(floor({y}) == {y} ? {self._helper('ipow', t, _int_type(i))}({x}, {i}({y})) : "
                f"{t.glsl}(pow(float({x}), float({y}))))")

    def _helper(self, kind: str, t: ScalarType, e: ScalarType) -> str:
        name = f"{kind}_{t.glsl}_{e.glsl}"
        if name not in self.helpers:
            self.helpers[name] = HELPERS[kind].format(
                name=name, T=t.glsl, E=e.glsl, U=_unsigned(e), UT=_unsigned(t))
            self.int64 = self.int64 or "64" in name
        return name


def _int_type(glsl: str) -> ScalarType:
    return ScalarType(glsl, glsl, "int", 64 if "64" in glsl else 32)


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
