"""compile_model(weights=...): float weights quantized block-wise at compile time. The bundle
against onnxruntime running the same quantization as MatMulNBits / GatherBlockQuantized nodes
(tests/quantized_onnx.py: the kernels exactly, rel L2 < 1e-4), against the float model within
the quantization's own error, the numbers of the quantization itself, what stays float, the tied
embedding stored once, and the manifest's record."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from bundles import read_bundle
from compiler import compile_model
from compiler.errors import CompileError
from compiler.passes.quantize_weights import (MIN_ELEMENTS, WeightQuantization, dequantize_blocks,
                                              quantize_blocks)
from tests.harness import assert_close, close_stats, run_bundle, run_onnxruntime
from tests.llm_models import tiny_llama
from tests.quantized_onnx import quantized_onnx

F = TensorProto.FLOAT
SCHEMES = ["int8", "int4", "int4-sym"]
# rel L2 of one product by a unit-normal weight against the float product: the rounding step is
# about 5 sigma / 254 (int8) and 5 sigma / 15 (int4), its error a twelfth of the step squared.
FLOAT_TOLERANCE = {"int8": 1e-2, "int4": 0.15, "int4-sym": 0.2}


@pytest.mark.parametrize("scheme", SCHEMES)
def test_quantize_blocks(scheme):
    rng = np.random.default_rng(0)
    q = WeightQuantization.parse(scheme, 32)
    w = rng.standard_normal((80, 6)).astype(np.float32)  # K = 80: a partial last block
    w[:32, 0] = 0           # an all-zero block
    w[5, 1] = 0             # zero inside a block stays exactly zero
    qv, scale, zp = quantize_blocks(w, q.bits, q.block_size, q.symmetric)
    assert qv.shape == (6, 96) and scale.shape == (6, 3) and qv.max() < 2 ** q.bits
    back = dequantize_blocks(qv, scale, zp, 80, q.bits)
    step = np.repeat(scale.T, 32, axis=0)[:80]  # each weight's scale
    assert np.all(np.abs(back - w) <= step / 2 * (1 + 1e-6)), "within half a step"
    assert back[5, 1] == 0 and np.all(back[:32, 0] == 0) and scale[0, 0] == 0
    z = (zp if zp is not None else np.full(scale.shape, 2 ** (q.bits - 1))).astype(int)
    assert np.all(qv.reshape(6, 3, 32)[:, 2, 16:] == z[:, 2, None]), "padding past K at the zero point"
    if q.symmetric:
        assert zp is None and np.all(np.abs(qv.astype(int) - 2 ** (q.bits - 1)) <= 2 ** (q.bits - 1) - 1)
    else:
        assert zp.dtype == np.uint8 and zp.max() <= 15


def _gemm_model(k=64, n=40, m=3):
    rng = np.random.default_rng(1)
    inits = [numpy_helper.from_array(rng.standard_normal((n, k)).astype(np.float32), "b"),
             numpy_helper.from_array(rng.standard_normal(n).astype(np.float32), "c")]
    node = helper.make_node("Gemm", ["a", "b", "c"], ["y"], name="gemm", transB=1, alpha=0.5, beta=2.0)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("a", F, [m, k])],
                              [helper.make_tensor_value_info("y", F, [m, n])], inits)
    return helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 17)])


def _matmul_model(a_shape, n, *, small=False):
    """y = relu(a @ w1) @ w2, w1 [K, N]; `small` adds a product by a weight under MIN_ELEMENTS."""
    rng = np.random.default_rng(2)
    k = a_shape[-1]
    inits = [numpy_helper.from_array((rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32), "w1"),
             numpy_helper.from_array((rng.standard_normal((n, n)) / np.sqrt(n)).astype(np.float32), "w2")]
    nodes = [helper.make_node("MatMul", ["a", "w1"], ["h"], name="mm1"),
             helper.make_node("Relu", ["h"], ["r"], name="relu"),
             helper.make_node("MatMul", ["r", "w2"], ["y"], name="mm2")]
    out_n = n
    if small:
        inits.append(numpy_helper.from_array(rng.standard_normal((n, 2)).astype(np.float32), "w3"))
        nodes.append(helper.make_node("MatMul", ["y", "w3"], ["z"], name="head"))
        out_n = 2
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("a", F, a_shape)],
                              [helper.make_tensor_value_info("z" if small else "y", F, [*a_shape[:-1], out_n])],
                              inits)
    return helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 17)])


MODELS = [
    pytest.param(lambda: _matmul_model([1, 1, 256], 96), {}, id="decode"),
    pytest.param(lambda: _matmul_model([1, 5, 80], 48), {}, id="prompt-k-past-last-block"),
    pytest.param(lambda: _matmul_model([1, 64, 128], 40), {}, id="prompt-dequantized-gemm"),
    pytest.param(lambda: _matmul_model([2, 128], 64), {"weights_block": 64}, id="block-64"),
    pytest.param(lambda: _matmul_model([2, 64], 32), {"weights_block": 16}, id="block-16"),
    pytest.param(lambda: _gemm_model(), {}, id="gemm-transB-alpha-beta"),
]


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("build,kw", MODELS)
def test_against_onnxruntime(build, kw, scheme):
    """The kernels exactly (the same numbers in onnxruntime's MatMulNBits), and the float model
    within the quantization's error."""
    model = build()
    bundle = compile_model(model, target="lavapipe", weights=scheme, **kw)
    manifest = read_bundle(bundle).manifest
    assert manifest["quantized_weights"]["float"] == []
    oracle = quantized_onnx(model, manifest)
    feeds = {i.name: np.random.default_rng(3).standard_normal(
        [d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32) for i in model.graph.input}
    got, _ = run_bundle(bundle, feeds)
    ref = run_onnxruntime(oracle, feeds)
    for name in ref:
        assert_close(name, got[name], ref[name], rtol_l2=1e-4)
        floats = run_onnxruntime(model, feeds)[name]
        assert close_stats(got[name], floats)["rel_l2"] < FLOAT_TOLERANCE[scheme]


def test_small_weights_stay_float():
    model = _matmul_model([1, 64], 32, small=True)   # the head's 32 x 2 weights
    bundle = compile_model(model, target="lavapipe", weights="int8")
    q = read_bundle(bundle).manifest["quantized_weights"]
    assert [e["node"] for e in q["quantized"]] == ["mm1", "mm2"]
    assert q["float"] == [{"node": "head", "why": f"64 weights, under the {MIN_ELEMENTS} worth quantizing"}]
    assert {"scheme": "int8", "bits": 8, "symmetric": True, "block_size": 32}.items() <= q.items()
    feeds = {"a": np.random.default_rng(0).standard_normal((1, 64)).astype(np.float32)}
    got, _ = run_bundle(bundle, feeds)
    assert_close("z", got["z"], run_onnxruntime(quantized_onnx(model, read_bundle(bundle).manifest), feeds)["z"],
                 rtol_l2=1e-4)


def test_block_longer_than_k_stays_float():
    q = read_bundle(compile_model(_matmul_model([1, 32], 64), target="lavapipe", weights="int4",
                                  weights_block=64)).manifest["quantized_weights"]
    assert [e["node"] for e in q["quantized"]] == ["mm2"]
    assert q["float"] == [{"node": "mm1", "why": "K = 32, shorter than a block of 64"}]


@pytest.mark.parametrize("scheme", SCHEMES)
def test_tied_embedding_is_stored_once(scheme):
    """The LM head is the embedding transposed: one packed table for GatherBlockQuantized and
    MatMulNBits, so the tied model's weights are the untied one's less a table."""
    sizes, manifests = {}, {}
    for tied in (False, True):
        model = tiny_llama(layers=1, context=16, tied=tied)
        manifests[tied] = read_bundle(compile_model(model, input_shapes={"input_ids": [1, 1]}, target="lavapipe",
                                                    weights=scheme)).manifest
        sizes[tied] = manifests[tied]["memory"]["weights_bytes"]
    head = manifests[True]["quantized_weights"]["quantized"][-1]
    assert head["node"] == "logits" and head["tied_to"] == "embed"
    assert manifests[True]["quantized_weights"]["quantized"][0]["op"] == "GatherBlockQuantized"
    vocab, hidden = 64, 32
    table = vocab * hidden * WeightQuantization.parse(scheme).bits // 8
    assert sizes[False] - sizes[True] >= table


def test_float16_model():
    """A float16 model: float16 scales; the kernels against onnxruntime in float16."""
    model = _matmul_model([1, 128], 64)
    for init in model.graph.initializer:
        init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init).astype(np.float16), init.name))
    for vi in [*model.graph.input, *model.graph.output]:
        vi.type.tensor_type.elem_type = TensorProto.FLOAT16
    bundle = compile_model(model, target="lavapipe", weights="int4")
    scales = [t for t in read_bundle(bundle).manifest["tensors"] if t["name"].endswith("/scales")]
    assert scales and all(t["dtype"] == "float16" for t in scales)
    feeds = {"a": np.random.default_rng(0).standard_normal((1, 128)).astype(np.float16)}
    got, _ = run_bundle(bundle, feeds)
    ref = run_onnxruntime(quantized_onnx(model, read_bundle(bundle).manifest), feeds)
    assert_close("y", got["y"].astype(np.float32), ref["y"].astype(np.float32), rtol_l2=1e-2, rtol=1e9, atol=1e9)


