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
