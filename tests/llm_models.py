"""Tiny decoder LLMs in ONNX's standard in-place cache form (opsets 23-24), the shape of
Llama/Qwen2: token embedding, per layer RMSNormalization, Q/K/V projections, RotaryEmbedding,
each layer's K and V written into its cache by TensorScatter at the run's position, Attention over
the cache's first position + S rows (nonpad_kv_seqlen, causal, grouped-query), SwiGLU MLP, final
norm and the LM head. Inputs: input_ids [1, S] and position [1] (the cache rows already
filled); caches past_key.N / past_value.N [1, kv heads, max context, head size]; outputs logits
[1, S, vocab] and present_key.N / present_value.N. vkc keeps the caches as bundle state.
Also: feeds of one step with random caches (step_feeds), and a SwiGLU MLP alone (swiglu_model).
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tests.onnx_builders import make_model, tensor_info

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def tiny_llama(*, vocab=64, hidden=32, layers=2, heads=4, kv_heads=2, ffn=48, context=64,
               seed=0, tied=False, interleaved=0, rotary_dim=0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    head = hidden // heads
    inits, nodes = [], []

    def const(name, array):
        inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def weight(name, *shape, scale=None):
        return const(name, (rng.normal(size=shape) * (scale or shape[0] ** -0.5)).astype(np.float32))

    def node(op, inputs, output, **attrs):
        nodes.append(helper.make_node(op, inputs, [output], name=output, **attrs))
        return output

    embed = weight("embed", vocab, hidden, scale=1.0)
    rot = rotary_dim or head   # RotaryEmbedding's rotary_embedding_dim: the first `rot` of a head rotate
    inv = 1.0 / 10000 ** (np.arange(0, rot, 2) / rot)
    angles = np.outer(np.arange(context), inv)
    cos, sin = const("cos", np.cos(angles).astype(np.float32)), const("sin", np.sin(angles).astype(np.float32))
    const("axis1", np.array([1], np.int64))
    const("one", np.array([1], np.int64))
    # position_ids [1, S] = position + (0 .. S-1): CumSum of ones shaped like input_ids, minus one
    node("Shape", ["input_ids"], "ids_shape")
    node("ConstantOfShape", ["ids_shape"], "ones", value=helper.make_tensor("v", I64, [1], [1]))
    node("CumSum", ["ones", "axis1"], "counts")
    node("Sub", ["counts", "one"], "steps")
    node("Add", ["steps", "position"], "position_ids")
    node("Shape", ["input_ids"], "s", start=1, end=2)
    node("Add", ["position", "s"], "filled")  # nonpad_kv_seqlen: the rows after this run's write
    x = node("Gather", [embed, "input_ids"], "x0")
    q_shape = const("q_shape", np.array([1, -1, heads, head], np.int64))
    kv_shape = const("kv_shape", np.array([1, -1, kv_heads, head], np.int64))
    o_shape = const("o_shape", np.array([1, -1, hidden], np.int64))
    caches_in, caches_out = [], []
    for i in range(layers):
        p = f"layers.{i}"
        h = node("RMSNormalization", [x, const(f"{p}.norm1", np.ones(hidden, np.float32))], f"{p}.h1",
                 axis=-1, epsilon=1e-5)
        q = node("MatMul", [h, weight(f"{p}.wq", hidden, heads * head)], f"{p}.q")
        k = node("MatMul", [h, weight(f"{p}.wk", hidden, kv_heads * head)], f"{p}.k")
        v = node("MatMul", [h, weight(f"{p}.wv", hidden, kv_heads * head)], f"{p}.v")
        q = node("Transpose", [node("Reshape", [q, q_shape], f"{p}.q4")], f"{p}.qt", perm=[0, 2, 1, 3])
        k = node("Transpose", [node("Reshape", [k, kv_shape], f"{p}.k4")], f"{p}.kt", perm=[0, 2, 1, 3])
        v = node("Transpose", [node("Reshape", [v, kv_shape], f"{p}.v4")], f"{p}.vt", perm=[0, 2, 1, 3])
        rotary = dict(interleaved=interleaved, **({"rotary_embedding_dim": rotary_dim} if rotary_dim else {}))
        q = node("RotaryEmbedding", [q, cos, sin, "position_ids"], f"{p}.q_rope", **rotary)
        k = node("RotaryEmbedding", [k, cos, sin, "position_ids"], f"{p}.k_rope", **rotary)
        pk, pv = f"past_key.{i}", f"past_value.{i}"
        caches_in += [pk, pv]
        present_k = node("TensorScatter", [pk, k, "position"], f"present_key.{i}", axis=2)
        present_v = node("TensorScatter", [pv, v, "position"], f"present_value.{i}", axis=2)
        caches_out += [present_k, present_v]
        att = node("Attention", [q, present_k, present_v, "", "", "", "filled"], f"{p}.att", is_causal=1)
        o = node("Reshape", [node("Transpose", [att], f"{p}.att_t", perm=[0, 2, 1, 3]), o_shape], f"{p}.o")
        x = node("Add", [x, node("MatMul", [o, weight(f"{p}.wo", hidden, hidden)], f"{p}.attn_out")], f"{p}.x1")
        h = node("RMSNormalization", [x, const(f"{p}.norm2", np.ones(hidden, np.float32))], f"{p}.h2",
                 axis=-1, epsilon=1e-5)
        g = node("MatMul", [h, weight(f"{p}.wg", hidden, ffn)], f"{p}.gate")
        u = node("MatMul", [h, weight(f"{p}.wu", hidden, ffn)], f"{p}.up")
        act = node("Mul", [node("Mul", [g, node("Sigmoid", [g], f"{p}.sig")], f"{p}.silu"), u], f"{p}.act")
        x = node("Add", [x, node("MatMul", [act, weight(f"{p}.wd", ffn, hidden)], f"{p}.down")], f"{p}.x2")
    h = node("RMSNormalization", [x, const("norm", np.ones(hidden, np.float32))], "h_final", axis=-1, epsilon=1e-5)
    if tied:
        node("Transpose", [embed], "lm_head", perm=[1, 0])
        node("MatMul", [h, "lm_head"], "logits")
    else:
        node("MatMul", [h, weight("lm_head", hidden, vocab)], "logits")
    cache = [1, kv_heads, context, head]
    inputs = [helper.make_tensor_value_info("input_ids", I64, [1, "s"]),
              helper.make_tensor_value_info("position", I64, [1])]
    inputs += [helper.make_tensor_value_info(n, F, cache) for n in caches_in]
    outputs = [helper.make_tensor_value_info("logits", F, [1, "s", vocab])]
    outputs += [helper.make_tensor_value_info(n, F, cache) for n in caches_out]
    graph = helper.make_graph(nodes, "tiny_llama", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 24)])


def onnxruntime_greedy(model: onnx.ModelProto, prompt: list[int], steps: int) -> list[int]:
    """onnxruntime's own greedy loop over the same file: the caches fed back as inputs."""
    import onnxruntime as ort
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    caches = {i.name: np.zeros([d if isinstance(d, int) else 1 for d in i.shape], np.float32)
              for i in sess.get_inputs() if i.name.startswith("past_")}
    out_names = [o.name for o in sess.get_outputs()]
    ids, position, tokens = list(prompt), 0, []
    feed = np.array([ids], np.int64)
    for _ in range(steps):
        got = dict(zip(out_names, sess.run(None, {"input_ids": feed, "position": np.array([position]), **caches})))
        position += feed.shape[1]
        for name in caches:
            caches[name] = got[name.replace("past_", "present_")]
        token = int(np.argmax(got["logits"][0, -1]))
        tokens.append(token)
        feed = np.array([[token]], np.int64)
    return tokens


