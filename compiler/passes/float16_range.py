"""Float16 range: the nodes `--precision fp16` (and fp16-matmul) keeps in float32 by itself, as
`--keep-fp32` would, where float16 storage would overflow or lose too much. Decided from what
the compiler knows statically: constants' values, op kinds, axis lengths.

Every float value gets a Magnitude (compiler/magnitudes.py): the largest |value| it may hold, and
its typical size (root mean square, and how much of it is one-signed):
- a constant: its largest finite |value|, its root mean square and mean;
- a graph input: ACTIVATION, typical size 1 (normalized images, embeddings);
- a node's result: what its op declares (`magnitude=` with the op: sums add, products multiply,
  Exp exponentiates, reductions grow with their axis length, Softmax, Sigmoid, Tanh, Erf and
  normalizations are bounded, Relu halves a symmetric input's mean square); a product (MatMul,
  Gemm, Conv) typically scales its input by its weights: each output sums `taps` products, so
  its size is input size x weight rms x sqrt(taps), the iid estimate (exact in expectation for
  weights drawn at random, as library-default init draws them; trained weights hold activations
  near 1, far from both ends of float16's range); its bound is ACTIVATION, or CREST times its
  typical size where the weights grow it past that. An op that declares nothing (pooling, data
  movement) passes its largest input on.

ACTIVATION (256) is an assumption, not a fact: trained models keep their activations within a few
hundred; a square of one or a product of two is already past float16's 65504.

A node that would compute in float16 stays float32 when
1. it reads a constant with finite values past float16's range (a -1e9 mask, which float16 would
   saturate), or one that float16 rounds by over 1e-3 of its largest value (a tensor in float16's
   subnormal range);
2. it reads a value that may pass LIMIT: its Cast into float16 would overflow or lose it;
3. its own result may pass LIMIT (a sum of squares, exp of an activation, a 1e4 bias, the
   residual stream of a deep network whose default-init blocks each add to it);
4. it reads a value that may hold what float16 rounds to 0: the result of a node that read a
   constant of rule 1's second kind (F.normalize's Clip to 1e-12), through data movement: a
   division by it would divide by 0;
5. it reads, or computes, a value whose typical size is below SMALL, float16's smallest normal
   number (2^-14), and not 0: float16 keeps few digits of it, or flushes it to 0 (library-default init of
   a network of depthwise convolutions shrinks every block's activations, to 1e-14 at the
   logits of EfficientNet).
And it refuses the model (a CompileError naming the node: --precision fp32) where
6. an op that weighs another tensor by its result (a Softmax, a squeeze-excite gate's Sigmoid:
   declared `weighs`; a fused attention: its scores) reads values of typical size past GATE
   computed from values float16 stores: float16 holds those to 1 part in 2048, and where the
   terms of such a value cancel (near a gate's 0, between a softmax's largest logits) it moves
   by over 1/8, and the weights with it; keeping nodes float32 would not help, the rounding
   comes from everything upstream.
   A gate of its own input (SiLU's x * sigmoid(x)) is exempt: where it moves, its factor is small.
7. it divides by a sum of terms of both signs (or of either: Div(x, ReduceMean(x)) of signed x,
   x / (a - b), 1 / MatMul(...)), or feeds one: such a sum may cancel to far below its terms,
   and float16's rounding of them (2^-11 of each) is then most of it, and of the quotient. The
   sum and everything it is computed from stay float32 (a graph input is exact there), the
   division too, and its quotient counts as unbounded. Where that input is float16 at the API
   (--io fp16, a float16 state), keeping cannot help: the model is refused, naming the division.
   Signs come from the ops' rules (compiler/magnitudes.py); a sum of one-signed terms (a
   variance, a softmax's denominator, a norm) does not cancel, and a reduction's ends the
   cancellation of its terms (a LayerNorm's x - mean squared), as a well-conditioned op (exp, a
   sigmoid) does; an elementwise one carries it (|x| + eps of a cancelled x).
   So does a product of such values (ReduceProd of attention outputs): its relative error is
   the sum of its factors', each unbounded where it cancels (its magnitude is not).
8. it computes a phase (Sin, Cos, Tan: its rule's `precise_input`) from an input that may pass
   that bound (magnitudes.PHASE), or that input is computed from what it reads: float16 holds
   an angle of hundreds of radians to a fraction of a turn. The node and everything its input is
   computed from stay float32 (a graph input is exact there). Where that input is float16 at
   the API (--io fp16, a float16 state), keeping cannot help: the model is refused, naming it.
9. (a refusal, as 6) a Clip with both bounds (ReLU6) reads values of typical size past WINDOW
   times its width, computed from values float16 stores: what it passes of them is what is left
   where their terms cancel, and float16's rounding of those terms (1 part in 2048 of their size)
   is then a large part of it (random normal(0, 0.5) weights in MobileNetV2: 4e-2 at its output). As for rule 6,
   keeping nodes float32 would not help.
LIMIT is 2^13: float16's spacing is 8 there, so an activation-sized term added to such a value
keeps under two significant digits; past 65504 float16 overflows. A float32 result stays large
(or small) for the nodes that read it (rules 2 and 5), up to a bounded op. Where a rule cannot
see (an exponent computed at run time), the value counts as unbounded: float32, never a silent
overflow.
"""
from __future__ import annotations

