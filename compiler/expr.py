"""Elementwise expressions: small trees fused passes build, and the one renderer that turns a
tree into GLSL computing on any dtype (float32 included).

A tree is a tuple: ("in", j) reads operand j, ("acc",) the producing kernel's accumulator,
("const", x) a literal (a Python int, float or bool, exact: integer constants stay ints), or
(op, *children) with op an entry of elementwise_ops.OPS; ("clip", x, lo, hi) carries its bounds as
numbers (None: no bound), ("cast", x, dtype name[, saturate, round_mode]) its target (and Cast's
saturate and round_mode attributes, which only conversions to float8 types read; default True,
"up"). An op's attributes (LeakyRelu's
alpha, ...) are ("const", x) children after its operand.

Every subtree has a type (Renderer.type_of): a leaf its operand's, an op its operands' (Pow its
base's, whatever the exponent's), a predicate (comparisons, IsNaN) bool, Where its values', a
cast its target; a constant takes the type its context computes in. An op's text is the one for
the type it computes in (elementwise_ops.py), and every result is brought back into its type
(8/16-bit integers wrap, float16 computes in float32 and rounds), so a fused chain computes
exactly what the ops one by one would. Integer semantics are ONNX's (C's): + - * wrap around
modulo 2^bits, division truncates toward zero (and gives 0 for a zero divisor, which ONNX leaves
undefined).

Templates splice the rendered expression into one statement, so there are no local variables: an
op that reads its operand twice (x < 0 ? a * x : x) repeats the operand's text. The fusion pass
bounds how large that can grow (`render_size`); ops that read it many times (erf, GELU's tanh)
call a helper function instead (HELPERS), which the kernel declares.
"""
from __future__ import annotations

import math
import string

import numpy as np

from .dtypes import TYPES, ScalarType, float_literal
from .elementwise_ops import OPS, SPECIAL
from .float_functions import HELPERS as FLOAT_FUNCTIONS

FLOAT32, BOOL = TYPES["float32"], TYPES["bool"]


class Unsupported(ValueError):
    """The tree uses an op the dtype does not take; the lowering turns it into a CompileError.
    `dtype` is the ScalarType the op would have computed in."""

    def __init__(self, op: str, dtype: ScalarType | None = None):
        super().__init__(op)
        self.dtype = dtype


def _kind(t: ScalarType) -> str:
    """Which of an op's texts computes in `t` (elementwise_ops.KINDS)."""
    return "double" if t.glsl == "double" else t.kind


def _unsigned(t: ScalarType) -> str:
    return {"int": "uint", "int64_t": "uint64_t"}.get(t.glsl, t.glsl)


