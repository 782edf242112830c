"""Float16 range: the nodes `--precision fp16` (and fp16-matmul) keeps in float32 by itself, as
`--keep-fp32` would, where float16 storage would overflow or lose too much. Decided from what
the compiler knows statically: constants' values, op kinds, axis lengths.

Every float value gets the largest |value| it may hold:
- a constant: its largest finite |value|;
- a graph input: ACTIVATION;
- a node's result: what its op declares (`magnitude=` with the op, compiler/magnitudes.py: sums
  add, products multiply, Exp exponentiates, reductions grow with their axis length, Softmax,
  Sigmoid, Tanh, Erf and normalizations are bounded); an op that declares nothing (products,
  convolutions, pooling, data movement) gives ACTIVATION, or its largest input if larger: a
  large value passes through it.

ACTIVATION (256) is an assumption, not a fact: trained models keep their activations within a few
hundred; a square of one or a product of two is already past float16's 65504.

A node that would compute in float16 stays float32 when
1. it reads a constant with finite values past float16's range (a -1e9 mask, which float16 would
   saturate), or one that float16 rounds by over 1e-3 of its largest value (a tensor in float16's
   subnormal range);
2. it reads a value that may pass LIMIT: its Cast into float16 would overflow or lose it;
3. its own result may pass LIMIT (a sum of squares, exp of an activation, a 1e4 bias);
4. it reads a value that may hold what float16 rounds to 0: the result of a node that read a
   constant of rule 1's second kind (F.normalize's Clip to 1e-12), through data movement: a
   division by it would divide by 0.
LIMIT is 2^13: float16's spacing is 8 there, so an activation-sized term added to such a value
keeps under two significant digits; past 65504 float16 overflows. A float32 result stays large
for the nodes that read it (rule 2), up to a bounded op. Where a rule cannot see (an exponent
computed at run time), the value counts as unbounded: float32, never a silent overflow.
"""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Node, Value
from ..magnitudes import ACTIVATION, LIMIT, clipped
from ..registry import find_rule

F16_MAX = float(np.finfo(np.float16).max)
ROUNDING = 1e-3   # the largest rounding of a constant, relative to its largest value
FLOATS = (np.dtype(np.float32), np.dtype(np.float16))


def float16_range(graph: Graph, computes_float16) -> dict[int, tuple[Node, str]]:
    """{id(node): (node, why)} for the nodes `computes_float16(node)` retypes that must stay float32."""
    return _Range(graph).kept(computes_float16)


class _Range:
    def __init__(self, graph: Graph):
        self.graph = graph
        self.size: dict[int, float] = {id(v): ACTIVATION for v in graph.inputs if _is_float(v)}
        self.origin: dict[int, str] = {}        # a large value -> the node or constant it comes from
        # values that may hold what float16 rounds to 0 (a Clip's 1e-12 floor before a division)
        self.tiny: dict[int, str] = {}
        self.constants: dict[int, tuple[float, float]] = {}

    def kept(self, computes_float16) -> dict[int, tuple[Node, str]]:
        found = {}
        for node in self.graph.nodes:
            why = self._visit(node)
            if why and computes_float16(node):
                found[id(node)] = (node, why)
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
                top, rounding = self._constant(v.root())
                if top > F16_MAX:
                    why = f"reads constant '{v.name}' holding {top:.3g}, past float16's range (65504)"
                elif rounding > ROUNDING:
                    why = (f"reads constant '{v.name}', which float16 rounds by {rounding:.1%} of its "
                           "largest value")
                    tiny = f"constant '{v.name}'"
            elif m > LIMIT:
                why = f"reads '{v.name}', which may reach {m:.3g} (from {self._origin(v)})"
        rule = find_rule(node.op_type, node.domain, self.graph.opset)
        out = rule.magnitude(node, ins) if rule is not None and rule.magnitude is not None else None
        # Such values pass on through data movement (no rule) and a Clip to its floor; arithmetic
        # (a division by them, kept float32 here) ends them.
        if tiny and (rule is None or rule.magnitude in (None, clipped)):
            for v in node.outputs:
                if v is not None and _is_float(v):
                    self.tiny[id(v)] = tiny
        if out is None:
            out = max([ACTIVATION, *(m for m in ins if m is not None)])
        for v in node.outputs:
            if v is not None and _is_float(v):
                self.size[id(v)] = out
        if out > LIMIT:
            large = [v for v in node.inputs if v is not None and (self._magnitude(v) or 0) > LIMIT]
            origin = self._origin(large[0]) if large and not large[0].root().is_constant \
                else f"{node.op_type} '{node.name}'"
            for v in node.outputs:
                if v is not None:
                    self.origin[id(v)] = origin
            why = why or (f"its result may reach {out:.3g} from inputs up to "
                          f"{max((m for m in ins if m is not None), default=0):.3g}")
        return why

    def _magnitude(self, v: Value | None) -> float | None:
        if v is None or not _is_float(v):
            return None
        root = v.root()
        if root.is_constant:
            return self._constant(root)[0]
        return self.size.get(id(v), self.size.get(id(root), ACTIVATION))

    def _tiny(self, v: Value) -> str | None:
        return self.tiny.get(id(v), self.tiny.get(id(v.root())))

    def _origin(self, v: Value) -> str:
        return self.origin.get(id(v), self.origin.get(id(v.root()), "a graph input"))

    def _constant(self, c: Value) -> tuple[float, float]:
        """(largest finite |value|, float16's largest rounding relative to it)."""
        key = id(c)
        if key not in self.constants:
            data = np.asarray(c.data, np.float32)
            finite = np.abs(data[np.isfinite(data)])
            top = float(finite.max()) if finite.size else 0.0
            if 0 < top <= F16_MAX:
                rounded = finite.astype(np.float16).astype(np.float32)
                rounding = float(np.max(np.abs(rounded - finite))) / top
            else:
                rounding = 0.0
            self.constants[key] = (top, rounding)
        return self.constants[key]


def _is_float(v: Value) -> bool:
    return np.dtype(v.dtype) in FLOATS


def describe(kept: dict[int, tuple[Node, str]]) -> list[dict]:
    """What the manifest records: one entry a node, in graph order (a fused node's entry names
    the ONNX nodes it holds, which --keep-fp32 takes too)."""
    return [{"node": node.name, "why": why if node.sources in ([], [node.name]) else
             f"{why} (fused from {', '.join(node.sources)})"} for node, why in kept.values()]

