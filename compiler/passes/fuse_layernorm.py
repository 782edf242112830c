"""Layer normalization as one kernel: recognise the op chains older exporters write for it
(torch.onnx before opset 17, TF/keras converters) and fold a residual Add into the normalization.

The chain, over the trailing dims of x (the reduced axes), with eps a constant scalar:

    m = ReduceMean(x)            d = Sub(x, m)           (once, or once per use)
    q = Pow(d, 2) | Mul(d, d)    v = ReduceMean(q)       s = Sqrt(Add(v, eps))
    n = Div(d, s) | Mul(d, Reciprocal(s)) | Mul(d, Div(1, s))
    y = n [* scale] [+ bias]     (scale, bias constants broadcastable to the normalized dims)

becomes one vkc.LayerNorm node (lower/layernorm.py); nothing but the chain may read its
intermediates. Without the centering (d = x: q = x^2, n = x / s) it is RMS normalization, as T5
and LLaMA exports write it, and fuses the same way.

Not recognised, on purpose (each stays the unfused reduce/elementwise kernels, which compute the
same): axes other than the trailing dims, keepdims 0, eps added after the Sqrt (a different
function), the variance as E[x^2] - E[x]^2, x * rsqrt - mean * rsqrt (keras' batch-norm form),
non-constant or non-scalar eps, dtypes other than float32. A scale or bias that is not a
constant broadcastable to the normalized dims (per-row, broadcasting x up, computed) stays an
elementwise kernel after the fused normalization.

Then LN(a + b) -> one kernel reading a and b (b may repeat over a's leading dims, as a position
table does). Where the sum has other readers (the residual stream of BERT and GPT-2 blocks feeds
the next block too), the kernel also writes the sum out, like com.microsoft
SkipLayerNormalization's input_skip_bias_sum, so no Add kernel runs. Except in a decode step:
where a term of the sum is a product of at most GEMV_ROWS rows that the Add alone reads (the
attention output or down projection), the Add stays for the product's store to take
(fuse_epilogues), and the normalization, reading the sum alone, for the next products to compute
as they read it (normalized_products): two dispatches fewer than the sum and the norm in one.
onnxruntime's SkipSimplifiedLayerNormalization (the model builder's) splits the same way there.
"""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Node, Value, is_onnx
from ..registry import fact
from .normalized_products import few_rows


def fuse_layernorm(graph: Graph) -> Graph:
    for node in list(graph.nodes):
        if node in graph.nodes and is_onnx(node, "ReduceMean"):  # the variance
            _fuse_chain(graph, node)
    for node in list(graph.nodes):
        if is_onnx(node, "vkc.LayerNorm", "LayerNormalization"):
            _fold_residual(graph, node)
    for node in graph.nodes:  # com.microsoft ops have no ONNX shape inference
        output_types = fact(node, "output_types")
        if output_types is not None:
            output_types(node)
    for node in list(graph.nodes):
        skip_norm = fact(node, "skip_rms_norm")
        parts = skip_norm(node) if skip_norm else None
        if parts is not None and any(_few_rows_product(graph, t, node) for t in parts[:2]):
            _split_residual(graph, node, *parts)
    return graph


def _scalar(v: Value | None) -> float | None:
    """The value of a constant one-element tensor, else None."""
    return float(v.data.reshape(-1)[0]) if v is not None and v.is_constant and v.size == 1 else None


def _other(node: Node, v: Value) -> Value | None:
    """The operand of binary `node` that is not v (None unless v is one of them)."""
    a, b = node.inputs[0], node.inputs[1]
    return b if a is v else a if b is v else None


def _reduced_axes(node: Node, graph: Graph) -> list[int] | None:
    """The axes ReduceMean `node` reduces (sorted, non-negative), None when unknown or when it
    drops them (keepdims 0) or is a no-op."""
    if node.attrs.get("keepdims", 1) != 1:
        return None
    rank = len(node.inputs[0].shape)
    if "axes" in node.attrs:  # before opset 18
        axes = node.attrs["axes"]
    elif len(node.inputs) > 1 and node.inputs[1] is not None:
        if not node.inputs[1].is_constant:
            return None
        axes = node.inputs[1].data.reshape(-1).tolist()
    else:
        axes = []
    if not axes:
        if node.attrs.get("noop_with_empty_axes", 0):
            return None
        axes = range(rank)
    return sorted({int(a) % rank for a in axes})


def _single_consumer(v: Value, op: str) -> Node | None:
    """The one node reading v, when it is an `op` (the chain's next step)."""
    return v.consumers[0] if len(v.consumers) == 1 and is_onnx(v.consumers[0], op) else None