import math

import numpy as np

from ..derived import derived
from ..errors import CompileError
from ..ir import Graph, Node, Value
from ..magnitudes import (ACTIVATION, LIMIT, Magnitude, absolute, averaged, clipped, negated, one_sign,
                          product_of, reciprocal)
from ..registry import find_rule

F16_MAX = float(np.finfo(np.float16).max)
ROUNDING = 1e-3   # the largest rounding of a constant, relative to its largest value
FLOATS = (np.dtype(np.float32), np.dtype(np.float16))
# A graph input: an activation's bound, and unit typical size (normalized images, embeddings).
INPUT = Magnitude(ACTIVATION, 1.0)
SMALL = 2.0 ** -14   # float16's smallest normal value
# The typical size past which an input moves a weighing op's result (a softmax, a gate) by over a
# few parts in a thousand: float16 holds what it is computed from to 1 part in 2048, so such an
# input moves by over 1/8 where its terms cancel (near the gate's 0, between a softmax's largest).
GATE = ACTIVATION
# The typical input size, in widths of its window, past which a Clip's result moves by over
# 0.4 % of that window at each such node (8 / 2048), and a network of them compounds that: the
# random-weight MobileNetV1 whose Clips read up to 4 widths gives 2e-3, MobileNetV2 at up to 20
# gives 4e-2.
WINDOW = 8
# Rules through which a value float16 rounds to 0 passes on as such (data movement declares none).
_PASS_TINY = (None, clipped, negated, absolute, reciprocal, averaged)


def float16_range(graph: Graph, computes_float16) -> dict[int, tuple[Node, str]]:
    """{id(node): (node, why)} for the nodes `computes_float16(node)` retypes that must stay float32.
    Refuses a model whose weighing ops (declared `weighs`) read values float16 cannot carry, or
    that divides (or multiplies together) a cancelling sum of its float16 inputs."""
    first = _Range(graph)
    first.kept(computes_float16)
    found = _Range(graph, {**first.feeding_phases(), **first.feeding_divisions()})
    kept = found.kept(computes_float16)
    found.gates = [g for g in found.gates if not _gates_itself(graph, g[0])]
    if found.windows:
        (node, size, width, source), *more = found.windows
        raise CompileError(
            f"{node.op_type} '{node.name}' keeps values within a window of {width:g} from values about "
            f"{size:.2g} ('{source}'){_more(more)}: what it passes is what is left where terms float16 "
            f"holds to 1 part in 2048 cancel, so it moves by about {size / 2048 / width:.1%} of the "
            "window at each such node, past float16's tolerance. Compile with --precision fp32.")
    if found.gates:
        (node, size, source), *more = found.gates
        raise CompileError(
            f"{node.op_type} '{node.name}' weighs by values about {size:.2g} ('{source}'){_more(more)}, "
            "computed from values float16 holds to 1 part in 2048: they move by about "
            f"{size / 2048:.2g}, and its result with them, past float16's tolerance. Compile with "
            "--precision fp32.")
    return kept


