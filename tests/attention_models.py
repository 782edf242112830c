"""ONNX attention graphs as exporters write them, for the attention kernel, pass and contrib-op
tests: the core chain on [B, H, S, D] inputs, and a whole self-attention block (projections,
head split, attention, head merge) as HuggingFace BERT/ViT/GPT-2 exports it."""
from __future__ import annotations

import numpy as np
from onnx import helper, numpy_helper

from tests.onnx_builders import IR_VERSION, _fill_output_shapes, make_model, tensor_info

FMIN = float(np.finfo(np.float32).min)


def _model(graph, opset):
    model = make_model(graph, infer_shapes=False)
    model.opset_import[0].version = opset
    return _fill_output_shapes(model)


def causal_mask(sq: int, sk: int, fill: float = FMIN) -> np.ndarray:
    """[1, 1, Sq, Sk] additive mask: 0 where key k <= q + Sk - Sq, `fill` elsewhere."""
    keep = np.tril(np.ones((sq, sk), bool), k=sk - sq)
    return np.where(keep, 0.0, fill).astype(np.float32)[None, None]


def core_attention(b, h, sq, d, *, sk=None, dv=None, mask_shape=None, mask_const=None,
                   scale="div", k_transposed=True, out_transpose=False, nan_guard=False, softcap=None, opset=17):
    """Q [B,H,Sq,D], K [B,H,Sk,D] (Transposed in the graph) or Kᵀ [B,H,D,Sk] as inputs, V
    [B,H,Sk,DV]; scale "div" (scores / sqrt(D)), "mul" (scores * c), "pre" (Q and K each times
    D^-1/4 before the MatMul) or None; a mask graph input of mask_shape or a constant mask_const;
    out_transpose: the output Transposed to [B, Sq, H, DV]; nan_guard: Where(IsNaN(P), 0, P) on the
    probabilities, as the TorchScript export of scaled_dot_product_attention writes; softcap: the
    scaled scores soft-capped before the mask, as Gemma-2's eager attention writes it (Div by the
    cap, Tanh, Mul by the cap)."""
    sk, dv = sk or sq, dv or d
    nodes, inits = [], []
    inputs = [tensor_info("q", [b, h, sq, d])]
    inputs.append(tensor_info("k", [b, h, d, sk] if k_transposed else [b, h, sk, d]))
    inputs.append(tensor_info("v", [b, h, sk, dv]))
    q, kt = "q", "k"
    if not k_transposed:
        nodes.append(helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2], name="k_t"))
        kt = "kt"
    if scale == "pre":
        c = np.float32(d ** -0.25)
        inits.append(numpy_helper.from_array(np.array(c, np.float32), "c"))
        nodes += [helper.make_node("Mul", [q, "c"], ["qs"], name="q_scale"),
                  helper.make_node("Mul", [kt, "c"], ["ks"], name="k_scale")]
        q, kt = "qs", "ks"
    nodes.append(helper.make_node("MatMul", [q, kt], ["scores"], name="qk"))
    x = "scores"
    if scale in ("div", "mul"):
        c = np.sqrt(d) if scale == "div" else 1 / np.sqrt(d)
        inits.append(numpy_helper.from_array(np.array(c, np.float32), "scale"))
        nodes.append(helper.make_node("Div" if scale == "div" else "Mul", [x, "scale"], ["scaled"],
                                      name="scale"))
        x = "scaled"
    if softcap is not None:
        inits.append(numpy_helper.from_array(np.array(softcap, np.float32), "cap"))
        nodes += [helper.make_node("Div", [x, "cap"], ["capped_in"], name="cap_in"),
                  helper.make_node("Tanh", ["capped_in"], ["capped_tanh"], name="cap_tanh"),
                  helper.make_node("Mul", ["capped_tanh", "cap"], ["capped"], name="cap_out")]
        x = "capped"
    if mask_shape is not None or mask_const is not None:
        if mask_const is not None:
            inits.append(numpy_helper.from_array(mask_const, "mask"))
        else:
            inputs.append(tensor_info("mask", mask_shape))
        nodes.append(helper.make_node("Add", [x, "mask"], ["masked"], name="add_mask"))
        x = "masked"
    nodes.append(helper.make_node("Softmax", [x], ["probs"], axis=-1, name="softmax"))
    probs = "probs"
    if nan_guard:
        inits.append(numpy_helper.from_array(np.array(0.0, np.float32), "zero"))
        nodes += [helper.make_node("IsNaN", ["probs"], ["nan"], name="isnan"),
                  helper.make_node("Where", ["nan", "zero", "probs"], ["guarded"], name="guard")]
        probs = "guarded"
    out = "y"
    if out_transpose:
        nodes.append(helper.make_node("MatMul", [probs, "v"], ["ctx"], name="pv"))
        nodes.append(helper.make_node("Transpose", ["ctx"], ["y"], perm=[0, 2, 1, 3],
                                      name="ctx_t"))
    else:
        nodes.append(helper.make_node("MatMul", [probs, "v"], ["y"], name="pv"))
    graph = helper.make_graph(nodes, "attention", inputs, [tensor_info(out, None)],
                              initializer=inits)
    return _model(graph, opset)