def _internal(graph: Graph, v: Value, chain: list[Node]) -> bool:
    """Whether only the chain reads v: no other node, no view read elsewhere, no graph output."""
    return not any(graph.is_output(other) or any(c not in chain for c in other.consumers)
                   for other in graph.family(v) if other is v or other.root() is v)


def _affine_operand(v: Value | None, x: Value, axis: int) -> Value | None:
    """A constant scale or bias broadcastable to x's normalized dims [axis, rank) without
    broadcasting x up, reshaped to those dims (what the kernel indexes); else None."""
    rank = len(x.shape)
    if v is None or not v.is_constant or len(v.shape) > rank:
        return None
    shape = (1,) * (rank - len(v.shape)) + tuple(v.shape)
    if any(s != 1 for s in shape[:axis]) or any(
            s not in (1, n) for s, n in zip(shape[axis:], x.shape[axis:])):
        return None
    if tuple(v.shape) == tuple(shape[axis:]):
        return v
    data = np.ascontiguousarray(v.data.reshape(shape[axis:]))
    return Value(f"{v.name}/vkc_rows", data.dtype, tuple(data.shape), data=data)


def _centering(graph: Graph, d: Value, axes: list[int]):
    """When d = Sub(x, ReduceMean(x)) over `axes`: (x, the mean and Sub nodes, every x - mean);
    else None."""
    sub = d.producer
    if not is_onnx(sub, "Sub") or not is_onnx(sub.inputs[1].producer, "ReduceMean"):
        return None
    x, m = sub.inputs[0], sub.inputs[1].producer
    if m.inputs[0] is not x or _reduced_axes(m, graph) != axes:
        return None
    subs = m.outputs[0].consumers
    if not all(is_onnx(s, "Sub") and s.inputs == [x, m.outputs[0]] for s in subs):
        return None
    return x, [m, *subs], [s.outputs[0] for s in subs]


def _fuse_chain(graph: Graph, var_node: Node) -> None:
    """Match the chain around its variance, ReduceMean(q) with q the square, centred (x - mean:
    LayerNorm) or not (RMS normalization, as T5 and LLaMA exports write it)."""
    sq = var_node.inputs[0].producer
    if is_onnx(sq, "Pow") and _scalar(sq.inputs[1]) == 2.0:
        squared = [sq.inputs[0]]
    elif is_onnx(sq, "Mul"):
        squared = list(sq.inputs)
    else:
        return
    d = squared[0]
    if d.shape is None or np.dtype(d.dtype) != np.float32:
        return
    axes = _reduced_axes(var_node, graph)
    rank = len(d.shape)
    if axes is None or axes != list(range(rank - len(axes), rank)):
        return  # only trailing dims are rows of contiguous elements
    centering = _centering(graph, d, axes)
    if centering is not None:
        x, head, diffs = centering
    else:
        x, head, diffs = d, [], [d]
    if not all(v in diffs for v in squared):
        return
    add_eps = _single_consumer(var_node.outputs[0], "Add")
    eps = _scalar(_other(add_eps, var_node.outputs[0])) if add_eps else None
    sqrt = _single_consumer(add_eps.outputs[0], "Sqrt") if eps is not None else None
    if sqrt is None:
        return
    std = sqrt.outputs[0]
    # The normalization: Div(d, std), or Mul(d, 1 / std) in either order with 1 / std as
    # Reciprocal(std) or Div(1, std) (torch's rsqrt, as the TorchScript exporter writes it).
    recip = _single_consumer(std, "Reciprocal")
    one_over = _single_consumer(std, "Div")
    if recip is None and one_over is not None and one_over.inputs[1] is std \
            and _scalar(one_over.inputs[0]) == 1.0:
        recip = one_over
    if recip is not None:
        inv = recip.outputs[0]
        norm = _single_consumer(inv, "Mul")
        if norm is None or _other(norm, inv) not in diffs:
            return
    else:
        norm = _single_consumer(std, "Div")
        if norm is None or norm.inputs[1] is not std or norm.inputs[0] not in diffs:
            return
    chain = [*head, sq, var_node, add_eps, sqrt, *([recip] if recip else []), norm]
    if not all(_internal(graph, v, chain) for n in chain[:-1] for v in n.outputs):
        return

    axis = rank - len(axes)
    # The scale, then the bias, where the chain goes on with them.
    scale, y = _affine_step(graph, chain, norm.outputs[0], "Mul", x, axis)
    bias, y = _affine_step(graph, chain, y, "Add", x, axis)
    if tuple(y.shape) != tuple(x.shape):
        return
    first = chain[0]
    if scale is None:  # the kernel always scales
        data = np.ones(x.shape[axis:], np.float32)
        scale = Value(f"{first.name}/vkc_unit_scale", data.dtype, data.shape, data=data)

    fused = Node("vkc.LayerNorm", f"{first.name}/vkc_layernorm", [x, None, scale, bias], [y],
                 {"axis": axis, "epsilon": eps, "outputs": ("Y",),
                  "simplified": int(centering is None)},
                 sources=[s for n in graph.nodes if n in chain for s in n.sources])
    graph.nodes[graph.nodes.index(first)] = fused  # x is ready there; y's readers come later
    for n in chain[1:]:
        graph.nodes.remove(n)
    graph.relink()


