"""The elementwise ops of the expression language (expr.py), each defined once: its tree name,
the ONNX ops it stands for, its GLSL text per compute type and how it types its result. The dtypes
an op takes follow from the texts it has: float32 and float16 (which computes in float32) take
`float`, float64 `double`, signed integers `int`, unsigned ones `uint`, bool `bool`. Adding an op
is adding one entry here.

An ONNX op whose attribute chooses between tree ops (Mod's fmod, BitShift's direction) names it
in each of their entries, with the attribute's value that chooses that one (`chosen_by`).

Most ops compute in their operands' type and return it ("same"). A predicate (comparisons, IsNaN,
IsInf) takes operands of one type and returns bool, its text chosen by the operands' type; Where
("select") takes a bool condition and two operands of its result's type; Cast converts its
operand to the dtype its tree names (expr.Renderer builds its text).

A text is a str.format template: {0} is the first operand, {1}, {2} the next operands or
attribute constants, {z} and {one} zero and one of the compute type, and a helper's name
({idiv}, {udiv}: expr.HELPERS) calls that helper on the compute type; {bits} is the width of the
op's dtype. SPECIAL marks an op whose
text the renderer builds itself (Clip's bounds are numbers, not children; Pow's text depends on
its exponent). Texts are spliced into one statement, so an op that reads an operand twice
repeats its text (the fusion pass bounds the growth).

NaN and infinities behave as in onnxruntime: GLSL's max, min and clamp (and sign, on some
drivers) drop a NaN operand, so the float texts propagate NaN explicitly ({fmax}, {fmin}:
expr.HELPERS); tests/compiler/test_special_values.py checks every op against onnxruntime.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

from . import magnitudes as M

SPECIAL = "<built by expr.Renderer>"
KINDS = ("float", "double", "int", "uint", "bool")
TYPINGS = ("same", "predicate", "select", "cast")


@dataclass(frozen=True)
class ElementwiseOp:
    name: str                    # the op in trees: (name, *operands, *attribute constants)
    float: str | None            # GLSL computing in float (float32; float16 rounds afterwards)
    double: str | None = None    # ... in double (float64); None: float64 does not take the op
    int: str | None = None       # ... in int / int64_t (signed integers of every width)
    uint: str | None = None      # ... in uint / uint64_t
    bool: str | None = None      # ... in bool
    # ONNX ops computing this op -> the attributes (name, ONNX default) their tree carries as
    # constants after their one input; ops without attributes take `inputs` tensors as operands.
    onnx: dict = field(default_factory=dict)
    inputs: int = 1
    # (attribute, value): the ONNX ops of `onnx` become this op where their attribute has `value`.
    chosen_by: tuple = ()
    variadic: tuple[str, ...] = ()   # ONNX ops folding this op over any number of inputs
    exact: bool = False              # the result is one of the operands: nothing to wrap or round
    typing: str = "same"             # how the result's type follows from the operands' (TYPINGS)
    # How large its result may grow from its operands' magnitudes (compiler/magnitudes.py).
    magnitude: Callable | None = None

    def text(self, kind: str) -> str | None:
        """The text for a compute kind (KINDS), None if it has none."""
        return getattr(self, kind)

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(k for k in KINDS if self.text(k) is not None)


def texts(text: str, *kinds: str, **overrides: str) -> dict:
    """`text` for float and for each of `kinds`, then per-kind `overrides`."""
    return {"float": text, **{k: text for k in kinds}, **overrides}


ALL = ("double", "int", "uint")
# exp(x) - 1 without cancelling near 0 (a Taylor polynomial below |x| = 0.125, error < 3e-7).
_EXPM1 = ("(abs({0}) < 0.125 ? {0} * (1.0 + {0} * (0.5 + {0} * (0.16666667 + {0} * 0.041666668)))"
          " : exp({0}) - 1.0)")

# erf(x) and gelu(x) = x * Phi(x) call the helper functions expr.HELPERS["erf"], ["phi"] and
# ["tanh"] (their operand is read many times).
_GELU = "({0} * {phi}({0}))"
# The tanh form: 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))).
_GELU_TANH = "(0.5 * {0} * (1.0 + {tanh}(0.797884561 * ({0} + 0.044715 * {0} * {0} * {0}))))"


def _predicate(name: str, onnx_op: str, text: str, *kinds: str) -> ElementwiseOp:
    """A comparison of two operands. GLSL's are ordered: every comparison with NaN is false, as
    in numpy."""
    return ElementwiseOp(name, **texts(text, *kinds), onnx={onnx_op: ()}, inputs=2,
                         typing="predicate")


_OPS = [
    # Arithmetic: + - * wrap around on integers; integer division truncates toward zero.
    ElementwiseOp("add", **texts("({0} + {1})", *ALL), onnx={"Add": ()}, inputs=2,
                  variadic=("Sum", "Mean"), magnitude=M.sum_of),
    ElementwiseOp("sub", **texts("({0} - {1})", *ALL), onnx={"Sub": ()}, inputs=2, magnitude=M.difference),
    ElementwiseOp("mul", **texts("({0} * {1})", *ALL), onnx={"Mul": ()}, inputs=2, magnitude=M.product_of),
    ElementwiseOp("div", **texts("({0} / {1})", "double", int="{idiv}({0}, {1})",
                                 uint="{udiv}({0}, {1})"), onnx={"Div": ()}, inputs=2, magnitude=M.quotient),
    ElementwiseOp("pow", **texts(SPECIAL, *ALL), onnx={"Pow": ()}, inputs=2, magnitude=M.power),
    # Floats: NaN if either operand is NaN, as onnxruntime (GLSL's max and min leave NaN
    # undefined, and drivers return the other operand).
    ElementwiseOp("max", **texts("{fmax}({0}, {1})", "double", int="max({0}, {1})",
                                 uint="max({0}, {1})"), variadic=("Max",), exact=True),
    ElementwiseOp("min", **texts("{fmin}({0}, {1})", "double", int="min({0}, {1})",
                                 uint="min({0}, {1})"), variadic=("Min",), exact=True),
    ElementwiseOp("clip", **texts(SPECIAL, *ALL), exact=True,  # Clip: passes/elementwise.py
                  magnitude=M.clipped),
    ElementwiseOp("neg", **texts("(-{0})", "double", "int", uint="({z} - {0})"), onnx={"Neg": ()}, magnitude=M.negated),
    ElementwiseOp("abs", **texts("abs({0})", "double", "int", uint="{0}"), onnx={"Abs": ()}, magnitude=M.absolute),
    ElementwiseOp("sign", **texts("(isnan({0}) ? {0} : sign({0}))", "double", int="sign({0})",
                                  uint="min({0}, {one})"), onnx={"Sign": ()}, exact=True),
    ElementwiseOp("relu", **texts("{fmax}({0}, {z})", "double", int="max({0}, {z})", uint="{0}"),
                  onnx={"Relu": ()}, exact=True, magnitude=M.rectified),
    ElementwiseOp("prelu", **texts("({0} < {z} ? {1} * {0} : {0})", "double", "int", uint="{0}"),
                  onnx={"PRelu": (), "LeakyRelu": (("alpha", 0.01),)}, inputs=2),
    # Floating point only.
    ElementwiseOp("sqrt", **texts("sqrt({0})", "double"), onnx={"Sqrt": ()}, magnitude=M.square_root),
    ElementwiseOp("reciprocal", **texts("({one} / {0})", "double"), onnx={"Reciprocal": ()},
                  magnitude=M.reciprocal),
    ElementwiseOp("floor", **texts("floor({0})", "double"), onnx={"Floor": ()}),
    ElementwiseOp("ceil", **texts("ceil({0})", "double"), onnx={"Ceil": ()}),
    ElementwiseOp("round", **texts("roundEven({0})", "double"), onnx={"Round": ()}),
    ElementwiseOp("softsign", **texts("({0} / ({one} + abs({0})))", "double"),
                  onnx={"Softsign": ()}, magnitude=M.bounded(1.0)),
    ElementwiseOp("thresholded_relu", **texts("({0} > {1} ? {0} : {z})", "double"),
                  onnx={"ThresholdedRelu": (("alpha", 1.0),)}),
    ElementwiseOp("sigmoid", "(1.0 / (1.0 + exp(-{0})))", onnx={"Sigmoid": ()},
                  magnitude=M.bounded(1.0, at_zero=0.5, weighs=True)),
    # float64 exp and log call helpers (expr.HELPERS: GLSL has them in float only)
    ElementwiseOp("exp", "exp({0})", double="{dexp}({0})", onnx={"Exp": ()}, magnitude=M.exponential),
    ElementwiseOp("log", "log({0})", double="{dlog}({0})", onnx={"Log": ()}),
    # tanh(x) = sign(x) (1 - 2 / (exp(2|x|) + 1)); below |x| = 0.125 that form cancels, so an odd
    # Taylor polynomial (error under 1e-9 there) takes over. GLSL's tanh is only specified
    # through the cancelling exp() quotient.
    ElementwiseOp("tanh", "(abs({0}) < 0.125 ? {0} * (1.0 + {0} * {0} * (-0.33333334 + {0} * {0} * "
                          "(0.13333334 - 0.053968254 * {0} * {0}))) : "
                          "sign({0}) * (1.0 - 2.0 / (exp(2.0 * abs({0})) + 1.0)))",
                  onnx={"Tanh": ()}, magnitude=M.bounded(1.0)),
    ElementwiseOp("hardswish", "({0} * clamp({0} * 0.16666667 + 0.5, 0.0, 1.0))",
                  onnx={"HardSwish": ()}, magnitude=M.nearly_rectified),
    # log(1 + exp(x)) without overflow for large x
    ElementwiseOp("softplus", "(max({0}, 0.0) + log(1.0 + exp(-abs({0}))))",
                  onnx={"Softplus": ()}),
    ElementwiseOp("hardsigmoid", "{fmin}({fmax}({1} * {0} + {2}, 0.0), 1.0)",
                  onnx={"HardSigmoid": (("alpha", 0.2), ("beta", 0.5))},
                  magnitude=M.bounded(1.0, at_zero=0.5, weighs=True)),
    ElementwiseOp("elu", "({0} < 0.0 ? {1} * " + _EXPM1 + " : {0})",
                  onnx={"Elu": (("alpha", 1.0),)}),
    ElementwiseOp("selu", "({0} <= 0.0 ? {2} * {1} * " + _EXPM1 + " : {2} * {0})",
                  onnx={"Selu": (("alpha", 1.67326319217681884765625),
                                 ("gamma", 1.05070102214813232421875))}),
    ElementwiseOp("erf", "{erf}({0})", onnx={"Erf": ()}, magnitude=M.bounded(1.0)),
    # Trigonometric and hyperbolic functions: helpers accurate to a few float32 ulps over the
    # whole range (float_functions.py; GLSL's promise far less); float64 does not take them.
    *(ElementwiseOp(name, f"{{{name}}}({{0}})", onnx={name.capitalize(): ()}, magnitude=rule)
      for name, rule in [("sin", M.sine), ("cos", M.cosine), ("tan", M.tangent),
                         ("asin", M.bounded(math.pi / 2)),
                         ("acos", M.bounded(math.pi, at_zero=math.pi / 2)),
                         ("atan", M.bounded(math.pi / 2)), ("sinh", M.hyperbolic_sine),
                         ("cosh", M.hyperbolic_cosine), ("asinh", M.inverse_hyperbolic_sine),
                         ("acosh", M.inverse_hyperbolic_cosine),
                         ("atanh", M.bounded(M.ATANH_TOP))]),
    # ONNX Gelu's `approximate` attribute, com.microsoft's Gelu, FastGelu and BiasGelu choose
    # between these two (passes/elementwise.py).
    ElementwiseOp("gelu", _GELU),
    ElementwiseOp("gelu_tanh", _GELU_TANH),
    # Remainders: Mod's fmod attribute chooses. fmod=1 is C's fmod, the sign of the dividend
    # (exact, as C's is); fmod=0 Python's %, the sign of the divisor (on floats since Mod-28, and
    # with its special cases: expr.HELPERS). A remainder by an integer 0 is 0, as numpy gives.
    ElementwiseOp("fmod", **texts("{fmod}({0}, {1})", "double", int="{irem}({0}, {1})",
                                  uint="{urem}({0}, {1})"), onnx={"Mod": ()}, inputs=2, chosen_by=("fmod", 1)),
    ElementwiseOp("mod", **texts("{floor_mod}({fmod}({0}, {1}), {1})", "double",
                                 int="{imod}({0}, {1})", uint="{urem}({0}, {1})"),
                  onnx={"Mod": ()}, inputs=2, chosen_by=("fmod", 0)),
    # Bits of integers (two's complement). A shift by the width or more, or (signed, BitShift-28)
    # by a negative count, leaves what the sign alone gives: 0, or -1 shifting a negative right.
    *(ElementwiseOp(name, None, int=f"({{0}} {sym} {{1}})", uint=f"({{0}} {sym} {{1}})",
                    onnx={onnx_op: ()}, inputs=2)
      for name, onnx_op, sym in [("bitwise_and", "BitwiseAnd", "&"), ("bitwise_or", "BitwiseOr", "|"),
                                 ("bitwise_xor", "BitwiseXor", "^")]),
    ElementwiseOp("bitwise_not", None, int="(~{0})", uint="(~{0})", onnx={"BitwiseNot": ()}),
    ElementwiseOp("shift_left", None, int="({1} >= {z} && {1} < {bits} ? {0} << {1} : {z})",
                  uint="({1} < {bits} ? {0} << {1} : {z})", onnx={"BitShift": ()}, inputs=2,
                  chosen_by=("direction", "LEFT")),
    ElementwiseOp("shift_right", None,
                  int="({1} >= {z} && {1} < {bits} ? {0} >> {1} : {0} < {z} ? -{one} : {z})",
                  uint="({1} < {bits} ? {0} >> {1} : {z})", onnx={"BitShift": ()}, inputs=2,
                  chosen_by=("direction", "RIGHT")),
    # Comparisons and tests of one type's operands, returning bool.
    _predicate("equal", "Equal", "({0} == {1})", *ALL, "bool"),
    _predicate("less", "Less", "({0} < {1})", *ALL),
    _predicate("greater", "Greater", "({0} > {1})", *ALL),
    _predicate("less_equal", "LessOrEqual", "({0} <= {1})", *ALL),
    _predicate("greater_equal", "GreaterOrEqual", "({0} >= {1})", *ALL),
    ElementwiseOp("isnan", **texts("isnan({0})", "double"), onnx={"IsNaN": ()}, typing="predicate"),
    # IsInf's detect_negative / detect_positive choose this or an equality with -inf / +inf.
    ElementwiseOp("isinf", **texts("isinf({0})", "double"), typing="predicate"),
    # Logic on bool.
    ElementwiseOp("not", None, bool="(!{0})", onnx={"Not": ()}),
    ElementwiseOp("and", None, bool="({0} && {1})", onnx={"And": ()}, inputs=2),
    ElementwiseOp("or", None, bool="({0} || {1})", onnx={"Or": ()}, inputs=2),
    ElementwiseOp("xor", None, bool="({0} ^^ {1})", onnx={"Xor": ()}, inputs=2),
    # Where(condition, x, y): x's and y's type, any dtype.
    ElementwiseOp("where", **texts("({0} ? {1} : {2})", *ALL, "bool"), onnx={"Where": ()},
                  inputs=3, exact=True, typing="select"),
    # ("cast", x, dtype name): Cast (passes/elementwise.py), ONNX's conversions (expr.Renderer).
    ElementwiseOp("cast", **texts(SPECIAL, *ALL, "bool"), exact=True, typing="cast"),
]
OPS = {op.name: op for op in _OPS}
assert len(OPS) == len(_OPS), "an elementwise op is defined twice"
assert all(op.typing in TYPINGS for op in _OPS)

# ONNX op -> tree op: ops of one input (their attributes become constant children), of two
# inputs, and of any number folded left to right (Mean then divides by the count); ONNX ops whose
# attribute chooses -> (that attribute, {its value: tree op}).
ONNX_CHOSEN = {onnx: (op.chosen_by[0], {o.chosen_by[1]: o.name for o in _OPS if onnx in o.onnx})
               for op in _OPS if op.chosen_by for onnx in op.onnx}
ONNX_UNARY = {onnx: op.name for op in _OPS for onnx, attrs in op.onnx.items()
              if (attrs or op.inputs == 1) and onnx not in ONNX_CHOSEN}
ONNX_BINARY = {onnx: op.name for op in _OPS for onnx in op.onnx
               if onnx not in ONNX_UNARY and onnx not in ONNX_CHOSEN}
ONNX_VARIADIC = {onnx: op.name for op in _OPS for onnx in op.variadic}
ONNX_ATTRS = {onnx: attrs for op in _OPS for onnx, attrs in op.onnx.items() if attrs}

# Tree ops each dtype family takes (support_table.py lists them per ONNX op).
FLOAT64_OPS = {op.name for op in _OPS if op.double is not None}
INTEGER_OPS = {op.name for op in _OPS if op.int is not None and op.uint is not None}