def _more(more: list) -> str:
    """' (N more: a, b, ...)' naming the other nodes a refusal found, if any."""
    if not more:
        return ""
    names = ", ".join(m[0].name for m in more[:4])
    return f" ({len(more)} more: {names}{'...' if len(more) > 4 else ''})"


def value_magnitudes(graph: Graph) -> dict[int, Magnitude]:
    """{id(value): Magnitude} for the graph's computed float values, as the rules above see them."""
    r = _Range(graph)
    r.kept(lambda node: False)
    return r.size


class _Range:
    def __init__(self, graph: Graph, forced: dict[int, str] | None = None):
        self.graph = graph
        self.forced = forced or {}   # id(node) -> why: divisions by cancelling sums, what feeds them
        self.sign: dict[int, int] = {}          # +1 never negative, -1 never positive, 0 either
        self.cancels: dict[int, str] = {}       # a sum that may cancel -> the node summing
        # (node, its divisor or factors, where that cancels, "divides by" or "multiplies together")
        self.divisions: list[tuple[Node, Value, str, str]] = []
        self.phases: list[tuple[Node, Value, float]] = []   # (Sin, its input, that input's bound)
        self.size: dict[int, Magnitude] = {id(v): INPUT for v in graph.inputs if _is_float(v)}
        self.origin: dict[int, str] = {}        # a large value -> the node or constant it comes from
        self.small: dict[int, str] = {}         # a value below float16's normal range -> the same
        # values that may hold what float16 rounds to 0 (a Clip's 1e-12 floor before a division)
        self.tiny: dict[int, str] = {}
        self.constants: dict[int, tuple[Magnitude, float]] = {}
        self.gates: list[tuple[Node, float, str]] = []   # weighing ops reading values past GATE
        self.windows: list[tuple[Node, float, float, str]] = []   # Clips reading past WINDOW widths
        self.rounded: set[int] = set()   # values float16 storage has rounded, or computed from such

    def kept(self, computes_float16) -> dict[int, tuple[Node, str]]:
        found = {}
        for node in self.graph.nodes:
            why = self._visit(node)
            if why and computes_float16(node):
                found[id(node)] = (node, why)
            # what float16 rounds: a float16 node's inputs and results, and all computed from them
            half = not why and computes_float16(node)
            rounded = half or any(v is not None and id(v.root()) in self.rounded for v in node.inputs)
            if rounded:
                self.rounded.update(id(v) for v in node.outputs if v is not None)
            rule = find_rule(node.op_type, node.domain, self.graph.opset)
            weighs = getattr(rule.magnitude, "weighs", None) if rule is not None else None
            window = getattr(rule.magnitude, "window", None) if rule is not None else None
            ins = [self._magnitude(v) for v in node.inputs] if weighs or window else []
            size = weighs(node, ins) if weighs else None
            if size is not None and size > GATE and rounded:
                self.gates.append((node, size, node.inputs[0].name))
            size_width = window(node, ins) if window else None
            if size_width is not None and size_width[0] > WINDOW * size_width[1] and rounded:
                self.windows.append((node, *size_width, node.inputs[0].name))
        return found

    def _visit(self, node: Node) -> str | None:
        """Records the node's result's magnitude; returns why it must stay float32, if it must."""
        why = None
        ins = []
        tiny = None
        for v in node.inputs:
            if v is not None and self._tiny(v) and not why:
                tiny = self._tiny(v)
                why = f"reads '{v.name}', which may hold values float16 rounds to 0 (from {tiny})"
            m = self._magnitude(v)
            ins.append(m)
            if m is None or why:
                continue
            if v.root().is_constant:
                top, rounding = self._constant(v.root())[0].top, self._constant(v.root())[1]
                if top > F16_MAX:
                    why = f"reads constant '{v.name}' holding {top:.3g}, past float16's range (65504)"
                elif rounding > ROUNDING:
                    why = (f"reads constant '{v.name}', which float16 rounds by {rounding:.1%} of its "
                           "largest value")
                    tiny = f"constant '{v.name}'"
            elif m.top > LIMIT:
                why = f"reads '{v.name}', which may reach {m.top:.3g} (from {self._origin(v, self.origin)})"
            elif 0 < m.rms < SMALL:
                why = (f"reads '{v.name}', whose values are about {m.rms:.2g} (from "
                       f"{self._origin(v, self.small)}), below float16's normal range (6.1e-05)")
        why = self.forced.get(id(node)) or why
        rule = find_rule(node.op_type, node.domain, self.graph.opset)
        bound = getattr(rule.magnitude, "precise_input", None) if rule is not None else None
        if bound is not None:
            self.phases += [(node, v, m.top) for v, m in zip(node.inputs, ins)
                            if m is not None and m.top > bound]
        out = rule.magnitude(node, ins) if rule is not None and rule.magnitude is not None else None
        unbounded = self._signs(node, rule.magnitude if rule is not None else None)
        # Such values pass on through data movement (no rule) and a Clip to its floor; arithmetic
        # (a division by them, kept float32 here) ends them.
        if tiny and (rule is None or rule.magnitude in _PASS_TINY):
            for v in node.outputs:
                if v is not None and _is_float(v):
                    self.tiny[id(v)] = tiny
        if out is None:
            computed = [m for v, m in zip(node.inputs, ins) if m is not None and not v.root().is_constant]
            typical = max(computed or [m for m in ins if m is not None], key=lambda m: m.rms, default=INPUT)
            out = Magnitude(max([ACTIVATION, *(m.top for m in ins if m is not None)]), typical.rms,
                            typical.mean)
        if unbounded and isinstance(out, Magnitude):   # a quotient by what may cancel to 0
            out = Magnitude(math.inf, out.rms, out.mean)
        each = out if isinstance(out, list) else [out] * len(node.outputs)
        for v, m in zip(node.outputs, each):
            if v is not None and _is_float(v):
                self.size[id(v)] = m
        out = Magnitude(max(m.top for m in each), min(m.rms for m in each)) if each else out
        if out.top > LIMIT:
            self._mark(node, ins, self.origin, lambda m: m.top > LIMIT)
            why = why or (f"its result may reach {out.top:.3g} from inputs up to "
                          f"{max((m.top for m in ins if m is not None), default=0):.3g}")
        elif 0 < out.rms < SMALL:
            self._mark(node, ins, self.small, lambda m: 0 < m.rms < SMALL)
            why = why or (f"its result's values are about {out.rms:.2g}, below float16's normal "
                          "range (6.1e-05)")
        return why

    def _signs(self, node: Node, facts) -> bool:
        """Records the signs of the node's results and whether they may cancel (rule 7), and the
        divisions and products of values that may; whether it divides by one."""
        signs = [self._sign(v) if v is not None and _is_float(v) else None for v in node.inputs]
        sign = facts.sign(node, signs) if getattr(facts, "sign", None) else 0
        terms = facts.terms(node, signs) if getattr(facts, "terms", None) else None
        carried = next((self._cancels(v) for v in node.inputs
                        if v is not None and _is_float(v) and self._cancels(v)), None)
        if terms is not None:
            cancels = f"{node.op_type} '{node.name}'" if not one_sign(terms) else \
                carried if getattr(facts, "carries", False) else None
        elif getattr(facts, "conditioned", False):
            cancels = None
        else:
            cancels = carried
        for v in node.outputs:
            if v is not None and _is_float(v):
                self.sign[id(v)] = sign
                if cancels:
                    self.cancels[id(v)] = cancels
        unbounded = False
        for fact, verb in (("divides", "divides by"), ("multiplies", "multiplies together")):
            slots = getattr(facts, fact)(node) if getattr(facts, fact, None) else []
            values = [v for v in (node.inputs[i] for i in slots if i < len(node.inputs)) if v is not None]
            # several slots a division declares: it divides by their sum, which its terms' signs may cancel
            summed = len(values) > 1 and fact == "divides" and \
                not one_sign([self._sign(v) if _is_float(v) else None for v in values])
            for v in values:
                where = self._cancels(v) or (f"{node.op_type} '{node.name}' sums it" if summed else None)
                if where:
                    self.divisions.append((node, v, where, verb))
                    unbounded = unbounded or fact == "divides"
        return unbounded

    def _sign(self, v: Value) -> int:
        root = v.root()
        if root.is_constant:
            if id(root) not in self.sign:
                self.sign[id(root)] = derived(root.data, "sign", lambda: _constant_sign(np.asarray(root.data)))
            return self.sign[id(root)]
        return self.sign.get(id(v), self.sign.get(id(root), 0))

    def _cancels(self, v: Value) -> str | None:
        return self.cancels.get(id(v), self.cancels.get(id(v.root())))

    def feeding_phases(self) -> dict[int, str]:
        """{id(node): why} for every op computing a phase (rule 8) from an input that may pass its
        bound, and every node that input is computed from."""
        producers = {id(v): n for n in self.graph.nodes for v in n.outputs if v is not None}
        half = self._float16_at_the_api()
        forced = {}
        for node, x, top in self.phases:
            forced.setdefault(id(node), f"its input '{x.name}' may reach {top:.3g}, an angle "
                              "float16 would hold only to a fraction of a turn")
            inputs = []
            for n in _computed_from(x, producers, inputs):
                forced.setdefault(id(n), f"computes '{x.name}', the angle {node.op_type} "
                                  f"'{node.name}' reads, which may reach {top:.3g}")
            for v in inputs:
                if id(v) in half:
                    raise CompileError(
                        f"{node.op_type} '{node.name}' reads an angle that may reach {top:.3g}, "
                        f"computed from '{v.name}', float16 at the API: float16 holds such an angle "
                        "only to a fraction of a turn. Compile without --io fp16 (or with "
                        "--precision fp32).")
        return forced

    def _float16_at_the_api(self) -> set[int]:
        """id()s of the float graph inputs that arrive as float16 (--io fp16, a float16 state)."""
        precision = getattr(self.graph, "precision", None)
        state = {id(i) for i, _ in self.graph.state} if precision is not None and \
            not precision.matmul_only else set()
        return {id(v) for v in self.graph.inputs if _is_float(v) and
                (id(v) in state or (precision is not None and precision.io_float16))}

    def feeding_divisions(self) -> dict[int, str]:
        """{id(node): why} for every division by (or product of) a value that may cancel (rule 7)
        and every node that value is computed from. Refuses where it is computed from a float16 graph input."""
        producers = {id(v): n for n in self.graph.nodes for v in n.outputs if v is not None}
        half = self._float16_at_the_api()
        forced = {}
        for node, divisor, where, verb in self.divisions:
            forced.setdefault(id(node), f"{verb} '{divisor.name}', a sum of terms of both signs "
                              f"({where}) that may cancel to far below them: float16's rounding of "
                              "its terms would be most of it")
            inputs = []
            for n in _computed_from(divisor, producers, inputs):
                forced.setdefault(id(n), f"feeds '{divisor.name}', which {node.op_type} "
                                  f"'{node.name}' {verb} and which may cancel ({where}): "
                                  "its terms keep float32's precision")
            for v in inputs:
                if id(v) in half:
                    raise CompileError(
                        f"{node.op_type} '{node.name}' {verb} '{divisor.name}', a sum that may "
                        f"cancel ({where}), computed from '{v.name}', float16 at the API: its "
                        "rounding would be most of it. Compile without --io fp16 (or with "
                        "--precision fp32).")
        return forced

    def _mark(self, node: Node, ins, origins: dict, past) -> None:
        """Records where a value out of float16's range comes from: the first node that made one."""
        out_of = [v for v, m in zip(node.inputs, ins) if m is not None and past(m) and not v.root().is_constant]
        origin = self._origin(out_of[0], origins) if out_of else f"{node.op_type} '{node.name}'"
        for v in node.outputs:
            if v is not None:
                origins[id(v)] = origin

    def _magnitude(self, v: Value | None) -> Magnitude | None:
        if v is None or not _is_float(v):
            return None
        root = v.root()
        if root.is_constant:
            return self._constant(root)[0]
        return self.size.get(id(v), self.size.get(id(root), INPUT))

    def _tiny(self, v: Value) -> str | None:
        return self.tiny.get(id(v), self.tiny.get(id(v.root())))

    def _origin(self, v: Value, origins: dict) -> str:
        return origins.get(id(v), origins.get(id(v.root()), "a graph input"))

    def _constant(self, c: Value) -> tuple[Magnitude, float]:
        """(its magnitude, float16's largest rounding relative to its largest finite |value|)."""
        key = id(c)
        if key not in self.constants:
            # kept with the array: each pass that asks (scale_products, then apply_precision
            # twice) and every variant's graph read the same weights
            data = c.data
            self.constants[key] = derived(data, "magnitude", lambda: constant_magnitude(np.asarray(data)))
        return self.constants[key]