def _affine_step(graph: Graph, chain: list[Node], y: Value, op: str, x: Value, axis: int):
    """(operand, result) of an `op` by a constant affine operand that alone reads y, the node
    appended to the chain; (None, y) where there is none."""
    step = _single_consumer(y, op)
    if step is None or not _internal(graph, y, chain + [step]):
        return None, y
    operand = _affine_operand(_other(step, y), x, axis)
    if operand is None:
        return None, y
    chain.append(step)
    return operand, step.outputs[0]


def _fold_residual(graph: Graph, ln: Node) -> None:
    """LN(a + b), a of the sum's shape and b the same or repeated over a's leading dims ->
    one normalization reading a and b; it writes the sum too when something else reads it."""
    s = ln.inputs[0]
    add = s.producer
    if (not is_onnx(add, "Add") or s.alias_of is not None or np.dtype(s.dtype) != np.float32
            or (ln.op_type == "vkc.LayerNorm" and ln.inputs[1] is not None)):
        return
    a, b = add.inputs
    if any(_few_rows_product(graph, t, add) for t in (a, b)):
        return
    if tuple(b.shape) == tuple(s.shape) and tuple(a.shape) != tuple(s.shape):
        a, b = b, a
    if tuple(a.shape) != tuple(s.shape) or not _repeats_over_leading_dims(b, s):
        return
    # The normalization moves up to the Add: its other inputs must be ready there.
    order = {id(n): i for i, n in enumerate(graph.nodes)}
    if any(v is not None and order.get(id(v.producer), -1) > order[id(add)] for v in ln.inputs[1:]):
        return
    if ln.op_type == "LayerNormalization":
        if ln.attrs.get("stash_type", 1) != 1:
            return  # lower/layernorm.py names the problem on the unfused node
        roles = [(role, v) for role, v in zip(("Y", "MEAN", "INV_STD"), ln.outputs) if v.name]
        ln.op_type = "vkc.LayerNorm"
        ln.attrs = {"axis": ln.attrs.get("axis", -1) % len(s.shape),
                    "epsilon": ln.attrs.get("epsilon", 1e-5), "simplified": 0,
                    "outputs": tuple(role for role, _ in roles)}
        ln.inputs = [s, None, ln.input(1), ln.input(2)]
        ln.outputs = [v for _, v in roles]
    if not graph.used_only_by(s, ln):
        ln.outputs = ln.outputs + [s]
        ln.attrs["outputs"] = ln.attrs["outputs"] + ("SUM",)
    ln.inputs[0:2] = [a, b]
    ln.sources = add.sources + ln.sources
    graph.nodes.remove(ln)
    graph.nodes[graph.nodes.index(add)] = ln
    graph.relink()


def _split_residual(graph: Graph, node: Node, a: Value, b: Value, scale: Value, epsilon: float,
                    y: Value, total: Value | None) -> None:
    """A normalization of the residual sum a + b (onnxruntime's SkipSimplifiedLayerNormalization)
    as the Add, for the product's store to take, and the norm of the sum alone."""
    total = total or Value(f"{y.name}/residual_sum", a.dtype, tuple(a.shape))
    add = Node("Add", f"{node.name}/residual_sum", [a, b], [total], {}, "", node.sources)
    norm = Node("vkc.LayerNorm", node.name, [total, None, scale, None], [y],
                {"axis": len(a.shape) - 1, "epsilon": epsilon, "simplified": 1, "outputs": ("Y",)}, "",
                node.sources)
    at = graph.nodes.index(node)
    graph.nodes = graph.nodes[:at] + [add, norm] + graph.nodes[at + 1:]
    graph.relink()


def _few_rows_product(graph: Graph, t: Value, add: Node) -> bool:
    """Whether t is a product's result of at most GEMV_ROWS rows that `add` alone reads."""
    return (t.producer is not None and bool(fact(t.producer, "normalizes_rows")) and
            graph.sole_consumer(t) is add and few_rows(t))


def _repeats_over_leading_dims(b: Value, s: Value) -> bool:
    shape = list(b.shape)
    while len(shape) > 1 and shape[0] == 1:
        shape.pop(0)
    return list(s.shape[len(s.shape) - len(shape):]) == shape
