"""Attention chains as exporters write them become one vkc.Attention node (lower/attention.py):

    MatMul(Q, Kᵀ) -> [Mul|Div by a constant scalar] -> [soft-capping] -> [Add mask] -> [Add mask]
        -> Softmax(last axis) -> [Where(IsNaN(·), 0, ·)] -> MatMul(·, V)

with the scale also taken where it is applied to Q or Kᵀ before the first MatMul (PyTorch's
scaled_dot_product_attention export scales both by sqrt(scale), and guards the Softmax so that a
row that sees no key gives 0, not NaN). Soft-capping is c * tanh(s / c) of the scaled scores s
(Gemma-2's eager attention: Div by c, Tanh, Mul by c; attribute `softcap`). The scores may be
reshaped between the steps, and up to two additive terms each broadcast over them as strides: Swin's shifted windows add a relative
position bias [H, N, N] to the [B*nW, H, N, N] scores, view them as [B, nW, H, N, N], add the
window mask [nW, 1, N, N] and view them back; the kernel reads the bias at stride 0 over the
windows and the mask at stride 0 over the heads, every nW windows again (the same for every
image). Transposes feeding Q, Kᵀ or V (the [B, S, H, D] -> [B, H, S, D] of a projection, Kᵀ's
[B, H, D, S]) and those following the output (back to [B, S, H, D] before the Reshape to
[B, S, hidden]) become the kernel's strides instead of copy kernels, and so do the views,
Transposes, Splits and constant-index Gathers that split Q, K and V out of one packed projection
(GPT-2's and nn.MultiheadAttention's exports): the kernel reads them where the projection wrote
them, and those nodes go when nothing else reads them. An operand's batch or rows may be two
parts no one stride walks: Swin's windows where move_row_transposes left the window partition
after the qkv projection and its reverse before the output projection, a grid of windows of a
grid of tokens each, read and written in image order. Every intermediate of the chain (scores,
scaled scores, probabilities) must have no other reader; anything that does not fit leaves the
chain as it is. A constant mask that is causal, or causal within a sliding window of the last W
keys (Mistral's, Gemma-2's sliding layers), is the kernel's causal mode (attribute `window`): no
mask read.

Runs on ONNX nodes, after views (Reshapes are aliases) and before to_elementwise.
"""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Node, Value, is_onnx
from ..shapes import contiguous_strides
from .sink_row_selection import row_selection


def fuse_attention(graph: Graph) -> Graph:
    for softmax in [n for n in graph.nodes if is_onnx(n, "Softmax")]:
        if softmax in graph.nodes:
            match = _match(graph, softmax)
            if match is not None:
                _rewrite(graph, *match)
    return graph


def _scalar(v: Value | None) -> float | None:
    if v is None or not v.is_constant or v.data.size != 1 or v.data.dtype != np.float32:
        return None
    return float(v.data.reshape(-1)[0])


def _scale_of(graph: Graph, node: Node, chain: Value) -> float | None:
    """The factor a Mul or Div node applies to `chain` (its other operand a constant scalar that
    does not broadcast the result), else None."""
    if not is_onnx(node, "Mul", "Div") or node.outputs[0].shape != chain.shape:
        return None
    if node.op_type == "Div":
        c = _scalar(node.inputs[1]) if node.inputs[0] is chain else None
        return None if not c else 1.0 / c
    other = node.inputs[1] if node.inputs[0] is chain else node.inputs[0]
    return _scalar(other) if other is not chain else None


def scaling_factor(graph: Graph, node: Node) -> float | None:
    """The factor of a Mul or Div of one variable tensor by a constant scalar (a scale the kernel
    takes over), else None."""
    chain = _variable_operand(node)
    return _scale_of(graph, node, chain) if chain is not None else None