def step_feeds(model: onnx.ModelProto, ids: list[int], position: int, seed: int = 1) -> dict:
    """Feeds of one run of `model` with its caches as inputs (compiled with state none): the
    tokens `ids` at `position`, every cache row random (the rows past position + len(ids) are
    never read)."""
    rng = np.random.default_rng(seed)
    feeds = {"input_ids": np.array([ids], np.int64), "position": np.array([position], np.int64)}
    for vi in model.graph.input:
        if vi.name.startswith("past_"):
            shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
            feeds[vi.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def swiglu_model(rows=1, k=64, f=96, extra_reader=False, down=False):
    """x [1, rows, k] -> silu(x Wg) * (x Wu) [1, rows, f]; extra_reader: up is an output too;
    down: the MLP's down projection after it, back to [1, rows, k]."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal(shape) / 8).astype(np.float32), n)
             for n, shape in (("wg", (k, f)), ("wu", (k, f)), ("wd", (f, k)))]
    nodes = [helper.make_node("MatMul", ["x", "wg"], ["gate"], name="gate"),
             helper.make_node("MatMul", ["x", "wu"], ["up"], name="up"),
             helper.make_node("Sigmoid", ["gate"], ["sig"]), helper.make_node("Mul", ["gate", "sig"], ["silu"]),
             helper.make_node("Mul", ["silu", "up"], ["act" if down else "y"])]
    nodes += [helper.make_node("MatMul", ["act", "wd"], ["y"], name="down")] if down else []
    outputs = [tensor_info("y", [1, rows, k if down else f])]
    outputs += [tensor_info("up", [1, rows, f])] if extra_reader else []
    return make_model(helper.make_graph(nodes, "swiglu", [tensor_info("x", [1, rows, k])], outputs,
                                        inits if down else inits[:2]))
