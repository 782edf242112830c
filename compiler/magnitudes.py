"""How large an op's result may grow, and how small it typically is, from its inputs: what the
float16 range pass (passes/float16_range.py) asks of an op, declared with the op (`magnitude=` in
its `register` or `declare`). Each rule takes the node and a Magnitude per input (None: not a
float tensor, or absent) and returns its result's Magnitude, or None where it cannot say (the
pass then takes an activation's bound and its computed inputs' typical size).

A rule also says what the pass needs to find divisions by sums that cancel (Div(x, mean(x)) of
signed x: the mean may be far smaller than the terms float16 rounded, so their rounding is most of
it). Signs are +1 (never negative), -1 (never positive) or 0 (either); each is an attribute of the
rule (set with `_facts`), absent on an op that declares no rule (data movement: sign 0):
- sign(node, signs) -> its result's sign, from its inputs' (None: not a float tensor);
- terms(node, signs) -> the signs of the terms it sums (Add, a mean, a product's dot products),
  None for no sum: terms of both signs, or of either, may cancel;
- conditioned: near 0 its result does not move relatively with its input (exp, a sigmoid), so a
  value that cancelled before it is ordinary after it;
- carries: it sums a few terms element by element (Add, Sub), so a term that cancelled before it
  keeps its relative error in the sum even where the terms share a sign (|x| + eps is as
  uncertain as x); a reduction's many terms are dominated by those that did not cancel;
- divides(node) -> the inputs it divides by;
- multiplies(node) -> the inputs whose values it multiplies together (a product's relative error
  is the sum of its factors').
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

# An assumption, not a fact: trained models keep activations (the model's inputs, the results of
# its products) within a few hundred; a square of one, or a product of two, is past 65504.
ACTIVATION = 256.0
# Past 2^13 float16's spacing is 8: an activation-sized term added to such a value keeps under two
# significant digits; past 65504 float16 overflows.
LIMIT = 8192.0
# The largest |value| of a tensor, in units of its root mean square: a normal sample of a million
# values stays within 5 of them; 16 leaves room for heavier tails.
CREST = 16.0


@dataclass(frozen=True)
class Magnitude:
    top: float   # the largest |value| it may hold: a bound, or ACTIVATION's assumption
    rms: float   # its typical |value|: the root mean square, estimated from the weights
    # the part of rms that is one sign: 0 for values symmetric about 0 (a product's result with
    # weights of both signs), rms for nonnegative ones (a Relu's)
    mean: float = 0.0

    @property
    def spread(self) -> float:
        """The root mean square of its part symmetric about 0."""
        if not self.rms or math.isinf(self.rms):
            return self.rms
        return self.rms * math.sqrt(max(1.0 - (self.mean / self.rms) ** 2, 0.0))


def _facts(rule, sign=None, terms=None, divides=None, conditioned=False, multiplies=None, carries=False):
    rule.sign, rule.terms, rule.divides, rule.conditioned = sign, terms, divides, conditioned
    rule.multiplies, rule.carries = multiplies, carries
    return rule


def one_sign(signs) -> int:
    """The sign of a sum of terms of these signs: theirs where they share one, else 0."""
    signs = [s for s in signs if s is not None]
    return signs[0] if signs and signs[0] and all(s == signs[0] for s in signs) else 0


def _first(node, signs) -> int:
    return (signs[0] or 0) if signs else 0


def _positive(node, signs) -> int:
    return 1


def _known(ins) -> list[Magnitude]:
    return [m for m in ins if m is not None]


def _grown(value) -> float:
    """value(), or inf where it overflows."""
    try:
        x = float(value())
    except OverflowError:
        return math.inf
    return x if math.isfinite(x) else math.inf


def _rms(data) -> float:
    a = np.asarray(data, np.float64)
    a = a[np.isfinite(a)]
    return float(np.sqrt(np.mean(a * a))) if a.size else 0.0


def conv_taps(node) -> float:
    """A convolution's weight [C_out, C_in/group, *kernel]: each output sums C_in/group * kernel
    products, less those that land on the zero padding (most of a 5x5 kernel on a 2x2 map)."""
    x, w, y = node.inputs[0], node.inputs[1], node.outputs[0]
    kernel = w.shape[2:]
    nd = len(kernel)
    strides = node.attrs.get("strides") or [1] * nd
    dilations = node.attrs.get("dilations") or [1] * nd
    pads = node.attrs.get("pads") or [0] * (2 * nd)
    auto = node.text("auto_pad", "NOTSET")
    inside = 1.0
    for i, k in enumerate(kernel):
        n, out, s, d = x.shape[2 + i], y.shape[2 + i], strides[i], dilations[i]
        begin = pads[i]
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            total = max(0, (out - 1) * s + (k - 1) * d + 1 - n)
            begin = total // 2 if auto == "SAME_UPPER" else total - total // 2
        elif auto == "VALID":
            begin = 0
        hits = sum(0 <= o * s - begin + j * d < n for o in range(out) for j in range(k))
        inside *= hits / max(out * k, 1)
    return w.shape[1] * math.prod(kernel) * inside


def transposed_conv_taps(node) -> int:
    """A transposed convolution's weight [C_in, C_out/group, *kernel]: each output sums
    C_in/group channels over the kernel taps its stride lands on."""
    w = node.inputs[1]
    taps = math.prod(w.shape[2:]) / math.prod(node.attrs.get("strides") or [1])
    return max(int(w.shape[0] // node.attrs.get("group", 1) * max(taps, 1.0)), 1)


def shared_axis(node) -> int:
    """A matrix product's contracted axis: A's last (its first where Gemm's transA)."""
    a = node.inputs[0]
    return a.shape[-2] if node.attrs.get("transA", 0) and len(a.shape) > 1 else a.shape[-1]


def weighted_sum(taps):
    """A product (MatMul, Gemm, Conv): each result sums `taps(node)` products of its two operands,
    so its typical size is theirs times sqrt(taps) (independent terms; a weight's typical size is
    its root mean square), plus the bias's. Its bound is an activation's (training keeps it one),
    or CREST times that typical size where the weights grow it past that (library-default init
    of a deep model), or a value past LIMIT that it reads (a float32 mask, a large constant)."""
    def rule(node, ins) -> Magnitude:
        known = _known(ins)
        a, b = (ins + [None, None])[:2]
        rms = a.rms * b.rms * math.sqrt(taps(node)) if a is not None and b is not None else ACTIVATION
        bias = ins[2] if len(ins) > 2 else None
        if bias is not None:
            rms = math.hypot(rms, bias.rms)
        top = max(ACTIVATION, CREST * rms)
        if any(m.top > LIMIT for m in known):
            top = max(top, *(m.top for m in known))
        return Magnitude(_grown(lambda: top), rms)

    def terms(node, signs):   # products of its two operands, and its bias
        a, b, bias = (list(signs) + [None] * 3)[:3]
        return [(a or 0) * (b or 0)] + ([bias] if bias is not None else [])
    return _facts(rule, sign=lambda node, signs: one_sign(terms(node, signs)), terms=terms)


def _rectify(x: Magnitude, top: float) -> Magnitude:
    """max(x, 0): the half of x's symmetric part below 0 becomes 0; its nonnegative part stays."""
    rms = math.hypot(x.mean, x.spread / math.sqrt(2.0))
    return Magnitude(top, rms, rms)


def rectified(node, ins) -> Magnitude | None:
    """Relu: the negative half of its input's symmetric part becomes 0."""
    x = ins[0] if ins else None
    return _rectify(x, x.top) if x is not None else None


_facts(rectified, sign=_positive)


def nearly_rectified(node, ins) -> Magnitude | None:
    """HardSwish: as Relu's, but its negative half goes near 0 (down to -0.375), not to 0."""
    return rectified(node, ins)


def weighted_average(index: int, logits=None):
    """Attention: each result is a softmax-weighted average of the rows of input `index` (V);
    logits(node, ins): the typical size of the scores it weighs by (its `weighs`, as bounded's)."""
    def rule(node, ins) -> Magnitude | None:
        return ins[index] if index < len(ins) else None
    rule.weighs = logits

    def terms(node, signs):   # its weights are never negative
        return [signs[index] or 0 if index < len(signs) else 0]
    return _facts(rule, sign=lambda node, signs: terms(node, signs)[0], terms=terms)


def attention_logits(node, ins) -> float | None:
    """vkc.Attention's scores Q K^T * scale: sums of `d` products of Q's and K's elements."""
    q, k = (ins + [None, None])[:2]
    if q is None or k is None:
        return None
    return q.rms * k.rms * math.sqrt(node.attrs["dims"][-2]) * abs(node.attrs.get("scale") or 1.0)


def sum_of(node, ins) -> Magnitude:
    """Add, Sub, Sum: the terms' bounds add; typically their one-signed parts add and their
    symmetric parts add as independent terms do."""
    known = _known(ins)
    mean = sum(m.mean for m in known)
    return Magnitude(sum(m.top for m in known), math.hypot(mean, *(m.spread for m in known)), mean)


_facts(sum_of, sign=lambda node, signs: one_sign(signs), terms=lambda node, signs: [s or 0 for s in signs if s is not None],
       carries=True)


def difference(node, ins) -> Magnitude:
    """Sub: as sum_of, its second term's sign turned."""
    return sum_of(node, ins)


def _difference_terms(node, signs):
    a, b = (signs + [None, None])[:2]
    return [a or 0] + ([-(b or 0)] if b is not None else [])


_facts(difference, sign=lambda node, signs: one_sign(_difference_terms(node, signs)), terms=_difference_terms,
       carries=True)


def product_of(node, ins) -> Magnitude:
    """Mul: the factors' magnitudes multiply (a square of an activation: its magnitude squared)."""
    known = _known(ins)
    rms = math.prod(m.rms for m in known)
    return Magnitude(_grown(lambda: math.prod(m.top for m in known)), rms,
                     rms * math.prod(m.mean / m.rms if m.rms else 0.0 for m in known))


def _product_sign(node, signs) -> int:
    a, b = (node.inputs + [None, None])[:2]
    if a is not None and a is b:   # a square
        return 1
    return math.prod(s or 0 for s in signs if s is not None) if signs else 0


_facts(product_of, sign=_product_sign)


def quotient(node, ins) -> Magnitude | None:
    """Div: by a constant, the numerator over the constant's smallest |value| (typically, over
    its typical size); by a tensor computed at run time (a normalization's deviation, a softmax's
    sum), an activation's bound (or its inputs'), typically the numerator's size over the
    denominator's (x / rms(x): 1)."""
    d = node.inputs[1] if len(node.inputs) > 1 else None
    if ins[0] is None:
        return None
    if d is None or not d.is_constant:   # a normalization: typically the numerator over the norm
        by = ins[1] if len(ins) > 1 else None
        return Magnitude(max(ACTIVATION, *(m.top for m in _known(ins))),
                         ins[0].rms / by.rms if by is not None and by.rms > 0 else 1.0)
    data = np.abs(np.asarray(d.data, np.float64))
    smallest = float(np.min(data)) if d.size else 1.0
    if smallest == 0:
        return Magnitude(math.inf, math.inf)
    k = _rms(1.0 / data)
    return Magnitude(ins[0].top / smallest, ins[0].rms * k, ins[0].mean * k)


_facts(quotient, sign=_product_sign, divides=lambda node: [1])


def reciprocal(node, ins) -> None:
    """Reciprocal: 1 / x, of x's sign (its magnitude: the pass's default)."""
    return None


_facts(reciprocal, sign=_first, divides=lambda node: [0])


def negated(node, ins) -> None:
    """Neg: its input's magnitude, the other sign."""
    return None


_facts(negated, sign=lambda node, signs: -_first(node, signs))


def absolute(node, ins) -> None:
    """Abs: its input's magnitude, never negative."""
    return None


_facts(absolute, sign=_positive)


def averaged(node, ins) -> None:
    """AveragePool, GlobalAveragePool: means of windows of the input, within its range."""
    return None


_facts(averaged, sign=_first, terms=lambda node, signs: [_first(node, signs)])


def power(node, ins) -> Magnitude:
    """Pow: a constant exponent p takes |x| to |x|^p (p > 1 grows it: squares, cubes); an exponent
    computed at run time may take it anywhere."""
    p = node.inputs[1] if len(node.inputs) > 1 else None
    if p is None or not p.is_constant or ins[0] is None:
        return Magnitude(math.inf, ins[0].rms if ins[0] is not None else ACTIVATION)
    top = float(np.max(p.data)) if p.size else 1.0
    base = ins[0]
    bound = _grown(lambda: base.top ** top) if base.top >= 1 and top > 0 else max(base.top, 1.0)
    return Magnitude(bound, _grown(lambda: base.rms ** top) if top > 0 else max(base.rms, 1.0))


def _constant_exponent(node):
    p = node.inputs[1] if len(node.inputs) > 1 else None
    return np.asarray(p.data, np.float64) if p is not None and p.is_constant else None


def _power_sign(node, signs) -> int:
    p = _constant_exponent(node)
    if p is not None and p.size and np.all(np.mod(p, 2) == 0):   # even powers
        return 1
    return 1 if _first(node, signs) == 1 else 0


def _power_divides(node):
    """x^p divides by x^|p| where p may be negative."""
    p = _constant_exponent(node)
    return [0] if p is None or not p.size or np.any(p < 0) else []


_facts(power, sign=_power_sign, divides=_power_divides)


def exponential(node, ins) -> Magnitude:
    """Exp: e^x, past float16's range from x = 11.1 on; about 1 where x is small."""
    if ins[0] is None:
        return Magnitude(math.inf, 1.0, 1.0)
    rms = _grown(lambda: math.exp(ins[0].rms))
    return Magnitude(_grown(lambda: math.exp(ins[0].top)), rms, rms)


_facts(exponential, sign=_positive, conditioned=True)


def square_root(node, ins) -> Magnitude | None:
    if ins[0] is None:
        return None
    return Magnitude(math.sqrt(ins[0].top), math.sqrt(ins[0].rms), math.sqrt(ins[0].rms))


_facts(square_root, sign=_positive)


def _clip_bounds(node) -> list:
    """[low, high] of a Clip, each None where unknown (absent, or computed at run time)."""
    bounds = [node.attrs.get("min"), node.attrs.get("max")]
    for i in (1, 2):
        v = node.inputs[i] if i < len(node.inputs) else None
        if v is not None and v.is_constant and v.size == 1:
            bounds[i - 1] = float(np.asarray(v.data).reshape(()))
    return bounds


def clipped(node, ins) -> Magnitude | None:
    """Clip: within its bounds where both are known (attributes, or constant inputs)."""
    bounds = _clip_bounds(node)
    x = ins[0]
    if any(b is None for b in bounds):
        return x
    edge = max(abs(b) for b in bounds)
    if x is None:
        return Magnitude(edge, edge)
    y = _rectify(x, x.top) if bounds[0] == 0 else x   # a floor at 0: Relu6
    return Magnitude(min(edge, y.top), min(edge, y.rms), min(edge, y.mean))


def _clipped_sign(node, signs) -> int:
    low, high = _clip_bounds(node)
    if low is not None and low >= 0:
        return 1
    if high is not None and high <= 0:
        return -1
    return _first(node, signs)


def _clip_window(node, ins) -> tuple[float, float] | None:
    """(its input's typical size, the width between its bounds) where both bounds are known: what
    a Clip passes of an input much larger than that width is what is left where its terms cancel
    (float16_range.WINDOW)."""
    low, high = _clip_bounds(node)
    if low is None or high is None or not ins or ins[0] is None or not 0 < high - low < math.inf:
        return None
    return ins[0].rms, high - low


_facts(clipped, sign=_clipped_sign)
clipped.window = _clip_window


def bounded(limit: float, at_zero: float = 0.0, weighs: bool = False, nonnegative: bool = False):
    """An op whose result stays within +-limit whatever its inputs (Softmax, Sigmoid, Tanh, Erf).
    Typically: an odd one (tanh(x) ~ x near 0, of x's sign) no larger than its input; one that
    is at_zero at 0 (a sigmoid's 0.5, which a symmetric input leaves its typical value) that
    value. One that is at_zero, or `nonnegative` (a softmax), is never negative.
    weighs: its result weighs another tensor (a softmax's attention, a squeeze-excite gate) and
    moves with its input's absolute error: the pass refuses float16 where that input is past
    what float16 carries to a few parts in a thousand (float16_range.GATE). The rule's `weighs`
    then gives that input's typical size."""
    def rule(node, ins) -> Magnitude:
        x = ins[0] if ins else None
        if at_zero:
            return Magnitude(limit, at_zero, at_zero)
        if x is None:
            return Magnitude(limit, limit)
        return Magnitude(limit, min(limit, x.rms), min(limit, x.mean))
    rule.weighs = _first_input if weighs else None
    if at_zero or nonnegative:
        return _facts(rule, sign=_positive, conditioned=True)
    return _facts(rule, sign=_first)


def _first_input(node, ins) -> float | None:
    return ins[0].rms if ins and ins[0] is not None else None


def reduction(kind: str):
    """A reduction of `kind` (reduce_ops.REDUCE_OPS) over N elements: a sum grows N times (its
    one-signed part N times, its symmetric part sqrt(N) times), a sum of squares N times the square;
    means, maxima and minima stay within their input's range."""
    def rule(node, ins) -> Magnitude | None:
        x, y = node.inputs[0], node.outputs[0]
        if ins[0] is None:
            return None
        n = max(x.size // max(y.size, 1), 1)

        def grown(m, independent):
            grows = {"sum": lambda: m * (math.sqrt(n) if independent else n),
                     "l1": lambda: m * (math.sqrt(n) if independent else n),
                     "sumsquare": lambda: m * m * n, "l2": lambda: m * math.sqrt(n),
                     "prod": lambda: m ** n if m > 1 else m, "logsumexp": lambda: m + math.log(n),
                     "logsum": lambda: math.log(m * n) if m * n > 1 else m}
            return _grown(grows.get(kind, lambda: m))
        x = ins[0]
        if kind in ("sum", "l1"):
            mean = grown(x.mean, False) if kind == "sum" else grown(x.rms, False)
            return Magnitude(grown(x.top, False), math.hypot(mean, grown(x.spread, True)), mean)
        rms = grown(x.rms, True)
        return Magnitude(grown(x.top, False), rms, rms if kind != "prod" else 0.0)

    def terms(node, signs):   # a sum or mean of its input's elements; of |x| or x^2 (never negative)
        if node.inputs[0].size <= node.outputs[0].size:
            return None   # one term each
        return {"sum": [_first(node, signs)], "mean": [_first(node, signs)], "logsum": [_first(node, signs)],
                "l1": [1], "l2": [1], "sumsquare": [1]}.get(kind)

    def sign(node, signs):
        if kind in ("l1", "l2", "sumsquare"):
            return 1
        return _first(node, signs) if kind in ("sum", "mean", "max", "min") else 0
    def multiplies(node):
        return [0] if kind == "prod" and node.inputs[0].size > node.outputs[0].size else []
    return _facts(rule, sign=sign, terms=terms, conditioned=kind == "logsumexp", multiplies=multiplies)


def rotated_sum(count):
    """A sum of `count(node)` = (terms, scale) inputs times unit complex weights (a DFT's roots
    of unity), scaled: its bound grows terms * scale times, its typical size sqrt(terms) * scale
    times (Parseval's theorem); None where count is. The weights have both signs, so the sum
    may cancel."""
    def rule(node, ins) -> Magnitude | None:
        counted = count(node)
        if not ins or ins[0] is None or counted is None:
            return None
        terms, scale = counted
        return Magnitude(_grown(lambda: ins[0].top * terms * scale), ins[0].rms * math.sqrt(terms) * scale)
    return _facts(rule, terms=lambda node, signs: [0])


def normalization(scale: int, bias: int | None = None, skip: int | None = None, axis: int = -1,
                  centered=True):
    """A layer normalization: a row of N normalized values lies within +-sqrt(N), times the
    scale's largest |value|, plus the bias's; typically the scale's and bias's size (the row has
    unit root mean square, where its input's deviation is well above sqrt(epsilon); below, it
    is that deviation over sqrt(epsilon)). The residual sum x + skip it may also write (the output its
    `outputs` attribute names SUM, or the fourth) adds its terms. One Magnitude per output.
    axis: the first normalized dim where the node has no `axis` attribute. centered: whether it
    subtracts the row's mean (False: RMS normalization; a callable of the node where that
    depends on it). An RMS normalization of rows of one element divides x (+ skip) by its own
    magnitude: x / sqrt(x^2 + eps)."""
    first = axis

    def row_length(node) -> int:
        x = node.inputs[0]
        return math.prod(x.shape[node.attrs.get("axis", first) % max(len(x.shape), 1):])

    def rule(node, ins) -> list[Magnitude]:
        n = row_length(node)

        def at(i):
            return ins[i] if i is not None and i < len(ins) and ins[i] is not None else None

        def field(m, name, default=0.0):
            return getattr(m, name) if m is not None else default
        total = sum_of(node, [at(0), at(skip)]) if skip is not None and at(skip) is not None else at(0)
        # A row of typical deviation d comes out at d / sqrt(d^2 + epsilon): about 1, but far
        # smaller where d is below sqrt(epsilon) (a library-default init whose patch embedding
        # gives 1e-9: its LayerNorm gives 1e-6, not 1).
        d = (total.spread if (centered(node) if callable(centered) else centered) else total.rms) \
            if total is not None else math.inf
        eps = float(node.attrs.get("epsilon", 1e-5))
        unit = 1.0 if math.isinf(d) or math.isnan(d) or d * d > 1e6 * eps else d / math.sqrt(d * d + eps)
        y = Magnitude(math.sqrt(n) * (field(at(scale), "top") or 1.0) + field(at(bias), "top"),
                      math.hypot(field(at(scale), "rms", 1.0) * unit, field(at(bias), "rms")))
        roles = node.attrs.get("outputs") or ["Y", "MEAN", "INV_STD", "SUM"]
        if skip is None or at(skip) is None:
            return [y for _ in node.outputs]
        return [total if role == "SUM" else y for role, _ in zip(roles, node.outputs)]
    def divides(node):
        if (centered(node) if callable(centered) else centered) or row_length(node) != 1:
            return []   # a mean's deviations, or a sum of squares of several: see float16_range
        return [0] if skip is None or node.input(skip) is None else [0, skip]
    # x minus the row's mean (and a residual sum): terms of both signs
    return _facts(rule, terms=lambda node, signs: [0], divides=divides)


# Past 16, float16's spacing (2^-6) moves a phase by up to 0.008 rad, and past 2048 by more than
# a turn: Sin, Cos and Tan declare `precise_input`, so float16_range keeps their input, and what
# it is computed from, float32 where it may pass this.
PHASE = 16.0


def sine(node, ins) -> Magnitude:
    """Sin: within +-1, of either sign; typically its input's size up to 1."""
    x = ins[0] if ins else None
    return Magnitude(1.0, min(1.0, x.rms) if x is not None else 1.0)


def cosine(node, ins) -> Magnitude:
    """Cos: within +-1, of either sign; typically near 1 (1 at 0)."""
    return Magnitude(1.0, 1.0)


def tangent(node, ins) -> Magnitude:
    """Tan: unbounded near its poles, of either sign."""
    x = ins[0] if ins else None
    return Magnitude(math.inf, x.rms if x is not None else ACTIVATION)


for _rule in (sine, cosine, tangent):
    _rule.precise_input = PHASE


def _through(f, odd: bool):
    """An op growing its input's magnitude through f, increasing on x >= 0: odd (of its input's
    sign) or even (never negative, well conditioned)."""
    def rule(node, ins) -> Magnitude | None:
        x = ins[0] if ins else None
        if x is None:
            return None
        rms = _grown(lambda: f(x.rms))
        return Magnitude(_grown(lambda: f(x.top)), rms, 0.0 if odd else rms)
    if odd:
        return _facts(rule, sign=_first)
    return _facts(rule, sign=_positive, conditioned=True)


hyperbolic_sine = _through(math.sinh, odd=True)
hyperbolic_cosine = _through(math.cosh, odd=False)
inverse_hyperbolic_sine = _through(math.asinh, odd=True)
# acosh is NaN below 1
inverse_hyperbolic_cosine = _through(lambda x: math.acosh(max(x, 1.0)), odd=False)
# atanh's largest finite float32 result (at 1 - 2^-24); +-1 give +-inf in any float type
ATANH_TOP = math.atanh(1.0 - 2.0 ** -24)
