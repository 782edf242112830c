"""Constant folding, no-ops and static shapes.

Walks the graph once in order: a node its op declares a no-op (registry `noop`: an Identity, an
inference Dropout, a Cast to its own dtype, a Reshape to its own shape, a Pad of zeros, a Slice
that keeps every element) hands its readers its input itself and disappears, so an Identity of
an initializer (what the TorchScript exporter writes for tied or equal weights) leaves one shared
constant and every pattern after sees through it;
one whose output is a graph output stays (a view, passes/views.py). A node whose inputs are all
constants (or that only reads static shapes) is evaluated with onnx's reference evaluator and
disappears (one the evaluator fails on stays, for a kernel to compute; one its op's declaration
keeps for a pass stays too: registry `unfolded`); a node whose output shape
shape inference could not fix (a Reshape fed by a folded shape subgraph) is re-inferred with its
now-constant inputs visible. An assignment through a boolean mask (NonZero's positions, a count
known at run time) then becomes a Where (passes/masked_assignment.py), and a tensor split into a
sequence and read back at constant positions, slices of it (passes/unbound_sequences.py).
"""
from __future__ import annotations

import numpy as np

from ..derived import derived
from ..errors import CompileError
from ..ir import Graph, Node, Value, is_onnx
from ..registry import declare, find_rule
from .masked_assignment import rewrite_masked_assignments
from .onnx_node import evaluate, infer_output_types
from .unbound_sequences import rewrite_unbound_sequences

# Folding these would bake one random draw into the bundle.
NONDETERMINISTIC = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
                    "Multinomial", "Bernoulli"}


# Constant and Range are only ever folded, by onnx's reference evaluator at the model's opset,
# which implements each of their schema versions (Range-27's stash_type, ...): schema=None.
declare("Constant", handled_by="folded at compile time", module=__name__, schema=None)
declare("Range", handled_by="folded at compile time", module=__name__, dtypes_doc="-", schema=None,
        constant_inputs=(0, 1, 2),
        limits="start, limit or delta computed at run time (the output's length would be too)")
for _op in ("Shape", "Size"):
    declare(_op, handled_by="folded at compile time", module=__name__, dtypes_doc="-",
            limits="an int64 graph output (folded values are not copied out yet)")


def fold_constants(graph: Graph) -> Graph:
    kept = []
    forwarded: dict[int, Value] = {}   # a no-op's output -> the value it is
    for node in graph.nodes:
        node.inputs = [forwarded.get(id(v), v) if v is not None else None for v in node.inputs]
        if _forward_noop(graph, node, forwarded):
            continue
        present = [v for v in node.inputs if v is not None]
        if is_onnx(node, "Shape", "Size") and present[0].shape is not None:
            data = np.array(present[0].shape, dtype=np.int64)
            start, end = node.attrs.get("start", 0), node.attrs.get("end", None)
            out = np.array(np.prod(data) if node.op_type == "Size" else data[start:end], dtype=np.int64)
            _set_constant(node.outputs[0], out)
            continue
        if node.op_type not in NONDETERMINISTIC and node.domain in ("", "ai.onnx") \
                and all(v.is_constant for v in present) and not _unfolded(graph, node):
            try:
                results = _evaluated(node, graph.opset)
            except Exception:  # noqa: BLE001, S110 - the evaluator raises many types
                # The reference evaluator has gaps and bugs of its own: a node it cannot compute
                # stays in the graph and runs on the device like any other, or, when no kernel
                # computes it, is reported by name with the other unsupported ops.
                pass
            else:
                # a result of another shape than inference gives is the evaluator's error: the
                # node runs on the device instead
                if all(v.shape is None or tuple(np.shape(data)) == tuple(v.shape)
                       for v, data in zip(node.outputs, results)):
                    for v, data in zip(node.outputs, results):
                        _set_constant(v, data)
                    continue
        if node.op_type == "Range":  # no kernel computes it: folding is its only way
            computed = ", ".join(repr(v.name) for v in present if not v.is_constant)
            raise CompileError(f"Range '{node.name}': start, limit and delta must be constants "
                               + (f"but {computed} come from the computation; the output's length "
                                  "would be known only at run time, and vkc compiles static shapes."
                                  if computed else "that onnx's reference evaluator can fold."))
        if any(v.shape is None or v.dtype is None for v in node.outputs):
            try:
                types = infer_output_types(node, graph.opset)
            except Exception as exc:  # noqa: BLE001
                raise CompileError(f"shape inference failed at node '{node.name}' "
                                   f"({node.op_type}): {exc}") from exc
            for v, (dtype, shape) in zip(node.outputs, types):
                v.dtype = v.dtype if v.dtype is not None else dtype
                v.shape = v.shape if v.shape is not None else shape
            if node.outputs[0].shape is None:
                _shape_from_declaration(node, graph.opset)
            if _forward_noop(graph, node, forwarded):  # a no-op only its output's shape shows
                continue
        kept.append(node)
    graph.nodes = kept
    graph.relink()
    before = [id(n) for n in graph.nodes]
    graph = rewrite_unbound_sequences(rewrite_masked_assignments(graph))
    # the shapes a rewrite fixed reach their readers in one more walk
    return graph if [id(n) for n in graph.nodes] == before else fold_constants(graph)