def window_attention(images, windows, h, n, d, *, mask_shape=None, seed=0, opset=17):
    """Swin's shifted-window attention as torchvision exports it, on Q, K and V inputs of
    [images * windows, H, N, D] (K Transposed in the graph): scores * D^-1/2 + a relative
    position bias [1, H, N, N], viewed as [images, windows, H, N, N] + the window mask
    [1, windows, 1, N, N] (0 / -100: a constant; or an input of mask_shape), viewed back ->
    Softmax -> ·V. The bias is random; the constant mask hides a random half of each window's
    keys from each query (never all of them)."""
    rng = np.random.default_rng(seed)
    bw = images * windows
    inputs = [tensor_info(name, [bw, h, n, d]) for name in "qkv"]
    hidden = rng.random((windows, n, n)) < 0.5
    hidden[:, np.arange(n), rng.integers(0, n, n)] = False
    inits = {"scale": np.array(d ** -0.5, np.float32),
             "bias": rng.normal(0, 1, (1, h, n, n)).astype(np.float32),
             "windowed": np.array([images, windows, h, n, n], np.int64),
             "unwindowed": np.array([bw, h, n, n], np.int64)}
    if mask_shape is not None:
        inputs.append(tensor_info("mask", mask_shape))
    else:
        inits["mask"] = np.where(hidden, -100.0, 0.0).astype(np.float32)[None, :, None]
    nodes = [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2], name="k_t"),
             helper.make_node("MatMul", ["q", "kt"], ["scores"], name="qk"),
             helper.make_node("Mul", ["scores", "scale"], ["scaled"], name="scale"),
             helper.make_node("Add", ["scaled", "bias"], ["biased"], name="add_bias"),
             helper.make_node("Reshape", ["biased", "windowed"], ["per_image"], name="view_windows"),
             helper.make_node("Add", ["per_image", "mask"], ["masked"], name="add_mask"),
             helper.make_node("Reshape", ["masked", "unwindowed"], ["logits"], name="view_back"),
             helper.make_node("Softmax", ["logits"], ["probs"], axis=-1, name="softmax"),
             helper.make_node("MatMul", ["probs", "v"], ["y"], name="pv")]
    graph = helper.make_graph(nodes, "window_attention", inputs, [tensor_info("y", None)],
                              initializer=[numpy_helper.from_array(a, k) for k, a in inits.items()])
    return _model(graph, opset)


