"""onnxruntime's com.microsoft GroupQueryAttention (what onnxruntime-genai's model builder writes
for every decoder layer) becomes ONNX's own cache form: the new K and V rows written into the
caches by TensorScatter at each batch's position, rotary embedding on Q and K where do_rotary, and
one vkc.Attention over the first seqlens_k + 1 cache rows (causal, grouped-query).

The cache form is the one where past_key and present_key share a buffer of the context's length
([B, kv heads, max sequence, head size]): present is past with the new rows written at
seqlens_k + 1 - S, so the two are bundle state (compiler/state.py; GroupQueryAttention declares
that update). seqlens_k (int32 [B]) is each batch's last position, read at run time; a constant
total_sequence_length must fit the cache.

Q, K and V come separate ([B, S, heads * head size]) or packed in query ([B, S, (heads + 2 * kv
heads) * head size], key and value absent). Partial rotary (Phi-2, Phi-4-mini) rotates the first
2 x the tables' width dims of each head. A sliding window (local_window_size W: Gemma-2,
Mistral) lets each query see its last W keys (its own the last), as onnxruntime's kernel does;
the attention kernels start at the window and mask the keys before it. Refused, naming the node:
smooth_softmax, head_sink, attention_bias, position_ids, a cache shorter than the sequence.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import CompileError
from ..ir import Graph, Node, Value, expand_nodes
from ..registry import declare
from .onnx_attention import heads_first

MS = "com.microsoft"


def _output_shape(shapes: list, attrs: dict, dtypes: list) -> tuple | None:
    q = shapes[0]
    if q is None or len(q) != 3:
        return None
    heads, kv = attrs.get("num_heads", 0), attrs.get("kv_num_heads", 0)
    if not heads or not kv:
        return None
    packed = len(shapes) < 2 or shapes[1] is None
    head = q[2] // (heads + 2 * kv) if packed else q[2] // heads
    return (q[0], q[1], heads * head)


def _output_types(node: Node) -> None:
    """present_key and present_value: the caches' shapes and dtypes (ONNX infers nothing here)."""
    for out, past in zip(node.outputs[1:3], (node.input(3), node.input(4))):
        if out is not None and past is not None and past.shape is not None:
            out.dtype, out.shape = past.dtype, tuple(past.shape)


declare("GroupQueryAttention", domain=MS, handled_by="vkc.TensorScatter + vkc.Attention", module=__name__,
        float16=True, output_shape=_output_shape, output_types=_output_types, updates_in_place=((1, 3), (2, 4)),
        dtypes_doc="float32, float16; seqlens_k, total_sequence_length int32",
        limits="a cache shorter than its context (past and present of different lengths); "
               "smooth_softmax, head_sink, attention_bias, position_ids")


def expand_group_query_attention(graph: Graph) -> Graph:
    return expand_nodes(graph, lambda node: _expand(graph, node)
                        if node.domain == MS and node.op_type == "GroupQueryAttention" else None)


def _const(name: str, array) -> Value:
    array = np.asarray(array)
    return Value(name, array.dtype, array.shape, data=array)


