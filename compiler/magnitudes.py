"""How large an op's result may grow from its inputs: what the float16 range pass
(passes/float16_range.py) asks of an op, declared with the op (`magnitude=` in its `register` or
`declare`). Each rule takes the node and the largest |value| each input may hold (None: not a
float tensor, or absent) and returns the largest |value| its result may hold, or None where it
cannot say (the pass then takes an activation's magnitude, or its inputs' if larger).
"""
from __future__ import annotations

import math

import numpy as np

# An assumption, not a fact: trained models keep activations (the model's inputs, the results of
# its products) within a few hundred; a square of one, or a product of two, is past 65504.
ACTIVATION = 256.0
# Past 2^13 float16's spacing is 8: an activation-sized term added to such a value keeps under two
# significant digits; past 65504 float16 overflows.
LIMIT = 8192.0


def _known(ins) -> list[float]:
    return [m for m in ins if m is not None]


def _grown(value) -> float:
    """value(), or inf where it overflows."""
    try:
        x = float(value())
    except OverflowError:
        return math.inf
    return x if math.isfinite(x) else math.inf


def activation(node, ins) -> float:
    """A product (MatMul, Gemm, Conv): its result is an activation (training keeps it one),
    unless it reads a value past LIMIT (a float32 mask, a large constant), which it carries on."""
    return max(max(_known(ins), default=0.0), ACTIVATION) if any(m > LIMIT for m in _known(ins)) \
        else ACTIVATION


def weighted_average(index: int):
    """Attention: each result is a softmax-weighted average of the rows of input `index` (V)."""
    def rule(node, ins) -> float | None:
        return ins[index] if index < len(ins) else None
    return rule


def sum_of(node, ins) -> float:
    """Add, Sub, Sum: the terms' magnitudes add."""
    return sum(_known(ins))


def product_of(node, ins) -> float:
    """Mul: the factors' magnitudes multiply (a square of an activation: its magnitude squared)."""
    return math.prod(_known(ins))


def quotient(node, ins) -> float | None:
    """Div: by a constant, the numerator over the constant's smallest |value|; by a tensor
    computed at run time (a normalization's deviation, a softmax's sum), unknown."""
    d = node.inputs[1] if len(node.inputs) > 1 else None
    if d is None or not d.is_constant or ins[0] is None:
        return None
    smallest = float(np.min(np.abs(d.data))) if d.size else 1.0
    return math.inf if smallest == 0 else ins[0] / smallest


def power(node, ins) -> float:
    """Pow: a constant exponent p takes |x| to |x|^p (p > 1 grows it: squares, cubes); an exponent
    computed at run time may take it anywhere."""
    p = node.inputs[1] if len(node.inputs) > 1 else None
    if p is None or not p.is_constant or ins[0] is None:
        return math.inf
    top = float(np.max(p.data)) if p.size else 1.0
    base = ins[0]
    return _grown(lambda: base ** top) if base >= 1 and top > 0 else max(base, 1.0)


def exponential(node, ins) -> float:
    """Exp: e^x, past float16's range from x = 11.1 on."""
    return _grown(lambda: math.exp(ins[0])) if ins[0] is not None else math.inf


def square_root(node, ins) -> float | None:
    return math.sqrt(ins[0]) if ins[0] is not None else None


def clipped(node, ins) -> float | None:
    """Clip: within its bounds where both are known (attributes, or constant inputs)."""
    bounds = [node.attrs.get("min"), node.attrs.get("max")]
    for i in (1, 2):
        v = node.inputs[i] if i < len(node.inputs) else None
        if v is not None and v.is_constant and v.size == 1:
            bounds[i - 1] = float(np.asarray(v.data).reshape(()))
    if any(b is None for b in bounds):
        return ins[0]
    return min(max(abs(b) for b in bounds), ins[0]) if ins[0] is not None else max(abs(b) for b in bounds)


def bounded(limit: float):
    """An op whose result stays within +-limit whatever its inputs (Softmax, Sigmoid, Tanh, Erf)."""
    def rule(node, ins) -> float:
        return limit
    return rule


def reduction(kind: str):
    """A reduction of `kind` (reduce_ops.REDUCE_OPS) over N elements: a sum grows N times, a sum
    of squares N times the square; means, maxima and minima stay within their input's range."""
    def rule(node, ins) -> float | None:
        x, y = node.inputs[0], node.outputs[0]
        if ins[0] is None:
            return None
        n = max(x.size // max(y.size, 1), 1)
        m = ins[0]
        grows = {"sum": lambda: m * n, "l1": lambda: m * n, "sumsquare": lambda: m * m * n,
                 "l2": lambda: m * math.sqrt(n), "prod": lambda: m ** n if m > 1 else m,
                 "logsumexp": lambda: m + math.log(n),
                 "logsum": lambda: math.log(m * n) if m * n > 1 else m}
        return _grown(grows.get(kind, lambda: m))
    return rule


def normalization(scale: int, bias: int | None = None, skip: int | None = None):
    """A layer normalization: a row of N normalized values lies within +-sqrt(N), times the
    scale's largest |value|, plus the bias's; the residual sum x + skip it may also write adds."""
    def rule(node, ins) -> float:
        x = node.inputs[0]
        axis = node.attrs.get("axis", -1) % max(len(x.shape), 1)
        n = math.prod(x.shape[axis:])

        def at(i):
            return ins[i] if i is not None and i < len(ins) and ins[i] is not None else 0.0
        y = math.sqrt(n) * (at(scale) or 1.0) + at(bias)
        return max(y, at(0) + at(skip)) if skip is not None else y
    return rule