def test_fp16_precision_with_int8_weights():
    model = _matmul_model([1, 4, 128], 64)
    bundle = compile_model(model, target="lavapipe", weights="int8", precision="fp16")
    feeds = {"a": np.random.default_rng(0).standard_normal((1, 4, 128)).astype(np.float32)}
    got, _ = run_bundle(bundle, feeds)
    ref = run_onnxruntime(quantized_onnx(model, read_bundle(bundle).manifest), feeds)
    assert_close("y", got["y"], ref["y"], rtol_l2=1e-2, rtol=1e9, atol=1e9)


def test_without_weights_nothing_changes():
    model = _matmul_model([1, 64], 32)
    manifest = read_bundle(compile_model(model, target="lavapipe")).manifest
    assert "quantized_weights" not in manifest
    assert not any(k["name"].startswith("matmul_nbits") for k in manifest["kernels"])


@pytest.mark.parametrize("kw, words", [
    (dict(weights="int3"), ["--weights int3", "int8", "int4-sym"]),
    (dict(weights="int4", weights_block=7), ["--weights-block 7", "power of two"]),
    (dict(weights="int8", weights_block=0), ["power of two"]),
    (dict(weights_block=64), ["without --weights"]),
])
def test_refused(kw, words):
    with pytest.raises(CompileError) as e:
        compile_model(_matmul_model([1, 64], 32), target="lavapipe", **kw)
    assert all(w in str(e.value) for w in words) and "\n" not in str(e.value)


