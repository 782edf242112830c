"""onnxruntime's com.microsoft GroupQueryAttention against onnxruntime: separate and packed
Q/K/V, rotary or not, prefill and decode steps over a cache of the context's length, batch 2
with different lengths, sliding windows; a decoder step loop with the caches as bundle state;
what is refused."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tests.harness import assert_close, run_bundle

from compiler.compile import compile_model, compile_with_kernels
from compiler.errors import CompileError
from compiler.targets import TARGETS, emulating_cooperative_matrix
from runtime_min import load

F, I32 = TensorProto.FLOAT, TensorProto.INT32
MS = "com.microsoft"


def gqa_model(*, b=1, s=1, heads=4, kv_heads=2, head=16, context=32, rotary=False, packed=False, rotary_dim=None,
              **attrs):
    """rotary_dim: the tables' rotated dims (partial rotary), the head size by default."""
    hidden, kv = heads * head, kv_heads * head
    if packed:
        inputs = [helper.make_tensor_value_info("qkv", F, [b, s, hidden + 2 * kv])]
        names = ["qkv", "", ""]
    else:
        inputs = [helper.make_tensor_value_info("q", F, [b, s, hidden]),
                  helper.make_tensor_value_info("k", F, [b, s, kv]),
                  helper.make_tensor_value_info("v", F, [b, s, kv])]
        names = ["q", "k", "v"]
    inputs += [helper.make_tensor_value_info("past_key", F, [b, kv_heads, context, head]),
               helper.make_tensor_value_info("past_value", F, [b, kv_heads, context, head]),
               helper.make_tensor_value_info("seqlens_k", I32, [b])]
    names += ["past_key", "past_value", "seqlens_k", "total"]
    inits = [helper.make_tensor("total", I32, [], [context])]
    if rotary:
        rot = rotary_dim or head
        angles = np.outer(np.arange(context), 1.0 / 10000 ** (np.arange(0, rot, 2) / rot))
        inits += [onnx.numpy_helper.from_array(np.cos(angles).astype(np.float32), "cos"),
                  onnx.numpy_helper.from_array(np.sin(angles).astype(np.float32), "sin")]
        names += ["cos", "sin"]
        attrs["do_rotary"] = 1
    node = helper.make_node("GroupQueryAttention", names, ["y", "present_key", "present_value"], domain=MS,
                            num_heads=heads, kv_num_heads=kv_heads, **attrs)
    outputs = [helper.make_tensor_value_info("y", F, [b, s, hidden]),
               helper.make_tensor_value_info("present_key", F, [b, kv_heads, context, head]),
               helper.make_tensor_value_info("present_value", F, [b, kv_heads, context, head])]
    graph = helper.make_graph([node], "gqa", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid(MS, 1)])


def _ort(model, feeds):
    import onnxruntime as ort
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))


def _feeds(model, seqlens, seed=0):
    rng = np.random.default_rng(seed)
    feeds = {}
    for vi in model.graph.input:
        shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        feeds[vi.name] = np.asarray(seqlens, np.int32) if vi.name == "seqlens_k" else \
            rng.normal(size=shape).astype(np.float32)
    return feeds


@pytest.mark.parametrize("target", ["generic", "lavapipe"])
@pytest.mark.parametrize("kw, seqlens", [
    pytest.param(dict(s=1), [9], id="decode"),
    pytest.param(dict(s=5, rotary=True), [4], id="prefill-rotary"),
    pytest.param(dict(b=2, s=1, rotary=True, packed=True), [6, 20], id="b2-packed-rotary"),
    pytest.param(dict(s=3, packed=True), [12], id="chunk-packed"),
    pytest.param(dict(s=1, heads=8, kv_heads=1, scale=0.3, softcap=5.0), [30], id="mqa-scale-softcap"),
    pytest.param(dict(s=3, rotary=True, packed=True, head=32, rotary_dim=16), [10], id="partial-rotary"),
    pytest.param(dict(s=2, local_window_size=32), [30], id="window-holding-the-cache"),
    pytest.param(dict(s=1, local_window_size=4), [30], id="decode-window"),
    pytest.param(dict(b=2, s=1, rotary=True, packed=True, local_window_size=6), [3, 27], id="b2-decode-window"),
    pytest.param(dict(s=5, rotary=True, local_window_size=2), [12], id="chunk-window"),
    pytest.param(dict(s=7, local_window_size=3), [6], id="prefill-window"),
    pytest.param(dict(s=1, local_window_size=0), [17], id="window-of-its-own-key"),
])
def test_group_query_attention(target, kw, seqlens):
    model = gqa_model(**kw)
    feeds = _feeds(model, seqlens)
    ref = _ort(model, feeds)
    got, _ = run_bundle(compile_model(model, target=target, state="none"), feeds)
    assert_close("y", got["y"], ref["y"], rtol_l2=1e-4, rtol=1e-3, atol=1e-4)
    for name in ("present_key", "present_value"):  # the rows the sequence fills so far
        for i, n in enumerate(seqlens):
            np.testing.assert_allclose(got[name][i, :, :n + 1], ref[name][i, :, :n + 1], rtol=1e-5, atol=1e-6)