def _constant_sign(data: np.ndarray) -> int:
    """1: no value negative, -1: none positive, 0: either (compared as stored: no float64 copy)."""
    return 1 if data.size and np.all(data >= 0) else -1 if data.size and np.all(data <= 0) else 0


def constant_magnitude(data: np.ndarray) -> tuple[Magnitude, float]:
    """A constant's magnitude, and float16's largest rounding of it relative to its largest finite
    |value|: rule 1 keeps its readers float32 where the first passes F16_MAX or the second
    ROUNDING."""
    data = data.astype(np.float32, copy=False).reshape(-1)
    plain = bool(np.isfinite(data).all())
    finite = data if plain else data[np.isfinite(data)]
    top = float(np.abs(finite).max()) if finite.size else 0.0
    # values past LIMIT are sentinels (a -1e9 or float32-lowest mask), not data: rule 1 sees
    # them; its typical size is the rest's
    values = finite if top <= LIMIT else finite[np.abs(finite) <= LIMIT]
    # float64 sums a chunk at a time (numpy's pairwise sums, not BLAS: every machine gets the
    # same figures, so the same bundle)
    squares = total = 0.0
    for start in range(0, values.size, 1 << 20):
        chunk = values[start:start + (1 << 20)].astype(np.float64)
        squares += float(np.sum(chunk * chunk))
        total += float(np.sum(chunk))
    rms = math.sqrt(squares / values.size) if values.size else 0.0
    mean = min(abs(total) / values.size, rms) if values.size else 0.0
    if SMALL <= top <= F16_MAX:
        # every value within float16's range rounds by at most 2^-11 of itself (normal) or of
        # SMALL (subnormal), both at most 2^-11 of top: below ROUNDING
        rounding = 2.0 ** -11
    elif 0 < top <= F16_MAX:
        rounded = finite.astype(np.float16).astype(np.float32)
        rounding = float(np.max(np.abs(rounded - finite))) / top
    else:
        rounding = 0.0
    return Magnitude(top, rms, mean), rounding