def test_cli_inspect(tmp_path):
    from typer.testing import CliRunner
    from compiler.cli import app
    onnx.save(tiny_llama(layers=1, context=16, tied=True), tmp_path / "llama.onnx")
    r = CliRunner().invoke(app, ["compile", str(tmp_path / "llama.onnx"), "-o", str(tmp_path / "q.vkb"),
                                 "--target", "lavapipe", "--variant", "input_ids=1x1", "--weights", "int4",
                                 "--weights-block", "16"])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(app, ["inspect", str(tmp_path / "q.vkb")])
    assert r.exit_code == 0, r.output
    assert "weights int4, blocks of 16: 1 GatherBlockQuantized (x0); 8 MatMulNBits" in r.output
    assert "tied: logits reads the packed table of embed" in r.output


def test_packed_weight_over_a_binding_is_split(monkeypatch):
    """A packed weight past what every device binds (an LLM head) becomes products of blocks of
    its columns, concatenated: the same numbers as onnxruntime's single MatMulNBits."""
    import sys
    monkeypatch.setattr(sys.modules["compiler.passes.quantize_weights"], "MAX_PACKED_BYTES", 2048)
    model = _matmul_model([1, 3, 128], 100)   # w1 packs 100 x 128 bytes (int8): 7 products
    bundle = compile_model(model, target="lavapipe", weights="int8")
    manifest = read_bundle(bundle).manifest
    assert sum(d["nodes"] == ["mm1"] and manifest["kernels"][d["kernel"]]["name"].startswith("matmul_nbits")
               for d in manifest["dispatches"]) == 7
    feeds = {"a": np.random.default_rng(0).standard_normal((1, 3, 128)).astype(np.float32)}
    got, _ = run_bundle(bundle, feeds)
    assert_close("y", got["y"], run_onnxruntime(quantized_onnx(model, manifest), feeds)["y"], rtol_l2=1e-4)