class Renderer:
    """GLSL for trees whose result has `out`'s type, over operands of the types `operands` (all of
    `out`'s type when not given). Every subtree has its own type (`type_of`): an op computes in
    its operands' type, a predicate returns bool, a cast its target; a constant takes the type its
    context computes in. Helper functions the text calls (integer division, integer powers, erf)
    collect in `helpers`; `int64` says whether the text needs 64-bit integers, `low_precision`
    whether it converts a format 1.2 type (the kernel includes templates/low_precision.glsl)."""

    def __init__(self, out: ScalarType = FLOAT32, operands: list[ScalarType] | None = None):
        self.t, self.operands = out, operands
        self.helpers: dict[str, str] = {}
        self.int64 = out.int64 or any(o.int64 for o in operands or ())
        self.low_precision = out.low_precision or any(o.low_precision for o in operands or ())

    def render(self, tree, leaf) -> str:
        """GLSL for `tree`; `leaf(tree)` renders ("in", j) and ("acc",) leaves."""
        return self.typed(tree, leaf, self.t)[0]

    def type_of(self, tree) -> ScalarType | None:
        """The type `tree`'s value has; None for a constant (it takes its context's type)."""
        op = tree[0]
        if op == "in":
            return self.operands[tree[1]] if self.operands else self.t
        if op == "acc":
            return self.t
        if op == "const":
            return None
        typing = OPS[op].typing
        if typing == "predicate":
            return BOOL
        if typing == "cast":
            return TYPES[tree[2]]
        # Pow has its base's type, Where its value operands'.
        return self._first_type(tree[1:2] if op == "pow" else tree[2:] if typing == "select"
                                else tree[1:])

    def _first_type(self, children) -> ScalarType | None:
        """The type of the first child that is not a constant (nor a Clip bound, a Cast type)."""
        return next((t for c in children if isinstance(c, tuple)
                     for t in [self.type_of(c)] if t is not None), None)

    def typed(self, tree, leaf, want: ScalarType) -> tuple[str, ScalarType]:
        """(GLSL, type) of `tree`, where its context computes in `want` (which a constant takes)."""
        op = tree[0]
        if op in ("in", "acc"):
            return leaf(tree), self.type_of(tree)
        if op == "const":
            return want.literal(tree[1]), want
        entry = OPS[op]
        t = self.type_of(tree) or want
        self.int64 = self.int64 or t.int64
        if entry.typing == "cast":
            return self._cast(tree[1], t, leaf, *tree[3:]), t
        # The type the op's text computes in: its operands' (a predicate's differ from its result;
        # constant folding leaves no predicate of constants only).
        ct = (self._first_type(tree[1:]) or self.t) if entry.typing == "predicate" else t
        text = entry.text(_kind(ct))
        if text is None:
            raise Unsupported(op, ct)
        if op == "clip":
            return self._clip(tree[1], tree[2], tree[3], leaf, t), t
        if op == "pow":
            return t.wrap(self._pow(tree[1], tree[2], leaf, t)), t
        assert text is not SPECIAL, op
        wants = [BOOL, t, t] if entry.typing == "select" else [ct] * (len(tree) - 1)
        children = [self.typed(c, leaf, w)[0] for c, w in zip(tree[1:], wants)]
        text = string.Formatter().vformat(text, children, _Names(self, ct))
        return (text if entry.exact else t.wrap(text)), t

    # ---- Cast: ONNX's conversions ------------------------------------------------------------

    def _cast(self, operand, to: ScalarType, leaf, saturate: bool = True,
              round_mode: str = "up") -> str:
        """`operand` converted to `to` as ONNX (numpy) does: floats to integers truncate toward
        zero, integers wrap into narrower ones, anything to bool is x != 0 (true for NaN), bool
        to numbers 0 or 1. NaN, inf and out-of-range floats to integers are undefined in ONNX
        and in GLSL alike (to the 4- and 2-bit integers they give 0, as ONNX's reference does).
        To bfloat16, float8 and float4 types the GLSL of templates/low_precision.glsl rounds,
        with Cast's `saturate` and `round_mode`, from float32 (float64 goes through float32: a
        double rounding, which can differ from a direct one by one step on rare near-ties)."""
        x, s = self.typed(operand, leaf, to)
        self.low_precision = self.low_precision or to.low_precision or s.low_precision
        if s == to:
            return x
        if to.kind == "bool":
            return f"({x} != {s.literal(0)})"
        if s.kind == "bool":
            return f"({x} ? {to.literal(1)} : {to.literal(0)})"
        if to.coded:
            return to.decode(to.encode(f"float({x})" if s.glsl != "float" else x,
                                       bool(saturate), round_mode))
        if s.kind == "float" and to.low_precision:  # int4, uint4, int2, uint2
            lo, hi = (-(1 << to.bits - 1), (1 << to.bits - 1) - 1) if to.kind == "int" else \
                (0, (1 << to.bits) - 1)
            x = f"lp_float_to_int({'float(' + x + ')' if s.glsl != 'float' else x}, {lo}, {hi})"
            return x if to.kind == "int" else f"uint({x})"
        if s.glsl == to.glsl:  # float32 -> float16 rounds, int32 -> int8 wraps
            return to.wrap(x)
        if s.kind == "float" and to.packed and to.kind == "uint":
            x = f"int({x})"  # -3.0 -> uint8 is 253 (via int): GLSL's float -> uint is undefined below 0
        return to.wrap(f"{to.glsl}({x})")

    # ---- Clip: bounds are numbers ------------------------------------------------------------

    def _clip(self, operand, lo, hi, leaf, t: ScalarType) -> str:
        """Clip as ONNX defines it: a missing bound is the type's lowest or largest value (so
        infinities clip to the largest finite magnitude, as in onnxruntime), and floats keep NaN."""
        x = self.typed(operand, leaf, t)[0]
        if t.kind == "float":
            big = FLOAT_MAX[t.name]
            lo, hi = -big if lo is None else lo, big if hi is None else hi
            return (f"{self.helper('fmin', t)}({self.helper('fmax', t)}({x}, {t.literal(lo)}), "
                    f"{t.literal(hi)})")
        if lo is not None:
            x = f"max({x}, {t.literal(lo)})"
        if hi is not None:
            x = f"min({x}, {t.literal(hi)})"
        return x

    # ---- Pow: the exponent may have its own dtype -------------------------------------------

    def _pow(self, base, exponent, leaf, t: ScalarType) -> str:
        x = self.typed(base, leaf, t)[0]
        if exponent[0] == "const":
            e = float(exponent[1])
            if t.glsl == "float":
                return pow_text(x, None, e, self.helper("fpow", t))
            if not e.is_integer():
                if t.glsl == "double":
                    raise Unsupported("pow with a fractional exponent", t)
                return f"{t.glsl}(pow(float({x}), {float_literal(e)}))"
            ei = _int_type("int" if abs(e) < 2**31 else "int64_t")
            kind = "fpowi" if t.kind == "float" else "ipow"
            return f"{self.helper(kind, t, ei)}({x}, {ei.literal(int(e))})"
        et = self.type_of(exponent) or t
        y = self.typed(exponent, leaf, et)[0]
        if et.kind != "float":  # an integer exponent: repeated squaring, exact where pow() is not
            return f"{self.helper('ipow' if t.kind != 'float' else 'fpowi', t, et)}({x}, {y})"
        if t.glsl == "double":
            raise Unsupported("pow with a floating-point exponent tensor", t)
        if t.glsl == "float":
            return pow_text(x, f"float({y})" if et.glsl == "double" else y, None,
                            self.helper("fpow", t))
        # An integer base and a float exponent: ONNX runtimes compute in floating point and
        # truncate; an integral exponent goes the exact integer way.
        i = "int64_t" if t.int64 else "int"
        return (f"(floor({y}) == {y} ? {self.helper('ipow', t, _int_type(i))}({x}, {i}({y})) : "
                f"{t.glsl}(pow(float({x}), float({y}))))")

    def helper(self, kind: str, t: ScalarType, e: ScalarType | None = None) -> str:
        """The name of helper `kind` (HELPERS) computing in `t` (with exponent type `e`), adding
        its text to `helpers` on first use."""
        e = e or t
        name = f"{kind}_{t.glsl}_{e.glsl}"
        if name not in self.helpers:
            self.helpers[name] = HELPERS[kind].format(
                name=name, T=t.glsl, E=e.glsl, U=_unsigned(e), UT=_unsigned(t))
            self.int64 = self.int64 or "64" in name
        return name


