"""onnxruntime's contrib attention ops (what its transformer optimizer writes) become existing
kernels: com.microsoft Attention a MatMul for the packed Q/K/V projection (its bias an Add the
epilogue pass fuses into the MatMul) and one vkc.Attention reading Q, K and V in place from the
packed [B, S, 3 * hidden] result; com.microsoft MultiHeadAttention bias Adds (fused elementwise
where present) and one vkc.Attention on the [B, S, hidden] query, key and value.

Raw key-padding masks ([B, S_kv] int32, 1 keep, 0 masked) are read by the attention kernel as
they are: a key whose mask is not positive gets mask_filter_value (-10000 by default) added to its score, as
onnxruntime does. `unidirectional` is the kernel's causal mode (onnxruntime adds
mask_filter_value there too; exp(-10000) is 0 in float32 next to the always visible diagonal,
so both give the same result).

Runs before to_elementwise, so the Adds it writes fuse like the model's own.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import CompileError
from ..ir import Graph, Node, Value, expand_nodes
from ..registry import declare

MS = "com.microsoft"
# dtypes: vkc.Attention's rule checks them (the masks are int32, the rest float32).
def _attention_shape(shapes: list, attrs: dict, dtypes: list) -> tuple | None:
    """[B, S, V hidden]: Attention(input [B, S, in], weights [in, Q + K + V hidden])."""
    if len(shapes) < 2 or shapes[0] is None or shapes[1] is None or len(shapes[0]) != 3:
        return None
    hidden = attrs.get("qkv_hidden_sizes", [shapes[1][-1] // 3] * 3)[2]
    return (*shapes[0][:2], int(hidden))


def _multihead_shape(shapes: list, attrs: dict, dtypes: list) -> tuple | None:
    """[B, S, V hidden]: MultiHeadAttention(query [B, S, QK hidden], key, value [B, S_kv, V hidden])."""
    q, v = shapes[0], shapes[2] if len(shapes) > 2 else None
    if q is None or v is None or len(q) != 3 or len(v) != 3:
        return None
    return (*q[:2], v[2])


declare("Attention", domain=MS, handled_by="MatMul + vkc.Attention", module=__name__,
        output_shape=_attention_shape,
        dtypes_doc="float32; mask_index int32",
        limits="past/present, attention_bias, past_sequence_length, rotary embedding; "
               "mask_index other than a [B, S] 0/1 mask")
declare("MultiHeadAttention", domain=MS, handled_by="vkc.Attention", module=__name__,
        output_shape=_multihead_shape,
        dtypes_doc="float32; key_padding_mask int32", constant_inputs=(3,),
        limits="packed QKV/KV and 4-D key/value layouts, past/present, attention_bias; "
               "key_padding_mask other than a [B, S_kv] 0/1 mask")


def expand_contrib_attention(graph: Graph) -> Graph:
    expand = {"Attention": _attention, "MultiHeadAttention": _multi_head_attention}
    return expand_nodes(graph, lambda node: expand[node.op_type](graph, node)
                        if node.domain == MS and node.op_type in expand else None)


def _refuse_extras(graph: Graph, node: Node, inputs: dict[int, str], outputs: dict[int, str]):
    for i, what in inputs.items():
        if node.input(i) is not None and node.input(i).name:
            raise CompileError(f"{node.op_type} '{node.name}': input {i} ({what}) is not "
                               "supported by vkc.")
    for i, what in outputs.items():
        if i < len(node.outputs) and (node.outputs[i].consumers or graph.is_output(node.outputs[i])):
            raise CompileError(f"{node.op_type} '{node.name}': output {i} ({what}) is not "
                               "supported by vkc.")


def _padding_mask(node: Node, mask: Value | None, b: int, skv: int, what: str):
    """(mask_kind, mask, strides over (batch, head, query, key)) of a raw [B, S_kv] mask."""
    if mask is None or not mask.name:
        return "none", None, None
    if tuple(mask.shape) != (b, skv) or np.dtype(mask.dtype) != np.int32:
        raise CompileError(f"{node.op_type} '{node.name}': {what} '{mask.name}' is "
                           f"{np.dtype(mask.dtype).name}{list(mask.shape)}; vkc takes a [B, S_kv] = "
                           f"[{b}, {skv}] int32 mask of 1 (keep) and 0 (masked) only.")
    return "keep", mask, (skv, 0, 0, 1)


def _heads(node: Node, hidden: int, what: str) -> int:
    heads = int(node.attrs["num_heads"])
    if heads <= 0 or hidden % heads:
        raise CompileError(f"{node.op_type} '{node.name}': {what} size {hidden} does not split "
                           f"into num_heads={heads} heads.")
    return hidden // heads


def _attention_node(node: Node, q, k, v, mask, out: Value, *, dims, layouts, mask_kind,
                    mask_strides) -> Node:
    head_size = dims[4]
    scale = float(node.attrs.get("scale", 0.0)) or 1.0 / math.sqrt(head_size)
    if mask_strides is not None:
        layouts["mask"] = (0, mask_strides)
    b, _, sq, _, _, dv = dims
    # onnx infers no shapes for contrib ops.
    out.dtype, out.shape = q.dtype, (b, sq, layouts["out"][1][2])
    attrs = dict(dims=dims, scale=scale, causal=bool(node.attrs.get("unidirectional", 0)),
                 mask_kind=mask_kind, mask_filter=float(node.attrs.get("mask_filter_value", -10000.0)),
                 layouts=layouts)
    return Node("vkc.Attention", node.name, [q, k, v, mask], [out], attrs, sources=node.sources)


def _attention(graph: Graph, node: Node) -> list[Node]:
    """Attention(input [B, S, in], weights [in, hq + hk + hv], bias, mask_index)."""
    _refuse_extras(graph, node, {4: "past", 5: "attention_bias", 6: "past_sequence_length"},
                   {1: "present"})
    if node.attrs.get("do_rotary", 0):
        raise CompileError(f"Attention '{node.name}': do_rotary is not supported by vkc.")
    x, w, bias = node.inputs[0], node.inputs[1], node.input(2)
    b, s, _ = x.shape
    total = w.shape[1]
    hq, hk, hv = node.attrs.get("qkv_hidden_sizes", [total // 3] * 3)
    if hq != hk or hq + hk + hv != total:
        raise CompileError(f"Attention '{node.name}': qkv_hidden_sizes {[hq, hk, hv]} must give "
                           f"Q and K one size and sum to the weights' {total} columns.")
    d = _heads(node, hq, "Q/K hidden")
    dv = _heads(node, hv, "V hidden")
    heads = hq // d
    qkv = Value(f"{node.name}/qkv", x.dtype, (b, s, total))
    nodes = [Node("MatMul", f"{node.name}/qkv_projection", [x, w], [qkv], sources=node.sources)]
    if bias is not None and bias.name:
        biased = Value(f"{node.name}/qkv_biased", x.dtype, (b, s, total))
        nodes.append(Node("Add", f"{node.name}/qkv_bias", [qkv, bias], [biased],
                          sources=node.sources))
        qkv = biased
    mask_kind, mask, mask_strides = _padding_mask(node, node.input(3), b, s, "mask_index")
    packed = (s * total, d, total, 1)
    layouts = {"q": (0, packed), "k": (hq, packed), "v": (hq + hk, (s * total, dv, total, 1)),
               "out": (0, (s * hv, dv, hv, 1))}
    nodes.append(_attention_node(node, qkv, qkv, qkv, mask, node.outputs[0],
                                 dims=[b, heads, s, s, d, dv], layouts=layouts,
                                 mask_kind=mask_kind, mask_strides=mask_strides))
    return nodes


def _multi_head_attention(graph: Graph, node: Node) -> list[Node]:
    """MultiHeadAttention(query [B, S, hq], key [B, L, hk], value [B, L, hv], bias,
    key_padding_mask)."""
    _refuse_extras(graph, node, {5: "attention_bias", 6: "past_key", 7: "past_value"},
                   {1: "present_key", 2: "present_value"})
    q, k, v, bias = node.inputs[0], node.input(1), node.input(2), node.input(3)
    if k is None or v is None or len(q.shape) != 3 or len(k.shape) != 3 or len(v.shape) != 3:
        raise CompileError(f"MultiHeadAttention '{node.name}': vkc takes separate 3-D query, key "
                           "and value ([B, S, hidden]); packed QKV/KV and 4-D key/value layouts "
                           "are not supported.")
    b, s, hq = q.shape
    _, skv, hk = k.shape
    hv = v.shape[2]
    if hq != hk or v.shape[:2] != k.shape[:2]:
        raise CompileError(f"MultiHeadAttention '{node.name}': query {list(q.shape)}, key "
                           f"{list(k.shape)} and value {list(v.shape)} do not agree.")
    d = _heads(node, hq, "query hidden")
    dv = _heads(node, hv, "value hidden")
    heads = hq // d
    nodes = []
    if bias is not None and bias.name:
        if not bias.is_constant:
            raise CompileError(f"MultiHeadAttention '{node.name}': bias '{bias.name}' comes from "
                               "the computation; vkc needs it constant.")
        parts = np.split(bias.data.astype(np.float32), [hq, hq + hk])
        biased = []
        for name, t, part in zip("qkv", (q, k, v), parts):
            c = Value(f"{node.name}/bias_{name}", np.dtype(np.float32), part.shape, data=part)
            out = Value(f"{node.name}/{name}_biased", t.dtype, t.shape)
            nodes.append(Node("Add", f"{node.name}/{name}_bias", [t, c], [out],
                              sources=node.sources))
            biased.append(out)
        q, k, v = biased
    mask_kind, mask, mask_strides = _padding_mask(node, node.input(4), b, skv, "key_padding_mask")
    layouts = {"q": (0, (s * hq, d, hq, 1)), "k": (0, (skv * hk, d, hk, 1)),
               "v": (0, (skv * hv, dv, hv, 1)), "out": (0, (s * hv, dv, hv, 1))}
    nodes.append(_attention_node(node, q, k, v, mask, node.outputs[0],
                                 dims=[b, heads, s, skv, d, dv], layouts=layouts,
                                 mask_kind=mask_kind, mask_strides=mask_strides))
    return nodes