def window_block(images, grid, ws, heads, d, *, shift=0, seed=0, opset=17):
    """A Swin block's attention as torchvision exports it: x [images, H, W, C] (H = W = grid *
    ws, C = heads * d) -> [torch.roll by -shift on H and W: Slices and a Concat per axis] ->
    windows (Reshape [images, grid, ws, grid, ws, C], Transpose, Reshape [images * grid², ws², C])
    -> qkv MatMul + bias -> Reshape [.., ws², 3, heads, d] -> Transpose -> Gather 0, 1, 2 -> Q
    scaled, Kᵀ -> scores + relative position bias [1, heads, ws², ws²] [+ the window mask
    [1, nW, 1, ws², ws²] where shifted] -> Softmax -> ·V -> Transpose, Reshape [.., ws², C] ->
    proj MatMul + bias -> windows back (Reshape, Transpose, Reshape [images, H, W, C]) [-> roll
    back]. Random weights, a mask of 0 / -100 hiding a random half of each window's keys."""
    rng = np.random.default_rng(seed)
    c, n, side, windows = heads * d, ws * ws, grid * ws, grid * grid
    inits = {}

    def const(name, array, dtype=np.float32):
        inits[name] = np.asarray(array, dtype)
        return name

    def shape(name, dims):
        return const(f"{name}_dims", dims, np.int64)
    nodes = []

    def node(op, inputs, out, **attrs):
        nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    def roll(x, by, tag):
        for axis in (1, 2):
            k = by % side
            tail = node("Slice", [x, shape(f"{tag}{axis}s", [side - k]), shape(f"{tag}{axis}e", [side]),
                                  shape(f"{tag}{axis}a", [axis])], f"{tag}_tail{axis}")
            head = node("Slice", [x, shape(f"{tag}{axis}s0", [0]), shape(f"{tag}{axis}e0", [side - k]),
                                  shape(f"{tag}{axis}a0", [axis])], f"{tag}_head{axis}")
            x = node("Concat", [tail, head], f"{tag}_roll{axis}", axis=axis)
        return x
    x = roll("x", -shift, "shift") if shift else "x"
    x = node("Reshape", [x, shape("grid", [images, grid, ws, grid, ws, c])], "grid_view")
    x = node("Transpose", [x], "partition", perm=[0, 1, 3, 2, 4, 5])
    x = node("Reshape", [x, shape("windows", [images * windows, n, c])], "windows_view")
    x = node("MatMul", [x, const("w_qkv", rng.normal(0, c ** -0.5, (c, 3 * c)))], "qkv")
    x = node("Add", [x, const("b_qkv", rng.normal(0, 0.1, 3 * c))], "qkv_bias")
    x = node("Reshape", [x, shape("qkv_heads", [images * windows, n, 3, heads, d])], "qkv_view")
    x = node("Transpose", [x], "qkv_t", perm=[2, 0, 3, 1, 4])
    q, k, v = (node("Gather", [x, const(f"i{i}", i, np.int64)], f"g{i}", axis=0) for i in range(3))
    q = node("Mul", [q, const("scale", d ** -0.5)], "q_scaled")
    scores = node("MatMul", [q, node("Transpose", [k], "k_t", perm=[0, 1, 3, 2])], "scores")
    x = node("Add", [scores, const("rel_bias", rng.normal(0, 1, (1, heads, n, n)))], "biased")
    if shift:
        hidden = rng.random((windows, n, n)) < 0.5
        hidden[:, np.arange(n), rng.integers(0, n, n)] = False
        x = node("Reshape", [x, shape("per_image", [images, windows, heads, n, n])], "per_image")
        x = node("Add", [x, const("mask", np.where(hidden, -100.0, 0.0)[None, :, None])], "masked")
        x = node("Reshape", [x, shape("scores_shape", [images * windows, heads, n, n])], "logits")
    x = node("MatMul", [node("Softmax", [x], "probs", axis=-1), v], "pv")
    x = node("Reshape", [node("Transpose", [x], "heads_merged", perm=[0, 2, 1, 3]),
                         shape("merged", [images * windows, n, c])], "merged_view")
    x = node("MatMul", [x, const("w_proj", rng.normal(0, c ** -0.5, (c, c)))], "proj")
    x = node("Add", [x, const("b_proj", rng.normal(0, 0.1, c))], "proj_bias")
    x = node("Reshape", [x, shape("grid_back", [images, grid, grid, ws, ws, c])], "grid_back_view")
    x = node("Transpose", [x], "reverse", perm=[0, 1, 3, 2, 4, 5])
    x = node("Reshape", [x, shape("image", [images, side, side, c])], "image_view")
    if shift:
        x = roll(x, shift, "unshift")
    node("Identity", [x], "y")
    graph = helper.make_graph(nodes, "window_block", [tensor_info("x", [images, side, side, c])],
                              [tensor_info("y", None)],
                              initializer=[numpy_helper.from_array(a, k) for k, a in inits.items()])
    return _model(graph, opset)