class _Names:
    """The named fields of an op's text computing in type t: {z}, {one} and helper names
    (elementwise_ops.py)."""

    def __init__(self, renderer: Renderer, t: ScalarType):
        self.r, self.t = renderer, t

    def __getitem__(self, key: str) -> str:
        if key in ("z", "one"):
            return self.t.literal(0 if key == "z" else 1)
        if key == "bits":
            return self.t.literal(self.t.bits)
        return self.r.helper(key, self.t)


def _int_type(glsl: str) -> ScalarType:
    return ScalarType(glsl, glsl, "int", 64 if "64" in glsl else 32)


def pow_text(x: str, y: str | None, exponent: float | None, fpow: str) -> str:
    """x ** y in float as ONNX (C's pow, which onnxruntime calls) defines it: the helper `fpow`
    (HELPERS["fpow"]) or, for small integer constant exponents, products, which give C's results
    for every x (NaN, infinities and signed zeros included)."""
    if exponent is not None:
        e = float(np.float32(exponent))
        simple = {0.0: "1.0", 1.0: x, 2.0: f"({x} * {x})", 3.0: f"({x} * {x} * {x})",
                  4.0: f"(({x} * {x}) * ({x} * {x}))", -1.0: f"(1.0 / {x})",
                  -2.0: f"(1.0 / ({x} * {x}))"}
        if e in simple:
            return simple[e]
        y = float_literal(e)
    return f"{fpow}({x}, {y})"


