"""ONNX's own Attention (opset 23, 24's nonpad_kv_seqlen, 25's windows) becomes vkc.Attention.

Q, K and V are read where they lie: 4-D [B, heads, S, head size] or 3-D [B, S, heads * head
size] (q_num_heads / kv_num_heads), as strides. Grouped-query attention (fewer K/V heads than
query heads) is the kernel's kv_group. The two cache forms:
- past_key / past_value (an internal cache): present = Concat(past, new) on the sequence axis, a
  Concat node here (the concat pass writes the new rows in place), and attention over present;
- nonpad_kv_seqlen (an external, static cache, written by TensorScatter): attention over the
  first nonpad_kv_seqlen[b] keys of K and V, read at run time, so one compiled graph serves every
  length up to the cache's size.
is_causal is aligned as the ONNX reference aligns it: a query row i sees keys up to i + past
length (internal cache), i + nonpad_kv_seqlen[b] - q length (external cache), or i (no cache).
A row that sees no key gives 0, as the reference's. Opset 25's sliding window, aligned alike,
is the kernel's: left_window_size L keeps the query's key and the L before it; with
right_window_size 0 the attention is causal.

attn_mask: a float mask is added to the scores; a bool mask hides the keys where it is false.
Both broadcast to [B, heads, q length, keys] by strides; a mask shorter than the keys hides
the keys past it. softcap is applied to the scores before the mask.

Refused, naming the node: windows reaching keys after the query (right_window_size above 0
without is_causal), a window without a cache over K longer than Q, causal attention over a
cache whose new K/V rows are not as many as Q's, and the qk_matmul_output output.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import CompileError
from ..ir import Graph, Node, Value, expand_nodes, is_onnx
from ..registry import declare


def _output_shape(shapes: list, attrs: dict) -> tuple | None:
    """Y: Q's shape with V's head size."""
    q, v = shapes[0], shapes[2] if len(shapes) > 2 else None
    if q is None or v is None:
        return None
    if len(q) == 4:
        return (*q[:3], v[3])
    return (*q[:2], v[2] // attrs["kv_num_heads"] * attrs["q_num_heads"]) \
        if "kv_num_heads" in attrs and "q_num_heads" in attrs else None


declare("Attention", handled_by="vkc.Attention", module=__name__, schema=25, float16=True,
        output_shape=_output_shape,
        dtypes_doc="float32, float16; attn_mask bool or Q's type; nonpad_kv_seqlen int64",
        limits="windows reaching keys after the query, or aligned at the first key (no cache, K longer "
               "than Q); causal attention over a cache with new K/V rows not as many as Q's; the "
               "qk_matmul_output output")


def expand_onnx_attention(graph: Graph) -> Graph:
    counts: dict[int, Value] = {}   # id(nonpad_kv_seqlen) -> its int32 key counts, cast once for every layer
    return expand_nodes(graph, lambda node: _attention(graph, node, counts) if is_onnx(node, "Attention") else None)


def _layout(shape, heads: int) -> tuple[int, int, tuple]:
    """(heads, head size, strides over (batch, head, row, column)) of a contiguous operand."""
    if len(shape) == 4:
        _, h, s, d = shape
        return h, d, (h * s * d, s * d, d, 1)
    _, s, hidden = shape
    if heads <= 0 or hidden % heads:
        raise ValueError(f"hidden size {hidden} does not split into {heads} heads")
    d = hidden // heads
    return heads, d, (s * hidden, d, hidden, 1)


def _mask_strides(node: Node, mask: Value, dims: tuple) -> tuple:
    """Strides of a mask broadcast (right-aligned) to [B, heads, q length, keys] (its key axis
    may be shorter: the keys past it are hidden)."""
    shape = tuple(mask.shape)
    if len(shape) < 1 or len(shape) > 4 or shape[-1] > dims[3]:
        raise CompileError(f"Attention '{node.name}': attn_mask '{mask.name}' is {list(shape)}; vkc "
                           f"takes a mask broadcasting to [batch, heads, q length, keys] = {list(dims)}.")
    dims = (*dims[:3], shape[-1])
    full = (1,) * (4 - len(shape)) + shape
    strides, step = [0] * 4, 1
    for axis in range(3, -1, -1):
        if full[axis] != 1:
            if full[axis] != dims[axis]:
                raise CompileError(f"Attention '{node.name}': attn_mask '{mask.name}' {list(shape)} "
                                   f"does not broadcast to {list(dims)}.")
            strides[axis] = step
        step *= full[axis]
    return tuple(strides)


def heads_first(node: Node, t: Value, heads: int, size: int, nodes: list) -> Value:
    """[B, S, heads * size] as [B, heads, S, size]: a Reshape and a Transpose appended to nodes."""
    b, s, _ = t.shape
    shape = Value(f"{t.name}/heads_shape", np.dtype(np.int64), (4,),
                  data=np.array([b, s, heads, size], np.int64))
    split = Value(f"{t.name}/heads", t.dtype, (b, s, heads, size))
    out = Value(f"{t.name}/heads_first", t.dtype, (b, heads, s, size))
    nodes += [Node("Reshape", f"{node.name}/{t.name}/heads", [t, shape], [split], sources=node.sources),
              Node("Transpose", f"{node.name}/{t.name}/heads_first", [split], [out], {"perm": [0, 2, 1, 3]},
                   sources=node.sources)]
    return out


def _attention(graph: Graph, node: Node, key_counts: dict[int, Value]) -> list[Node]:
    a = node.attrs
    name = node.name
    left, right = int(a.get("left_window_size", -1)), int(a.get("right_window_size", -1))
    # A window of no keys after the query's own position is causal attention (is_causal or not).
    causal = bool(a.get("is_causal", 0)) or right == 0
    if left >= 0 or right >= 0:
        if not causal:
            raise CompileError(f"Attention '{name}': a window reaching {right if right >= 0 else 'all the'} keys "
                               "after the query's position (right_window_size, without is_causal) is not "
                               "supported by vkc: its kernel's windows look back only. Give it as attn_mask.")
    if len(node.outputs) > 3 and (node.outputs[3].consumers or graph.is_output(node.outputs[3])):
        raise CompileError(f"Attention '{name}': the qk_matmul_output output is not supported by vkc; "
                           "export without it.")
    q, k, v = node.inputs[0], node.inputs[1], node.inputs[2]
    mask, past_k, past_v, lengths = (node.input(i) for i in (3, 4, 5, 6))
    b = q.shape[0]
    try:
        hq, d, q_strides = _layout(q.shape, int(a.get("q_num_heads", 0)))
        hk, dk, k_strides = _layout(k.shape, int(a.get("kv_num_heads", 0)))
        hv, dv, v_strides = _layout(v.shape, int(a.get("kv_num_heads", 0)))
    except ValueError as e:
        raise CompileError(f"Attention '{name}': {e}; set q_num_heads and kv_num_heads to the model's.") from None
    if dk != d or hk != hv or hq % hk:
        raise CompileError(f"Attention '{name}': Q {list(q.shape)}, K {list(k.shape)} and V {list(v.shape)} "
                           "do not agree (head sizes, or query heads a multiple of K/V heads).")
    sq = q.shape[2] if len(q.shape) == 4 else q.shape[1]
    new_keys = k.shape[2] if len(k.shape) == 4 else k.shape[1]
    if causal and past_k is not None and new_keys != sq:
        # The reference aligns row i with key i + past length; the kernel aligns the last row
        # with the last key, which is the same only where Q and the new K are equally long.
        raise CompileError(f"Attention '{name}': causal attention over a cache with {sq} queries but {new_keys} new "
                           "keys is not supported by vkc (its kernel aligns the last query with the last key); "
                           "give Q and K/V the same length, or the causal mask as attn_mask.")
    nodes = []
    if past_k is not None or past_v is not None:
        if past_k is None or past_v is None:
            raise CompileError(f"Attention '{name}': past_key and past_value go together.")
        if len(k.shape) == 3:  # the cache is 4-D: [B, S, heads * size] -> [B, heads, S, size] first
            k, v = (heads_first(node, t, hk, size, nodes) for t, size in ((k, dk), (v, dv)))
        presents = []
        for i, (past, new) in enumerate(((past_k, k), (past_v, v))):
            out = node.outputs[1 + i] if len(node.outputs) > 1 + i and node.outputs[1 + i].name else \
                Value(f"{name}/present_{'kv'[i]}", new.dtype, None)
            out.dtype = new.dtype
            out.shape = (*new.shape[:2], past.shape[2] + new.shape[2], new.shape[3])
            nodes.append(Node("Concat", f"{name}/present_{'kv'[i]}", [past, new], [out], {"axis": 2},
                              sources=node.sources))
            presents.append(out)
        k, v = presents
        _, _, k_strides = _layout(k.shape, hk)
        _, _, v_strides = _layout(v.shape, hk)
    sk = k.shape[2] if len(k.shape) == 4 else k.shape[1]
    # Causal attention is aligned at the cache's end (bottom right); without a cache at Q's
    # first key (top left), which is the same where Q and K are equally long.
    bottom_right = past_k is not None or lengths is not None or sk == sq
    if left >= 0 and not bottom_right:
        raise CompileError(f"Attention '{name}': a window of {left} keys back over {sk} keys for {sq} queries "
                           "without a cache (aligned at the first key) is not supported by vkc; give it as "
                           "attn_mask.")
    dims = (b, hq, sq, sk)
    mask_kind, mask_in, layouts = "none", None, {
        "q": (0, q_strides), "k": (0, k_strides), "v": (0, v_strides),
        "out": (0, (hq * sq * dv, sq * dv, dv, 1) if len(q.shape) == 4 else (sq * hq * dv, dv, hq * dv, 1))}
    if mask is not None:
        layouts["mask"] = (0, _mask_strides(node, mask, dims))
        if np.dtype(mask.dtype) == np.bool_:
            mask_in = Value(f"{name}/keep", np.dtype(np.int32), mask.shape)
            nodes.append(Node("Cast", f"{name}/keep", [mask], [mask_in], {"to": 6}, sources=node.sources))
            mask_kind = "keep"
        elif np.dtype(mask.dtype) == np.dtype(q.dtype):
            mask_in, mask_kind = mask, "add"
        else:
            raise CompileError(f"Attention '{name}': attn_mask '{mask.name}' is {np.dtype(mask.dtype).name}; "
                               f"vkc takes a bool mask or one of Q's type ({np.dtype(q.dtype).name}).")
    counts = None if lengths is None else key_counts.get(id(lengths))
    if lengths is not None and counts is None:
        counts = key_counts[id(lengths)] = Value(f"{name}/key_counts", np.dtype(np.int32), (b,))
        nodes.append(Node("Cast", f"{name}/key_counts", [lengths], [counts], {"to": 6}, sources=node.sources))
    y = node.outputs[0]
    y.dtype = q.dtype
    y.shape = (b, hq, sq, dv) if len(q.shape) == 4 else (b, sq, hq * dv)
    scale = a.get("scale")
    attrs = dict(dims=[b, hq, sq, sk, d, dv], scale=float(scale) if scale else 1.0 / math.sqrt(d),
                 causal=causal, mask_kind=mask_kind, mask_filter=0.0, layouts=layouts,
                 kv_group=hq // hk, key_limit=mask.shape[-1] if mask is not None else sk,
                 causal_align="bottom_right" if bottom_right else "top_left",
                 softcap=float(a.get("softcap", 0.0)), keep_to_inf=True, empty_rows_zero=True)
    if left >= 0:   # the query's own key and `left` before it
        attrs["window"] = left + 1
    nodes.append(Node("vkc.Attention", name, [q, k, v, mask_in, counts], [y], attrs, sources=node.sources))
    return nodes