def _computed_from(value: Value, producers: dict[int, Node], inputs: list | None = None):
    """The nodes `value` is computed from, through any depth (none past constants and inputs);
    the graph inputs (values no node produces) it reaches go to `inputs`, where given."""
    stack, seen = [value], set()
    while stack:
        v = stack.pop().root()
        if id(v) in seen or v.is_constant:
            continue
        seen.add(id(v))
        n = producers.get(id(v))
        if n is not None:
            yield n
            stack.extend(x for x in n.inputs if x is not None)
        elif inputs is not None:
            inputs.append(v)


def _gates_itself(graph: Graph, node: Node) -> bool:
    """Whether every reader of the node's result multiplies it by the node's own input (SiLU's
    x * sigmoid(x)): near 0, where the gate moves with its input's error, its factor is small."""
    x, y = node.inputs[0], node.outputs[0]
    readers = [n for n in graph.nodes if any(v is y for v in n.inputs)]
    return bool(readers) and all(
        getattr(find_rule(n.op_type, n.domain, graph.opset), "magnitude", None) is product_of
        and any(v is x for v in n.inputs) for n in readers)


def _is_float(v: Value) -> bool:
    return np.dtype(v.dtype) in FLOATS


def describe(kept: dict[int, tuple[Node, str]]) -> list[dict]:
    """What the manifest records: one entry a node, in graph order (a fused node's entry names
    the ONNX nodes it holds, which --keep-fp32 takes too)."""
    return [{"node": node.name, "why": why if node.sources in ([], [node.name]) else
             f"{why} (fused from {', '.join(node.sources)})"} for node, why in kept.values()]