def _unscale(graph: Graph, v: Value, consumer: Node, removed: list[Node]):
    """Look through a Mul/Div by a constant scalar producing `v` for `consumer` alone: the
    unscaled tensor and the factor."""
    prod = v.producer
    if prod is not None and graph.sole_consumer(v) is consumer:
        chain = _variable_operand(prod)
        factor = _scale_of(graph, prod, chain) if chain is not None else None
        if factor is not None:
            removed.append(prod)
            return chain, factor
    return v, 1.0


def _variable_operand(node: Node) -> Value | None:
    return next((x for x in node.inputs if x is not None and not x.is_constant), None)


# Steps between Q·Kᵀ and the Softmax: a scale, two masks, a reshape around each.
CHAIN_STEPS = 8
# Additive terms the kernel reads (mask and bias).
MAX_ADDENDS = 2


def _read_by(graph: Graph, v: Value, reader: Node) -> bool:
    """Whether `reader` alone reads v's bytes, as v or through one reshape of all of them."""
    read = graph.sole_reader(v)
    return read is not None and read[0] is reader


def _leads_to_scores(graph: Graph, v: Value, reader: Node, steps: int = CHAIN_STEPS) -> bool:
    """Whether v is Q·Kᵀ, possibly scaled, masked and reshaped, read by `reader` alone: which
    operand of a mask's Add is the chain."""
    for _ in range(steps):
        if v.alias_of is not None:  # a reshape: _read_by checks its root is read through it alone
            v = v.alias_of
            continue
        if v.producer is None or not _read_by(graph, v, reader):
            return False
        node = v.producer
        if is_onnx(node, "MatMul"):
            return True
        if is_onnx(node, "Tanh"):   # soft-capping
            v, reader = node.inputs[0], node
            continue
        if is_onnx(node, "Add"):
            return any(x is not None and not x.is_constant and _leads_to_scores(graph, x, node, steps - 1)
                       for x in node.inputs)
        chain = _variable_operand(node)
        if chain is None or _scale_of(graph, node, chain) is None:
            return False
        v, reader = chain, node
    return False


# An operand's layout in the tensor bound for it: per dim, its (size, stride) parts, outer first.
# A dim has one part unless a Reshape merged dims that are not contiguous in each other: batch 8's
# nn.MultiheadAttention views Q, every third E-block of its [S, B, 3E] projection, as [S, B*H, D],
# whose B*H is then the parts (B, 3E) and (H, D). The kernel's (batch, head) take such parts.
Dims = list  # [[(size, stride), ...] per dim]


def _contiguous(shape) -> Dims:
    return [[(n, st)] for n, st in zip(shape, contiguous_strides(shape))]


def _strides(dims: Dims) -> list[int] | None:
    """One stride per dim (0 for size 1), or None where a dim has several parts."""
    parts = [[p for p in d if p[0] != 1] for d in dims]
    return None if any(len(d) > 1 for d in parts) else [d[0][1] if d else 0 for d in parts]


def _digits_offset(parts, index: int) -> int:
    """The element offset of `index` along a dim made of `parts` (mixed radix, outer first)."""
    offset = 0
    for size, stride in reversed(parts):
        offset += (index % size) * stride
        index //= size
    return offset


