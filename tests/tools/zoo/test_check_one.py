"""tools/zoo/check_one.py's measure of onnxruntime's own spread: the model with every float32
weight one float32 step away, beside its graph optimizations on and off."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from tools.zoo.check_one import check, run_with_weights_one_step_away, weights_one_step_away

BIG = np.finfo(np.float32).max


def _model(nodes, inputs, outputs, weights) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs,
                              [numpy_helper.from_array(a, n) for n, a in weights.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_every_finite_nonzero_weight_moves_one_step():
    w = np.array([[0.0, 1.0, -2.5, np.inf], [BIG, -BIG, 3e-39, 7.0]], np.float32)
    model = _model([helper.make_node("Mul", ["x", "w"], ["y"]), helper.make_node("Add", ["y", "s"], ["z"])],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                   [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 4])],
                   {"w": w, "s": np.array(0.5, np.float32), "i": np.arange(4, dtype=np.int64)})
    moved = weights_one_step_away(model, seed=0)
    assert set(moved) == {"w"}  # a scalar and an integer tensor stay
    got = moved["w"].numpy()
    with np.errstate(over="ignore"):
        up, down = np.nextafter(w, np.float32(np.inf)), np.nextafter(w, np.float32(-np.inf))
    stays = (w == 0) | ~np.isfinite(w)
    assert np.array_equal(got[stays], w[stays])
    one_step = (got == up) | (got == down)
    assert one_step[~stays & (np.abs(w) < BIG)].all()
    assert np.isfinite(got).sum() == np.isfinite(w).sum()  # the largest finite value never becomes inf


def test_a_convolution_weight_step_moves_its_output(tmp_path):
    """With onnxruntime's graph optimizations on, a Conv reads its weights from the model, not
    from add_initializer, and the step would move nothing."""
    rng = np.random.default_rng(0)
    model = _model([helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1])],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 8])],
                   {"w": rng.standard_normal([8, 4, 3, 3]).astype(np.float32),
                    "b": rng.standard_normal(8).astype(np.float32)})
    feed = {"x": rng.standard_normal([1, 4, 8, 8]).astype(np.float32)}
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    (want,) = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feed)
    path = tmp_path / "conv.onnx"
    onnx.save(model, str(path))
    (got,), = run_with_weights_one_step_away(path, model, 0, [feed])
    assert 0 < np.abs(got - want).max() < 1e-5 * np.abs(want).max()


def test_a_cancelling_difference_is_judged_against_its_weight_spread(tmp_path):
    """x @ W1 - x @ W2 with W2 a hair from W1: onnxruntime's optimization levels compute it in the
    same order (no spread), while float32's rounding of either product, at the size of the
    products, is a large part of the small difference; the check measures that and judges fp32
    against it, instead of calling any other float32 order of the sums wrong."""
    rng = np.random.default_rng(0)
    w1 = rng.standard_normal([64, 32]).astype(np.float32)
    w2 = (w1 + 1e-4 * rng.standard_normal(w1.shape)).astype(np.float32)
    model = _model([helper.make_node("MatMul", ["x", "w1"], ["a"]), helper.make_node("MatMul", ["x", "w2"], ["b"]),
                    helper.make_node("Sub", ["a", "b"], ["y"])],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32])],
                   {"w1": w1, "w2": w2})
    path = tmp_path / "cancel.onnx"
    onnx.save(model, str(path))
    recipe = {"inputs": [{"name": "x", "kind": "float", "dtype": "float32", "shape": [1, 64]}]}
    result = check(path, recipe, seed=0, configs=[("fp32", "host")])
    assert result["optimization_spread"] < 1e-4 < result["weight_step_spread"]
    assert result["reference_spread"] == result["weight_step_spread"]
    assert result["configs"]["fp32/host"]["status"] == "matched", result