def _float32_renderer(tree) -> Renderer:
    r = Renderer()
    r.render(tree, lambda t: "x")
    return r


def needs_int64(tree) -> bool:
    """True when a float32 tree computes something in 64-bit integers (a cast through int64)."""
    return _float32_renderer(tree).int64


def needs_low_precision(tree) -> bool:
    """True when a float32 tree converts through a low-precision type (a cast to float8 and
    back): its kernel includes templates/low_precision.glsl."""
    return _float32_renderer(tree).low_precision


def render_size(tree, out: ScalarType = FLOAT32, operands: list[ScalarType] | None = None) -> int:
    """Length of the rendered GLSL with every leaf as a one-character name."""
    return len(Renderer(out, operands).render(tree, lambda t: "x"))


def substitute(tree, mapping):
    """Replace leaves: mapping(tree) returns a new subtree for a leaf or None to keep it.
    Children that are not trees (Clip's bounds, Cast's dtype) stay as they are."""
    if tree[0] in ("in", "acc"):
        new = mapping(tree)
        return tree if new is None else new
    if tree[0] == "const":
        return tree
    return (tree[0], *(substitute(c, mapping) if isinstance(c, tuple) else c for c in tree[1:]))


def count_ops(tree) -> int:
    if tree[0] in ("in", "acc", "const"):
        return 0
    return 1 + sum(count_ops(c) for c in tree[1:] if isinstance(c, tuple))


def _horner(coefficients: list[str], var: str = "x2") -> str:
    """c0 + x2 * (c1 + x2 * (c2 + ...)) as GLSL text over the variable x2 (or `var`)."""
    text = coefficients[-1]
    for c in reversed(coefficients[:-1]):
        text = f"{c} + {var} * ({text})"
    return text


def _double(x: float) -> str:
    return TYPES["float64"].literal(x)


# ln 2 split in two (fdlibm): LN2_HI has trailing zero bits, so k * LN2_HI is exact for the
# exponents k exp() and log() meet.
_LN2_HI, _LN2_LO = float.fromhex("0x1.62e42fee00000p-1"), float.fromhex("0x1.a39ef35793c76p-33")


# The largest finite value of each float type: Clip's missing bounds.
FLOAT_MAX = {"float32": float(np.finfo(np.float32).max), "float16": 65504.0,
             "bfloat16": float.fromhex("0x1.fep127"), "float64": float(np.finfo(np.float64).max)}
# 2^24: float32 values of this magnitude and above are even integers.
_EVEN = float_literal(2.0 ** 24)