def _expand(graph: Graph, node: Node) -> list[Node]:
    a, name = node.attrs, node.name
    if int(a.get("smooth_softmax", 0)):
        raise CompileError(f"GroupQueryAttention '{name}': smooth_softmax is not supported by vkc; export without it.")
    for i, what in ((9, "position_ids"), (10, "attention_bias"), (11, "head_sink")):
        if node.input(i) is not None:
            raise CompileError(f"GroupQueryAttention '{name}': input {what} is not supported by vkc.")
    q, k, v = node.inputs[0], node.input(1), node.input(2)
    past_k, past_v, seqlens, total = (node.input(i) for i in (3, 4, 5, 6))
    heads, kv_heads = int(a["num_heads"]), int(a["kv_num_heads"])
    b, s, width = q.shape
    nodes: list[Node] = []

    def add(op, inputs, out_name, dtype, shape, **attrs) -> Value:
        out = Value(f"{name}/{out_name}", np.dtype(dtype), tuple(shape))
        nodes.append(Node(op, f"{name}/{out_name}", inputs, [out], attrs, sources=node.sources))
        return out

    if k is None:  # packed QKV: split along the hidden axis
        head = width // (heads + 2 * kv_heads)
        sizes = [heads * head, kv_heads * head, kv_heads * head]
        outs = [Value(f"{name}/{p}", q.dtype, (b, s, n)) for p, n in zip("qkv", sizes)]
        nodes.append(Node("Split", f"{name}/split_qkv", [q, _const(f"{name}/qkv_sizes", np.array(sizes, np.int64))],
                          outs, {"axis": 2}, sources=node.sources))
        q, k, v = outs
    else:
        head = width // heads
    if past_k is None or past_v is None or seqlens is None:
        raise CompileError(f"GroupQueryAttention '{name}': vkc needs past_key, past_value and seqlens_k "
                           "(a decoder with its cache).")
    context = past_k.shape[2]
    if total is not None and total.is_constant and int(np.asarray(total.data).reshape(-1)[0]) > context:
        raise CompileError(f"GroupQueryAttention '{name}': total_sequence_length "
                           f"{int(np.asarray(total.data).reshape(-1)[0])} exceeds the cache's {context} rows: vkc "
                           "takes the cache of the context's length (past and present share a buffer); "
                           f"pin past_key's sequence axis to the context with --input-shape.")
    if s > context:
        raise CompileError(f"GroupQueryAttention '{name}': {s} new tokens exceed the cache's {context} rows.")
    # Each batch's first new position: seqlens_k + 1 - S; its key count: seqlens_k + 1.
    last = add("Cast", [seqlens], "last", np.int64, (b,), to=7)
    start = add("Add", [last, _const(f"{name}/one_minus_s", np.array(1 - s, np.int64))], "start", np.int64, (b,))
    count = add("Add", [seqlens, _const(f"{name}/one", np.array(1, np.int32))], "key_count", np.int32, (b,))
    if int(a.get("do_rotary", 0)):
        cos, sin = node.input(7), node.input(8)
        first = add("Unsqueeze", [start, _const(f"{name}/axis1", np.array([1], np.int64))], "start_col", np.int64, (b, 1))
        positions = add("Add", [first, _const(f"{name}/steps", np.arange(s, dtype=np.int64)[None])],
                        "positions", np.int64, (b, s))
        rotary = dict(interleaved=int(a.get("rotary_interleaved", 0)))
        if 2 * cos.shape[-1] < head:   # partial rotary: the tables cover a head's first dims
            rotary["rotary_embedding_dim"] = 2 * cos.shape[-1]
        q = add("RotaryEmbedding", [q, positions, cos, sin], "q_rotary", q.dtype, q.shape, num_heads=heads, **rotary)
        k = add("RotaryEmbedding", [k, positions, cos, sin], "k_rotary", k.dtype, k.shape, num_heads=kv_heads, **rotary)
        for n in nodes[-2:]:
            n.domain = MS
    presents = []
    for i, (t, past) in enumerate(((k, past_k), (v, past_v))):
        rows = heads_first(node, t, kv_heads, head, nodes)
        present = node.outputs[1 + i] if len(node.outputs) > 1 + i and node.outputs[1 + i].name else \
            Value(f"{name}/present_{'kv'[i]}", past.dtype, past.shape)
        present.dtype, present.shape = past.dtype, past.shape
        nodes.append(Node("vkc.TensorScatter", f"{name}/present_{'kv'[i]}", [past, rows, start], [present],
                          {"axis": 2}, sources=node.sources))
        presents.append(present)
    out = node.outputs[0]
    out.dtype, out.shape = q.dtype, (b, s, heads * head)
    kv_rows = (kv_heads * context * head, context * head, head, 1)
    layouts = {"q": (0, (s * heads * head, head, heads * head, 1)), "k": (0, kv_rows), "v": (0, kv_rows),
               "out": (0, (s * heads * head, head, heads * head, 1))}
    scale = float(a.get("scale", 0.0)) or 1.0 / math.sqrt(head)
    attrs = dict(dims=[b, heads, s, context, head, head], scale=scale, causal=True, mask_kind="none",
                 layouts=layouts, kv_group=heads // kv_heads, softcap=float(a.get("softcap", 0.0)),
                 empty_rows_zero=True)
    window = int(a.get("local_window_size", -1))
    if 0 <= window < context:   # a query sees its last `window` keys; a window of the cache, all it has
        attrs["window"] = window
    nodes.append(Node("vkc.Attention", name, [q, *presents, None, count], [out], attrs, sources=node.sources))
    return nodes
