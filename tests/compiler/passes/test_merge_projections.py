"""merge_projections: Q, K and V projections of the same activations become one MatMul by the
weights side by side, a bias Add (zeros where a projection had none) and a Split that attention
reads in place; projections whose result another op reads stay apart. The merged bundle agrees
with onnxruntime."""
import numpy as np
import pytest
from onnx import helper, numpy_helper

from tests.attention_models import self_attention_block
from tests.harness import check_against_onnxruntime
from tests.onnx_builders import make_model, tensor_info

from compiler.frontend import to_ir
from compiler.passes import fold_constants, run_passes


def _ops(model):
    return [n.op_type for n in run_passes(fold_constants(to_ir(model))).nodes]


def _projections(biases, scale_q=False, hidden=16, heads=2, s=5, k_dim=16):
    """X [1, s, k_dim] projected to Q, K, V (a bias Add where biases[i]), split into heads,
    scores = Q Kᵀ (Q scaled by a Mul where scale_q), softmax, times V."""
    rng = np.random.default_rng(0)
    d = hidden // heads
    nodes, inits = [], []
    heads_shape = numpy_helper.from_array(np.array([1, s, heads, d], np.int64), "heads_shape")
    inits.append(heads_shape)
    outs = {}
    for i, name in enumerate("qkv"):
        w = numpy_helper.from_array(rng.standard_normal((k_dim, hidden)).astype(np.float32), f"w{name}")
        inits.append(w)
        nodes.append(helper.make_node("MatMul", ["x", f"w{name}"], [f"{name}_mm"], name=f"{name}_proj"))
        y = f"{name}_mm"
        if biases[i]:
            inits.append(numpy_helper.from_array(rng.standard_normal(hidden).astype(np.float32), f"b{name}"))
            nodes.append(helper.make_node("Add", [y, f"b{name}"], [f"{name}_b"], name=f"{name}_bias"))
            y = f"{name}_b"
        if name == "q" and scale_q:
            inits.append(numpy_helper.from_array(np.array(0.5, np.float32), "scale"))
            nodes.append(helper.make_node("Mul", [y, "scale"], ["q_s"], name="q_scale"))
            y = "q_s"
        nodes.append(helper.make_node("Reshape", [y, "heads_shape"], [f"{name}_h"], name=f"{name}_heads"))
        perm = [0, 2, 3, 1] if name == "k" else [0, 2, 1, 3]
        nodes.append(helper.make_node("Transpose", [f"{name}_h"], [f"{name}_t"], perm=perm, name=f"{name}_t"))
        outs[name] = f"{name}_t"
    nodes += [helper.make_node("MatMul", [outs["q"], outs["k"]], ["scores"], name="qk"),
              helper.make_node("Softmax", ["scores"], ["probs"], axis=-1, name="softmax"),
              helper.make_node("MatMul", ["probs", outs["v"]], ["ctx"], name="pv")]
    graph = helper.make_graph(nodes, "projections", [tensor_info("x", [1, s, k_dim])],
                              [tensor_info("ctx", None)], inits)
    return make_model(graph)


def test_bert_block_has_one_projection():
    model = self_attention_block(2, 7, 2, 16)
    assert _ops(model).count("MatMul") == 2   # the merged projection and the output projection


@pytest.mark.parametrize("biases", [(1, 1, 1), (1, 0, 1), (0, 0, 0)])
def test_merged_projection_matches_onnxruntime(biases):
    model = _projections(biases)
    graph = run_passes(fold_constants(to_ir(model)))
    [projection] = [n for n in graph.nodes if n.op_type == "MatMul"]
    assert projection.inputs[1].shape == (16, 48)
    assert graph.nodes[-1].op_type == "vkc.Attention"
    assert not any(n.op_type in ("Split", "Transpose") for n in graph.nodes)
    check_against_onnxruntime(model, target="generic")


def test_projection_read_by_another_op_stays_apart():
    """A scaled Q (Whisper's export) would need a copy out of the Split: only K and V merge."""
    model = _projections((1, 0, 1), scale_q=True)
    graph = run_passes(fold_constants(to_ir(model)))
    weights = sorted(n.inputs[1].shape for n in graph.nodes if n.op_type == "MatMul" and n.inputs[1].is_constant)
    assert weights == [(16, 16), (16, 32)]
    check_against_onnxruntime(model, target="generic")