HELPERS = {
    # max and min of floats, NaN when either operand is NaN (onnxruntime's Max, Min, Relu, Clip).
    # GLSL's max and min are undefined for NaN operands (drivers return the other operand); the
    # select on isnan() is explicit, so no compiler turns it into a max instruction.
    "fmax": """{T} {name}({T} a, {T} b) {{
    return isnan(a) || isnan(b) ? a + b : max(a, b);
}}""",
    "fmin": """{T} {name}({T} a, {T} b) {{
    return isnan(a) || isnan(b) ? a + b : min(a, b);
}}""",
    # x ** y as C's pow (C99 F.9.4.4), which onnxruntime calls: pow(x, 0) and pow(1, y) are 1
    # even for NaN, pow(-1, +-inf) is 1; a negative base needs an integer exponent (the result's
    # sign is the base's for odd ones); zeros and infinities are exact. GLSL's pow() covers only
    # x > 0 (lavapipe's pow(NaN, 1) is 0), so it sees nothing else.
    "fpow": """{T} {name}({T} x, {T} y) {{
    if (y == 0.0 || x == 1.0) return 1.0;
    if (isnan(x) || isnan(y)) return x + y;
    const {T} ax = abs(x);
    if (isinf(y)) return ax == 1.0 ? 1.0 : (ax < 1.0) == (y < 0.0) ? abs(y) : 0.0;
    const bool integer = floor(y) == y;
    const bool negative = floatBitsToInt(x) < 0;   // -0 too
    const bool odd = integer && abs(y) < """ + _EVEN + """ && mod(y, 2.0) == 1.0;
    const {T} sign = negative && odd ? -1.0 : 1.0;
    if (ax == 0.0) return sign * (y < 0.0 ? uintBitsToFloat(0x7f800000u) : 0.0);
    if (isinf(ax)) return sign * (y < 0.0 ? 0.0 : ax);
    if (negative && !integer) return uintBitsToFloat(0x7fc00000u);
    return sign * pow(ax, y);
}}""",
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
    # Remainders by magnitudes, defined for every operand pair: truncated (C's %, the sign of
    # a), floored (Python's %, the sign of b); MIN % -1 is 0, and x % 0 is 0 (as numpy gives;
    # SPIR-V leaves it undefined).
    "irem": """{T} {name}({T} a, {T} b) {{
    if (b == {T}(0)) return {T}(0);
    const {UT} r = (a < {T}(0) ? {UT}(0) - {UT}(a) : {UT}(a)) % (b < {T}(0) ? {UT}(0) - {UT}(b) : {UT}(b));
    return a < {T}(0) ? {T}(0) - {T}(r) : {T}(r);
}}""",
    "imod": """{T} {name}({T} a, {T} b) {{
    if (b == {T}(0)) return {T}(0);
    const {UT} m = (a < {T}(0) ? {UT}(0) - {UT}(a) : {UT}(a)) % (b < {T}(0) ? {UT}(0) - {UT}(b) : {UT}(b));
    const {T} r = a < {T}(0) ? {T}(0) - {T}(m) : {T}(m);
    return r != {T}(0) && (r < {T}(0)) != (b < {T}(0)) ? r + b : r;
}}""",
    "urem": """{T} {name}({T} a, {T} b) {{
    return b == {T}(0) ? {T}(0) : a % b;
}}""",
    # C's fmod, exact as C's is: |x| less the multiples 2^k |y| it holds, largest first (each
    # difference is exact: the operands are within a factor of 2). NaN for x = +-inf or y = 0,
    # x for y = +-inf; a zero result has x's sign. GLSL's mod() floors x / y, inexactly.
    "fmod": """{T} {name}({T} x, {T} y) {{
    if (isnan(x) || isnan(y)) return x + y;
    if (isinf(x) || y == {T}(0)) return {T}(uintBitsToFloat(0x7fc00000u));
    const {T} ax = abs(x), ay = abs(y);
    if (isinf(y) || ax < ay) return x;
    {T} t = ay, r = ax;
    while (t * {T}(2) <= ax) t *= {T}(2);
    for (; t >= ay; t *= {T}(0.5)) {{
        if (r >= t) r -= t;
    }}
    return x < {T}(0) ? -r : r;
}}""",
    # The floored remainder of x / y from r = fmod(x, y): r moved to y's sign, a zero of y's sign
    # (Mod-28's special cases: y = +-inf gives x where x has y's sign, else y).
    "floor_mod": """{T} {name}({T} r, {T} y) {{
    if (r == {T}(0)) return y < {T}(0) ? -{T}(0) : {T}(0);
    return (r < {T}(0)) != (y < {T}(0)) ? r + y : r;
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
    # erf in float: the rational approximation x P(x^2) / Q(x^2) on [-4, 4] (beyond, erf is +-1
    # in float32) of Eigen and XLA. Its own error is 6.5e-8; in float32 arithmetic the result is
    # within 4.3e-7 of erf (relative error under 2.5e-7 for |x| < 1: no cancellation near 0).
    "erf": """{T} {name}({T} x) {{
    if (isnan(x)) return x;
    x = clamp(x, -4.0, 4.0);
    const {T} x2 = x * x;
    const {T} p = x * (""" + _horner(["-1.60960333262415e-02", "-2.95459980854025e-03",
                                      "-7.34990630326855e-04", "-5.69250639462346e-05",
                                      "-2.10102402082508e-06", "2.77068142495902e-08",
                                      "-2.72614225801306e-10"]) + """);
    const {T} q = """ + _horner(["-1.42647390514189e-02", "-7.37332916720468e-03",
                                 "-1.68282697438203e-03", "-2.13374055278905e-04",
                                 "-1.45660718464996e-05"]) + """;
    return p / q;
}}""",
    # Phi(x), the standard normal distribution function, as erfc(-x / sqrt(2)) / 2: its tail
    # below 0 straight from erfc (Numerical Recipes' erfcc, relative error under 1.2e-7), so GELU's
    # x Phi(x) keeps its digits where 1 + erf(x / sqrt(2)) would cancel (0.3% at x = -4); 1 - the
    # tail above 0.
    "phi": """{T} {name}({T} x) {{
    if (isnan(x)) return x;
    const {T} z = abs(x) * 0.707106781;
    const {T} t = 1.0 / (1.0 + 0.5 * z);
    const {T} tail = 0.5 * t * exp(-z * z - 1.26551223 + t * (""" + _horner(["1.00002368", "0.37409196", "0.09678418",
                                                                           "-0.18628806", "0.27886807", "-1.13520398",
                                                                           "1.48851587", "-0.82215223", "0.17087277"],
                                                                          "t") + """));
    return x < 0.0 ? tail : 1.0 - tail;
}}""",
    # exp and log in double, which GLSL has only in float: exp(x) = 2^k exp(r) with
    # r = x - k ln 2 in [-ln2/2, ln2/2] (ln 2 in two parts, so r is exact) and exp(r) by its
    # Taylor polynomial to degree 13 (truncation under 1e-17 relative); results past the double
    # range are inf / 0.
    "dexp": """{T} {name}({T} x) {{
    if (isnan(x)) return x;
    if (x > """ + _double(709.782712893384) + """) return """ + _double(math.inf) + """;
    if (x < """ + _double(-745.2) + """) return 0.0lf;
    const {T} k = floor(x * """ + _double(1 / math.log(2)) + """ + 0.5lf);
    const {T} r = (x - k * """ + _double(_LN2_HI) + """) - k * """ + _double(_LN2_LO) + """;
    return ldexp(""" + _horner([_double(1 / math.factorial(k)) for k in range(14)], "r") + """, int(k));
}}""",
    # log(x) = e ln 2 + log(m) with m in [sqrt(1/2), sqrt(2)) and log(m) = 2 atanh(s),
    # s = (m - 1) / (m + 1), |s| < 0.172: its odd series to s^25 (truncation under 1e-18).
    "dlog": """{T} {name}({T} x) {{
    if (isnan(x) || x < 0.0lf) return """ + _double(math.nan) + """;
    if (x == 0.0lf) return """ + _double(-math.inf) + """;
    if (isinf(x)) return x;
    // frexp() is undefined for subnormals: scale them into the normal range first
    const bool tiny = x < """ + _double(2.2250738585072014e-308) + """;
    int e;
    {T} m = frexp(tiny ? x * """ + _double(2.0 ** 54) + """ : x, e);
    e -= tiny ? 54 : 0;
    if (m < """ + _double(math.sqrt(0.5)) + """) {{
        m *= 2.0lf;
        e -= 1;
    }}
    const {T} s = (m - 1.0lf) / (m + 1.0lf), s2 = s * s;
    const {T} log_m = 2.0lf * s + 2.0lf * s * s2 * (""" + _horner(
        [_double(1 / (2 * k + 1)) for k in range(1, 13)], "s2") + """);
    return {T}(e) * """ + _double(_LN2_HI) + """ + (log_m + {T}(e) * """ + _double(_LN2_LO) + """);
}}""",
    # tanh as the elementwise op computes it (elementwise_ops.py), for texts that read the
    # argument of their tanh many times (gelu_tanh).
    "tanh": """{T} {name}({T} x) {{
    return """ + OPS["tanh"].float.replace("{0}", "x") + """;
}}""",
    # sin, cos, tan, their inverses and the hyperbolic functions in float (float_functions.py)
    **FLOAT_FUNCTIONS,
}