def self_attention_block(b, s, h, d, *, mask="padding", seed=0, opset=17):
    """x [B, S, H*D] -> Q, K, V projections (MatMul + bias) -> Reshape [B, S, H, D] ->
    Transpose -> scores / sqrt(D) (+ mask) -> Softmax -> ·V -> Transpose -> Reshape [B, S, H*D]
    -> output projection. mask: "padding" (an input [B, 1, 1, S] of 0 / finfo.min), "causal"
    (a constant [1, 1, S, S] of 0 / finfo.min) or None."""
    rng = np.random.default_rng(seed)
    hidden = h * d
    inits = {}

    def const(name, arr):
        inits[name] = np.asarray(arr, np.float32)
        return name

    def weight(name, *shape):
        return const(name, rng.normal(0, hidden ** -0.5, shape))

    nodes = []
    shape_inits = [numpy_helper.from_array(np.array([b, s, h, d], np.int64), "heads_shape"),
                   numpy_helper.from_array(np.array([b, s, hidden], np.int64), "merged_shape")]
    heads = {}
    for name, perm in (("q", [0, 2, 1, 3]), ("k", [0, 2, 3, 1]), ("v", [0, 2, 1, 3])):
        nodes += [helper.make_node("MatMul", ["x", weight(f"w_{name}", hidden, hidden)],
                                   [f"{name}_mm"], name=f"{name}_proj"),
                  helper.make_node("Add", [f"{name}_mm", weight(f"b_{name}", hidden)],
                                   [f"{name}_lin"], name=f"{name}_bias"),
                  helper.make_node("Reshape", [f"{name}_lin", "heads_shape"], [f"{name}_4d"],
                                   name=f"{name}_split"),
                  helper.make_node("Transpose", [f"{name}_4d"], [f"{name}_h"], perm=perm,
                                   name=f"{name}_t")]
        heads[name] = f"{name}_h"
    const("sqrt_d", np.sqrt(d))
    nodes += [helper.make_node("MatMul", [heads["q"], heads["k"]], ["scores"], name="qk"),
              helper.make_node("Div", ["scores", "sqrt_d"], ["scaled"], name="scale")]
    x = "scaled"
    inputs = [tensor_info("x", [b, s, hidden])]
    if mask == "padding":
        inputs.append(tensor_info("mask", [b, 1, 1, s]))
    elif mask == "causal":
        const("mask", causal_mask(s, s))
    if mask is not None:
        nodes.append(helper.make_node("Add", [x, "mask"], ["masked"], name="add_mask"))
        x = "masked"
    nodes += [helper.make_node("Softmax", [x], ["probs"], axis=-1, name="softmax"),
              helper.make_node("MatMul", ["probs", heads["v"]], ["ctx"], name="pv"),
              helper.make_node("Transpose", ["ctx"], ["ctx_t"], perm=[0, 2, 1, 3], name="ctx_t"),
              helper.make_node("Reshape", ["ctx_t", "merged_shape"], ["ctx_m"], name="merge"),
              helper.make_node("MatMul", ["ctx_m", weight("w_o", hidden, hidden)], ["y"],
                               name="out_proj")]
    graph = helper.make_graph(nodes, "self_attention", inputs, [tensor_info("y", None)],
                              initializer=[numpy_helper.from_array(a, n) for n, a in inits.items()]
                              + shape_inits)
    return _model(graph, opset)


def padding_mask(b: int, s: int, lengths) -> np.ndarray:
    """[B, 1, 1, S] additive mask of 0 for the first lengths[i] keys of batch i, finfo.min
    after."""
    keep = np.arange(s)[None, :] < np.asarray(lengths)[:, None]
    return np.where(keep, 0.0, FMIN).astype(np.float32).reshape(b, 1, 1, s)


def _contrib_model(node, inputs, inits, out_shape):
    graph = helper.make_graph([node], "contrib", inputs, [tensor_info("y", out_shape)],
                              initializer=[numpy_helper.from_array(a, n) for n, a in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = IR_VERSION
    return model


def contrib_attention(b, s, heads, head, *, bias=True, mask=False, seed=0, v_head=None, **attrs):
    """onnxruntime's com.microsoft Attention: x [B, S, heads*head] through one packed QKV
    projection (with bias), an optional raw [B, S] int32 key-padding mask input; attrs go to the
    node (unidirectional, scale, ...)."""
    rng = np.random.default_rng(seed)
    hidden = heads * head
    hv = heads * (v_head or head)
    total = 2 * hidden + hv
    inits = {"w": rng.normal(0, hidden ** -0.5, (hidden, total)).astype(np.float32)}
    if bias:
        inits["bias"] = rng.normal(0, 0.1, total).astype(np.float32)
    if v_head:
        attrs["qkv_hidden_sizes"] = [hidden, hidden, hv]
    inputs = [tensor_info("x", [b, s, hidden])] + ([tensor_info("mask", [b, s], np.int32)]
                                                   if mask else [])
    node = helper.make_node("Attention", ["x", "w", "bias" if bias else "",
                                          "mask" if mask else ""], ["y"],
                            domain="com.microsoft", num_heads=heads, **attrs)
    return _contrib_model(node, inputs, inits, [b, s, hv])


def contrib_multi_head_attention(b, s, heads, head, *, skv=None, bias=True, mask=False, seed=0,
                                 **attrs):
    """onnxruntime's com.microsoft MultiHeadAttention of q [B, S, hidden], k and v [B, Skv,
    hidden] inputs, an optional packed bias and raw [B, Skv] int32 mask."""
    rng = np.random.default_rng(seed)
    skv = skv or s
    hidden = heads * head
    inits = {"bias": rng.normal(0, 0.1, 3 * hidden).astype(np.float32)} if bias else {}
    inputs = [tensor_info("q", [b, s, hidden]), tensor_info("k", [b, skv, hidden]),
              tensor_info("v", [b, skv, hidden])]
    if mask:
        inputs.append(tensor_info("mask", [b, skv], np.int32))
    node = helper.make_node("MultiHeadAttention", ["q", "k", "v", "bias" if bias else "",
                                                   "mask" if mask else ""], ["y"],
                            domain="com.microsoft", num_heads=heads, **attrs)
    return _contrib_model(node, inputs, inits, [b, s, hidden])