def _decode_step(llama, weights=None, s=1):
    """The passes' graph of tiny_llama's step of s tokens, and the bundle (caches as inputs and
    outputs: state none) with its feeds: 5 cache rows filled with random values."""
    from compiler.compile import compile_model, lower_model
    from tests.llm_models import step_feeds
    shapes = {"input_ids": [1, s]}
    graph = lower_model(llama, input_shapes=shapes, target="lavapipe", weights=weights, state="none")[1]
    bundle = compile_model(llama, input_shapes=shapes, target="lavapipe", weights=weights, state="none")
    return graph, bundle, step_feeds(llama, [7, 3, 9, 1][:s], 5)


@pytest.mark.parametrize("weights", [None, "int4"])
def test_decode_step_merges_qkv(weights):
    """ONNX's in-place cache form (tests/llm_models.py) at one token: Q, K and V are one product
    (MatMul, or MatMulNBits of the three packed weights), one rotary embedding of Q and K reads
    their columns of it in place (the head split is a view), storing K's row in its cache and
    carrying V's columns into theirs (an output each), folded into the attention; no Split is left; the logits and the
    caches as onnxruntime computes them (for int4 the same quantization as MatMulNBits nodes:
    tests/quantized_onnx.py)."""
    from bundles import read_bundle
    from tests.harness import assert_close, run_bundle, run_onnxruntime
    from tests.llm_models import tiny_llama
    from tests.quantized_onnx import quantized_onnx
    llama = tiny_llama(layers=2, context=16)
    graph, bundle, feeds = _decode_step(llama, weights)
    product = "MatMul" if weights is None else "MatMulNBits"
    projections = [n for n in graph.nodes if n.op_type == product and n.name.endswith(".v/matmul")]
    assert [n.name for n in projections] == [f"layers.{i}.q+layers.{i}.k+layers.{i}.v/matmul" for i in range(2)]
    # the rotary embedding, folded into the attention that reads it (passes/rotary_in_attention.py)
    rotaries = [n.attrs["rotary"]["unfused"][0] for n in graph.nodes if "rotary" in n.attrs]
    assert sorted((n.op_type, len(n.outputs), "input_columns" in n.attrs) for n in rotaries) == \
        [("RotaryEmbedding", 3, True)] * 2
    assert not any(n.op_type == "Split" for n in graph.nodes)
    oracle = llama if weights is None else quantized_onnx(llama, read_bundle(bundle).manifest)
    got, ref = run_bundle(bundle, feeds)[0], run_onnxruntime(oracle, feeds)
    for name in ref:
        assert_close(name, got[name], ref[name], rtol_l2=1e-5, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("weights", [None, "int4"])
def test_prompt_merges_qkv(weights):
    """At 4 tokens the head split is a Transpose: the rotary embeddings move before it and the
    attention and V's cache write read it as strides (passes/transposes_in_place.py), so Q, K and
    V are one product here too; against onnxruntime."""
    from bundles import read_bundle
    from tests.harness import assert_close, run_bundle, run_onnxruntime
    from tests.llm_models import tiny_llama
    from tests.quantized_onnx import quantized_onnx
    llama = tiny_llama(layers=1, context=16)
    graph, bundle, feeds = _decode_step(llama, weights, s=4)
    products = [n.name for n in graph.nodes if n.op_type in ("MatMul", "MatMulNBits")]
    assert products[0] == "layers.0.q+layers.0.k+layers.0.v/matmul"
    assert "Transpose" not in {n.op_type for n in graph.nodes}
    oracle = quantized_onnx(llama, read_bundle(bundle).manifest) if weights else llama
    got, ref = run_bundle(bundle, feeds)[0], run_onnxruntime(oracle, feeds)
    for name in ref:
        assert_close(name, got[name], ref[name], rtol_l2=1e-5, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("weights", ["int4", "int8"])
def test_block_quantized_projections_merge(weights):
    """--weights: BERT's Q, K and V MatMulNBits become one (packed rows, scales and zero points
    one after the other) that attention reads through the Split; against onnxruntime running the
    same quantization as three MatMulNBits nodes."""
    from bundles import read_bundle
    from compiler.compile import compile_model, lower_model
    from tests.harness import assert_close, random_feeds, run_bundle, run_onnxruntime
    from tests.quantized_onnx import quantized_onnx
    model = self_attention_block(2, 7, 2, 32)
    graph = lower_model(model, target="lavapipe", weights=weights)[1]
    assert [n.op_type for n in graph.nodes].count("MatMulNBits") == 2   # Q+K+V, the output projection
    bundle = compile_model(model, target="lavapipe", weights=weights)
    oracle = quantized_onnx(model, read_bundle(bundle).manifest)
    feeds = random_feeds(model)
    got, ref = run_bundle(bundle, feeds)[0], run_onnxruntime(oracle, feeds)
    for name in ref:
        assert_close(name, got[name], ref[name], rtol_l2=1e-5, rtol=1e-4, atol=1e-5)