def _layout(graph: Graph, v: Value, walked: list[Node]) -> tuple[Value, int, Dims]:
    """The tensor to bind for `v`, the element offset of v's first element in it and v's dims:
    through the views (Reshape, Squeeze, Unsqueeze), Transposes, Splits, Slices of one axis and
    Gathers of one constant index that produce v, v is read in place from the tensor they start
    from (GPT-2's export Splits Q, K and V out of one projection, and nn.MultiheadAttention's
    Gathers them).
    The nodes passed through are added to `walked`."""
    inner: list[Node] = []
    node = v.producer
    if v.alias_of is not None:
        bound, offset, dims = _layout(graph, v.alias_of, inner)
        dims = _reshape_dims(dims, v.shape)
        node = None
    elif is_onnx(node, "Transpose"):
        bound, offset, dims = _layout(graph, node.inputs[0], inner)
        perm = node.attrs.get("perm", range(len(v.shape) - 1, -1, -1))
        dims = [dims[p] for p in perm]
    elif is_onnx(node, "Split"):
        axis = node.attrs.get("axis", 0) % len(v.shape)
        start = sum(o.shape[axis] for o in node.outputs[:node.outputs.index(v)])
        bound, offset, dims = _part(graph, node.inputs[0], inner, axis, start, v.shape[axis])
    elif is_onnx(node, "Slice") and (picked := row_selection(graph, node)) is not None:
        # rows of one axis (a query's rows that sink_row_selection left on the projection)
        rows = picked[1]
        bound, offset, dims = _part(graph, node.inputs[0], inner, rows.axis, rows.start,
                                    v.shape[rows.axis])
    elif is_onnx(node, "Expand"):
        # a broadcast dim is read at stride 0 (GQA's repeat_kv expands each K/V head n_rep times)
        x = node.inputs[0]
        bound, offset, dims = _layout(graph, x, inner)
        dims = [[(1, 0)]] * (len(v.shape) - len(x.shape)) + dims
        dims = [[(n, 0)] if n != 1 and all(p[0] == 1 for p in d) else d for n, d in zip(v.shape, dims)]
    elif is_onnx(node, "Gather") and node.inputs[1].is_constant and node.inputs[1].data.ndim == 0:
        data = node.inputs[0]
        axis = node.attrs.get("axis", 0) % len(data.shape)
        bound, offset, dims = _layout(graph, data, inner)
        offset += _digits_offset(dims[axis], int(node.inputs[1].data) % data.shape[axis])
        dims = dims[:axis] + dims[axis + 1:]
    else:
        dims = None
    if dims is None:
        return v, 0, _contiguous(v.shape)
    walked += inner + ([node] if node is not None else [])
    return bound, offset, dims


def _part(graph: Graph, x: Value, walked: list[Node], axis: int, start: int, length: int):
    """_layout of x cut to [start, start + length) of `axis` (a Split's part, a Slice), with no
    dims where that dim has several parts."""
    bound, offset, dims = _layout(graph, x, walked)
    stride = _strides(dims[axis:axis + 1])
    if stride is None:  # a slice of a many-part dim
        return bound, offset, None
    return bound, offset + start * stride[0], dims[:axis] + [[(length, stride[0])]] + dims[axis + 1:]