def test_decode_loop_with_state():
    """Prefill 4 tokens, then single steps: the caches stay in the bundle; outputs equal
    onnxruntime's with the caches fed back."""
    prefill, step = gqa_model(s=4, rotary=True), gqa_model(s=1, rotary=True)
    bundle = compile_model(prefill, variants=[{"q": [1, 4, 64], "k": [1, 4, 32], "v": [1, 4, 32]},
                                              {"q": [1, 1, 64], "k": [1, 1, 32], "v": [1, 1, 32]}], target="lavapipe")
    rng = np.random.default_rng(3)
    cache = {"past_key": np.zeros((1, 2, 32, 16), np.float32), "past_value": np.zeros((1, 2, 32, 16), np.float32)}
    filled = 0
    with load(bundle) as model:
        assert [x.name for x in model.state] == ["past_key", "past_value"]
        for n, graph in [(4, prefill), (1, step), (1, step), (1, step)]:
            qkv = {"q": rng.normal(size=(1, n, 64)).astype(np.float32),
                   "k": rng.normal(size=(1, n, 32)).astype(np.float32),
                   "v": rng.normal(size=(1, n, 32)).astype(np.float32),
                   "seqlens_k": np.array([filled + n - 1], np.int32)}
            ref = _ort(graph, {**qkv, **cache})
            assert_close("y", model.run(qkv)["y"], ref["y"], rtol_l2=1e-4, rtol=1e-3, atol=1e-4)
            cache = {"past_key": ref["present_key"], "past_value": ref["present_value"]}
            filled += n
        np.testing.assert_allclose(model.read_state("past_key")[:, :, :filled], cache["past_key"][:, :, :filled],
                                   rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kw, phrase", [
    (dict(s=40), "exceed the cache"),
])
def test_refused(kw, phrase):
    with pytest.raises(CompileError, match=phrase):
        compile_model(gqa_model(**kw), target="generic")


@pytest.mark.parametrize("target, precision, kw, seqlens, kernel", [
    ("generic", "fp32", dict(s=1, context=512), [300], "attention_tiled"),
    ("lavapipe", "fp32", dict(b=2, s=1, context=512, rotary=True), [40, 470], "attention_combine"),
    (emulating_cooperative_matrix(TARGETS["nvidia"]), "fp16", dict(s=80, context=256), [150], "attention_coopmat"),
])
def test_sliding_window_kernels(target, precision, kw, seqlens, kernel):
    """A window of 100 keys over a longer cache on each attention kernel: split-KV decode (its
    chunks over the window alone; the tiled kernel combining them itself, and lavapipe's combine
    kernel), and the cooperative-matrix prefill's key blocks from the window's first on."""
    model = gqa_model(local_window_size=100, **kw)
    feeds = _feeds(model, seqlens)
    ref = _ort(model, feeds)
    bundle, kernels = compile_with_kernels(model, target=target, state="none", precision=precision)
    assert kernel in [k.template for k in kernels]
    got, _ = run_bundle(bundle, feeds)
    tol = dict(rtol_l2=1e-2, rtol=1e9, atol=1e9) if precision == "fp16" else dict(rtol_l2=1e-4, rtol=1e-3, atol=1e-4)
    assert_close("y", got["y"], ref["y"], **tol)