def _shape_from_declaration(node: Node, opset: int) -> None:
    """An op onnx has no schema for (com.microsoft's) whose input shape onnx could not infer at
    the frontend (it gives some ConvTranspose outputs no dims) but this pass now knows: its first
    output's shape and dtype from its declaration's output_shape, as the frontend would give them."""
    rule = find_rule(node.op_type, node.domain, opset)
    if rule is None or rule.output_shape is None or \
            any(v is not None and v.shape is None for v in node.inputs):
        return
    shape = rule.output_shape([None if v is None else list(v.shape) for v in node.inputs], node.attrs,
                              [None if v is None else np.dtype(v.dtype) for v in node.inputs])
    out, source = node.outputs[0], node.input(rule.output_dtype_from)
    if shape is not None and source is not None:
        out.shape = tuple(int(d) for d in shape)
        out.dtype = out.dtype if out.dtype is not None else source.dtype


def _forward_noop(graph: Graph, node: Node, forwarded: dict[int, Value]) -> bool:
    """Whether `node` is a no-op that goes: its readers will take its input instead (recorded in
    `forwarded`). One whose output is a graph output is forwarded but stays."""
    rule = find_rule(node.op_type, node.domain, graph.opset)
    if rule is None or rule.noop is None or not node.inputs or node.inputs[0] is None \
            or not rule.noop(node):
        return False
    forwarded[id(node.outputs[0])] = node.inputs[0]
    return not graph.is_output(node.outputs[0])


def _unfolded(graph: Graph, node: Node) -> bool:
    """Whether the op's declaration keeps this node for a pass (registry `unfolded`)."""
    rule = find_rule(node.op_type, node.domain, graph.opset)
    return rule is not None and rule.unfolded is not None and rule.unfolded(graph, node)


# Folds of a constant this large (a tied embedding's transpose) are kept with its array.
KEPT_ELEMENTS = 1 << 16


def _evaluated(node: Node, opset: int) -> list:
    """evaluate(node), in C order. Where its largest input is a large array and the rest are
    small (a weight's Transpose, Reshape or Cast), the result is kept with that array, so every
    graph of the model (each shape variant) folds it once (compiler/derived.py)."""
    def run() -> list:
        return [np.array(r, order="C", copy=None) for r in evaluate(node, opset)]
    present = [(i, v) for i, v in enumerate(node.inputs) if v is not None]
    big, value = max(present, key=lambda p: np.size(p[1].data), default=(None, None))
    attrs = _plain(node.attrs)
    if value is None or np.size(value.data) < KEPT_ELEMENTS or attrs is None or \
            any(np.size(v.data) > 64 for i, v in present if i != big):
        return run()
    small = tuple((i, np.asarray(v.data).dtype.str, np.shape(v.data), np.asarray(v.data).tobytes())
                  for i, v in present if i != big)
    return derived(value.data, ("fold", node.op_type, node.domain, opset, attrs, big, small), run)


def _plain(attrs: dict) -> tuple | None:
    """The attributes as a hashable key, or None where one is not a number, a string or a list
    of them (a tensor or a graph)."""
    items = []
    for name, value in sorted(attrs.items()):
        if isinstance(value, (list, tuple)) and all(isinstance(x, (int, float, str, bytes)) for x in value):
            value = tuple(value)
        elif not isinstance(value, (int, float, str, bytes)):
            return None
        items.append((name, value))
    return tuple(items)


def _set_constant(v, data: np.ndarray) -> None:
    # copied only where not C-contiguous (ascontiguousarray would make a 0-d array 1-d)
    v.data = np.array(data, order="C", copy=None)
    v.dtype, v.shape = v.data.dtype, tuple(v.data.shape)