def _reshape_dims(dims: Dims, new_shape) -> Dims | None:
    """`dims` regrouped as `new_shape` (the same elements in the same order), when every new dim
    is whole parts or an exact factor of one; parts contiguous in each other merge first."""
    merged: list[tuple[int, int]] = []
    for n, st in (p for d in dims for p in d if p[0] != 1):
        if merged and merged[-1][1] == n * st:
            merged[-1] = (merged[-1][0] * n, st)
        else:
            merged.append((n, st))
    out, i = [], 0
    for want in new_shape:
        dim = []
        while want > 1:
            if i == len(merged):
                return None
            n, st = merged[i]
            if n <= want:
                if want % n:
                    return None
                dim.append((n, st))
                want //= n
                i += 1
            else:
                if n % want:
                    return None
                dim.append((want, st * (n // want)))
                merged[i] = (n // want, st)
                want = 1
        out.append(dim or [(1, 0)])
    return out if i == len(merged) else None


def _removable(graph: Graph, walked: list[Node], removed: list[Node]) -> list[Node]:
    """The walked layout nodes whose outputs nothing reads but the fused chain (the others
    stay: the kernel reads past them all the same)."""
    keep = {id(n) for n in walked}
    gone = {id(n) for n in removed}
    changed = True
    while changed:
        changed = False
        for n in walked:
            if id(n) in keep and not all(_read_only_by(graph, o, keep | gone)
                                         for o in n.outputs if o is not None):
                keep.discard(id(n))
                changed = True
    unique = {id(n): n for n in walked if id(n) in keep}
    return list(unique.values())


def _read_only_by(graph: Graph, v: Value, nodes: set[int]) -> bool:
    for other in graph.family(v):
        if graph.is_output(other) or any(id(c) not in nodes for c in other.consumers):
            return False
    return True


def _four_d(shape, dims: Dims, batch) -> Dims | None:
    """The dims (batch, head, row, col) of an operand of rank 2..4 whose leading dims are
    `batch` (B, H) regrouped, or broadcast to it: stride 0 on broadcast and size-1 dims."""
    lead = list(shape[:-2])
    if len(lead) > 2:
        return None
    if int(np.prod(lead)) == batch[0] * batch[1]:
        return _reshape_dims(dims, list(batch) + list(shape[-2:]))
    strides = _strides(dims)
    if strides is None:
        return None
    lead, lead_strides = [1] * (2 - len(lead)) + lead, [0] * (2 - len(lead)) + strides[:-2]
    out = []
    for n, st, want in zip(lead, lead_strides, batch):
        if n not in (1, want):
            return None
        out.append([(want, st if n == want and n != 1 else 0)])
    return out + [[(n, st)] for n, st in zip(shape[-2:], strides[-2:])]


def _kv_heads(shape, dims: Dims, batch) -> tuple[int, Dims | None]:
    """(group, dims (batch, K/V head, row, col)) of a K or V whose heads repeat each K/V head
    `group` times at stride 0 (GQA's repeat_kv: Expand, then a Reshape merging the copies into
    the heads); (1, None) otherwise."""
    if len(shape) != 4 or shape[0] * shape[1] != batch[0] * batch[1]:
        return 1, None
    four = _reshape_dims(dims, list(batch) + list(shape[-2:]))
    heads = [p for p in four[1] if p[0] != 1] if four is not None else []
    if len(heads) != 2 or heads[1][1] != 0 or heads[0][1] == 0:
        return 1, None
    return heads[1][0], [four[0], [heads[0]], *four[2:]]


def _read(four: Dims) -> tuple[list[int], dict] | None:
    """(strides over (batch, head, row, col), parts) of an operand's four dims. The batch and
    the rows may each be two parts, outer and inner, that no one stride walks (Swin's windows: a
    grid of windows of a grid of tokens each; a mask the same for every image of a batch of
    windows): parts {"batch" or "row": (inner size, outer stride)}, the dim's stride the inner
    part's, so that index i is at (i / inner) * outer stride + (i % inner) * stride. None where
    a dim is more parts than that."""
    strides, parts = [], {}
    for i, dim in enumerate(four):
        runs = [p for p in dim if p[0] != 1]
        if len(runs) == 2 and i in (0, 2):
            parts["batch" if i == 0 else "row"] = (runs[1][0], runs[0][1])
            runs = runs[1:]
        if len(runs) > 1:
            return None
        strides.append(runs[0][1] if runs else 0)
    return strides, parts


def _operand(shape, dims: Dims, batch, name: str) -> tuple[int, list[int], dict] | None:
    """(K/V group, strides, parts) of Q, Kᵀ or V over the kernel's (batch, head, row, col)."""
    for group, four in [(1, _four_d(shape, dims, batch))] + ([_kv_heads(shape, dims, batch)] if name != "q" else []):
        if four is not None and name == "k":  # Kᵀ's rows are D, its columns keys: the kernel walks (key, d)
            four = four[:2] + [four[3], four[2]]
        read = None if four is None else _read(four)
        if read is not None:
            return group, *read
    return None


def _head_split(found: dict, batch) -> list[int]:
    """(B, H) for a rank-3 chain whose [B*H, ..] operand merged two dims it cannot read as one
    stride (batch 8's nn.MultiheadAttention); else `batch` as it is."""
    if batch[0] == 1:
        for _, _, dims, _ in found.values():
            parts = [p for p in dims[0] if p[0] != 1] if len(dims) == 3 else []
            if len(parts) == 2 and parts[0][0] * parts[1][0] == batch[1]:
                return [parts[0][0], parts[1][0]]
    return batch


# Masked-out scores of a constant causal mask: -inf, or at most half of float32's lowest (the
# finfo.min exporters write), so exp(score + mask - max) is 0, exactly what the kernel's
# causal mode gives without reading a mask.
CAUSAL_MASKED = float(np.finfo(np.float32).min) / 2


def causal_window(plane: np.ndarray) -> int | None:
    """For a mask plane [SQ, SK] (SK >= SQ): 0 where the kernel's bottom-right causal rule sees
    key k from query q (k <= q + SK - SQ), masked elsewhere, gives SK (no window); the same but
    also masked at k <= q + SK - SQ - W (a sliding window of W keys, as transformers' sliding
    attention: query position p sees keys p - W + 1 .. p) gives W < SK. None otherwise. Every
    row keeps at least one key, so no row turns from a uniform average to NaN."""
    sq, sk = plane.shape
    if sk < sq:
        return None
    window = int((plane[-1] == 0).sum())
    if window == 0:
        return None
    shift = sk - sq
    keep = np.tril(np.ones((sq, sk), bool), k=shift) & ~np.tril(np.ones((sq, sk), bool), k=shift - window)
    if not ((plane[keep] == 0).all() and (plane[~keep] <= CAUSAL_MASKED).all()):
        return None
    return window


def _causal(mask: Value, sq: int, sk: int) -> int | None:
    """A constant mask, the same for every batch and head, that the kernel's causal mode (with a
    window where it has one: causal_window) gives without reading it, also skipping the key
    blocks it masks whole: its window, SK where none; None if it is no such mask."""
    if not mask.is_constant or mask.size != sq * sk:
        return None
    return causal_window(np.asarray(mask.data).reshape(sq, sk))


def _addend_read(term: Value, at, full) -> tuple[list[int], dict] | None:
    """(strides over (batch, head, query, key), parts: _read's) of an additive term broadcast to
    scores of shape `at`, a regrouping of `full` [B, H, SQ, SK]: stride 0 where it broadcasts.
    A term the same for every image of a batch of windows (Swin's window mask [nW, N, N], added
    to the scores viewed as [images, nW, H, N, N]) repeats every nW batches: its batch is the
    parts (images, stride 0) and (nW, N * N). None where the kernel cannot read it so."""
    if len(term.shape) > len(at):
        return None
    shape = [1] * (len(at) - len(term.shape)) + list(term.shape)
    if any(n not in (1, a) for n, a in zip(shape, at)):
        return None
    dims = [[(a, st if n != 1 else 0)] for a, n, st in zip(at, shape, contiguous_strides(shape))]
    four = _reshape_dims(dims, full)
    return None if four is None else _read(four)


def _written(graph: Graph, v: Value, most: int) -> tuple[Value, Dims, list[Node]]:
    """The value to write for v, v's dims in it and the Transposes passed: through a Transpose
    that alone reads v (itself or through a reshape of it), and so on after it up to `most` of
    them, the last one's output; v itself where none does."""
    read = None if graph.is_output(v) or not most else graph.sole_reader(v)
    if read is None or not is_onnx(read[0], "Transpose"):
        return v, _contiguous(v.shape), []
    t, r = read
    final, dims, passed = _written(graph, t.outputs[0], most - 1)
    perm = list(t.attrs.get("perm", range(len(r.shape) - 1, -1, -1)))
    dims = [dims[perm.index(i)] for i in range(len(r.shape))]
    if r is not v:
        dims = _reshape_dims(dims, v.shape)
        if dims is None:
            return v, _contiguous(v.shape), []
    return final, dims, [t] + passed


def _nan_guard(graph: Graph, probs: Value) -> list[Node] | None:
    """[IsNaN, Where] of `Where(IsNaN(P), 0, P)` on the probabilities P, when those two nodes
    are P's only readers: the guard the TorchScript export of scaled_dot_product_attention writes
    after its Softmax, so that a row that sees no key gives 0, not NaN: the kernel's
    empty_rows_zero. A row with a NaN or +inf score stays NaN in the kernel, where the guard
    would zero it: an upstream fault shows instead of hiding."""
    if len(probs.consumers) != 2 or probs.alias_of is not None or graph.is_output(probs):
        return None
    isnan = next((n for n in probs.consumers if is_onnx(n, "IsNaN")), None)
    where = next((n for n in probs.consumers if is_onnx(n, "Where")), None)
    if isnan is None or where is None or not graph.used_only_by(probs, isnan, where):
        return None
    flags, zero, kept = where.inputs
    if flags is not isnan.outputs[0] or kept is not probs or graph.sole_consumer(flags) is not where \
            or not zero.is_constant or zero.data.size != 1 or float(zero.data.reshape(-1)[0]) != 0.0 \
            or where.outputs[0].shape != probs.shape or graph.is_output(where.outputs[0]):
        return None
    return [isnan, where]


def _match(graph: Graph, softmax: Node):
    removed = [softmax]
    probs = softmax.outputs[0]
    rank = len(probs.shape)
    axis = softmax.attrs.get("axis", -1 if graph.opset >= 13 else 1)
    # Before opset 13 Softmax flattens from `axis` on: the same as the last axis only there.
    if not 2 <= rank <= 4 or axis % rank != rank - 1:
        return None
    guard = _nan_guard(graph, probs)
    if guard is not None:
        removed += guard
        probs = guard[-1].outputs[0]
    pv = graph.sole_consumer(probs)
    if not is_onnx(pv, "MatMul") or pv.inputs[0] is not probs:
        return None

    # Back from the softmax: additive masks, a scale, Q·Kᵀ, in the orders exporters write, the
    # scores reshaped between them. `addends`: each mask and the shape of the scores it is added to.
    # A Tanh between two scales is soft-capping (Gemma-2's scores: c * tanh(s / c)), before the masks.
    x, reader, scale, addends, qk, softcap = softmax.inputs[0], softmax, 1.0, [], None, 0.0
    for _ in range(CHAIN_STEPS):
        if x.alias_of is not None:  # a reshape: _read_by checks its root is read through it alone
            x = x.alias_of
            continue
        node = x.producer
        if node is None or not _read_by(graph, x, reader):
            return None
        if is_onnx(node, "MatMul"):
            qk = node
            break
        if is_onnx(node, "Tanh"):
            if softcap or scale <= 0.0:   # a second Tanh; no cap (c) multiplying it
                return None
            softcap, scale, chain = scale, 1.0, node.inputs[0]
        elif is_onnx(node, "Add"):
            # a third mask; a mask the scale multiplies; a mask inside the soft-capping
            if len(addends) == MAX_ADDENDS or scale != 1.0 or softcap:
                return None
            a, b = node.inputs
            chain, term = (a, b) if _leads_to_scores(graph, a, node) else (b, a)
            if chain.shape != x.shape or np.dtype(term.dtype) != np.float32:
                return None
            addends.append((term, x.shape))
        else:
            chain = _variable_operand(node)
            factor = _scale_of(graph, node, chain) if chain is not None else None
            if factor is None or (scale != 1.0 and not softcap):
                return None
            scale *= factor
        removed.append(node)
        x, reader = chain, node
    if qk is None:
        return None
    removed.append(qk)
    q, kt = qk.inputs
    q, q_scale = _unscale(graph, q, qk, removed)
    kt, k_scale = _unscale(graph, kt, qk, removed)
    scale *= q_scale * k_scale * (softcap or 1.0)   # the kernel's score s: c * tanh(s / c)
    v = pv.inputs[1]
    if any(len(t.shape) != rank for t in (q, kt)) or not 2 <= len(v.shape) <= 4:
        return None

    out = pv.outputs[0]
    *batch, sq, dv = [1] * (4 - rank) + list(out.shape)
    d, sk = kt.shape[-2], kt.shape[-1]
    if q.shape[-1] != d or v.shape[-2] != sk or v.shape[-1] != dv or q.shape[-2] != sq:
        return None
    operands = {"q": q, "k": kt, "v": v}
    found = {}
    for name, t in operands.items():
        found[name] = _layout(graph, t, walked := []) + (walked,)
    batch = _head_split(found, batch) if not addends else batch
    layouts, walked, groups, parts = {}, [], {}, {}
    for name, t in operands.items():
        bound, offset, dims, passed = found[name]
        read = _operand(t.shape, dims, batch, name)
        if read is None:  # read it as it is, a copy where its producers leave it strided
            bound, offset, passed = t, 0, []
            read = _operand(t.shape, _contiguous(t.shape), batch, name)
            if read is None:
                return None
        groups[name], strides, parts[name] = read
        layouts[name] = (bound, offset, strides)
        walked += passed
    kv_group = groups["k"]
    if groups["v"] != kv_group:
        return None
    causal, window = False, None
    if len(addends) == 1 and (seen := _causal(addends[0][0], sq, sk)) is not None:
        causal, addends, window = True, [], seen if seen < sk else None
    for name, (term, at) in zip(("mask", "bias"), addends):
        read = _addend_read(term, at, batch + [sq, sk])
        if read is None:
            return None
        layouts[name] = (term, 0, read[0])
        parts[name] = read[1]
    mask, bias = (layouts[n][0] if n in layouts else None for n in ("mask", "bias"))

    # Transposes after the output (to [B, S, H, DV], or [S, B*H, DV]; and then Swin's windows back
    # in place, [B, nW, ws, ws, C] -> [B, H, W, C]) are written in place: all of them, else the
    # first, where the kernel can write them.
    for most in (len(graph.nodes), 1, 0) if rank >= 3 else (0,):
        final, out_dims, passed = _written(graph, out, most)
        four = _four_d(out.shape, out_dims, batch)
        written = None if four is None else _read(four)
        if written is not None:
            break
    if written is None:
        return None
    out = final
    removed += passed
    parts["out"] = written[1]
    removed.append(pv)
    removed += _removable(graph, walked, removed)
    attrs = dict(dims=[*batch, sq, sk, d, dv], scale=scale, causal=causal,
                 mask_kind="none" if mask is None else "add", mask_filter=0.0,
                 empty_rows_zero=guard is not None, kv_group=kv_group,
                 layouts={name: (offset, strides) for name, (_, offset, strides)
                          in layouts.items()})
    attrs["layouts"]["out"] = (0, written[0])
    if softcap:
        attrs["softcap"] = softcap
    if window is not None:
        attrs["window"] = window
    if any(parts.values()):
        attrs["parts"] = {name: p for name, p in parts.items() if p}
    inputs = [layouts[n][0] for n in ("q", "k", "v")] + [mask] + ([None, bias] if bias is not None else [])
    return removed, pv, inputs, out, attrs


def _rewrite(graph: Graph, removed: list[Node], anchor: Node, inputs, out: Value, attrs) -> None:
    order = {id(n): i for i, n in enumerate(graph.nodes)}
    sources = [s for n in sorted(removed, key=lambda n: order[id(n)]) for s in n.sources]
    node = Node("vkc.Attention", anchor.name, inputs, [out], attrs, sources=sources)
    at = graph.nodes.index(anchor)
    graph.nodes[at] = node
    gone = {id(n) for n in removed if n is not anchor}
    graph.nodes = [n for n in graph.nodes if id(n) not in gone]
    graph.relink()
