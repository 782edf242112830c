"""Errors: unsupported ops at compile time, bad inputs at run time."""

import re

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tests.harness import compile_cached
from tests.onnx_builders import IR_VERSION, OPSET, single_op_model

UNSUPPORTED_NODES = {"lstm_encoder": "LSTM", "lstm_decoder": "LSTM", "box_nms": "NonMaxSuppression"}


def _model_with_unsupported_ops() -> onnx.ModelProto:
    """Two LSTM nodes and one NonMaxSuppression (three nodes, two op types) next to a supported
    Relu."""
    rng = np.random.default_rng(30)
    hidden, feat = 4, 3
    f32 = TensorProto.FLOAT

    def w(*shape):
        return helper.make_tensor(f"w{len(inits)}", f32, shape, (rng.standard_normal(shape) * 0.3).ravel().tolist())

    inits = []
    inits.append(w(1, 4 * hidden, feat))
    inits.append(w(1, 4 * hidden, hidden))
    inits.append(w(1, 4 * hidden, hidden))
    inits.append(w(1, 4 * hidden, hidden))
    inits.append(helper.make_tensor("max_boxes", TensorProto.INT64, [1], [3]))
    nodes = [
        helper.make_node("Relu", ["seq"], ["seq_relu"], name="relu_ok"),
        helper.make_node("LSTM", ["seq_relu", "w0", "w1"], ["enc_y"], name="lstm_encoder", hidden_size=hidden),
        helper.make_node("Squeeze", ["enc_y", "axis1"], ["enc_y_sq"], name="squeeze_ok"),
        helper.make_node("LSTM", ["enc_y_sq", "w2", "w3"], ["dec_y"], name="lstm_decoder", hidden_size=hidden),
        helper.make_node("NonMaxSuppression", ["boxes", "scores", "max_boxes"], ["selected"], name="box_nms"),
    ]
    inits.append(helper.make_tensor("axis1", TensorProto.INT64, [1], [1]))
    graph = helper.make_graph(
        nodes, "unsupported",
        [helper.make_tensor_value_info("seq", f32, [5, 1, feat]),
         helper.make_tensor_value_info("boxes", f32, [1, 6, 4]),
         helper.make_tensor_value_info("scores", f32, [1, 1, 6])],
        [helper.make_tensor_value_info("dec_y", f32, [5, 1, 1, hidden]),
         helper.make_tensor_value_info("selected", TensorProto.INT64, ["num_selected", 3])],
        initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model, full_check=True)
    return model


def test_unsupported_ops_are_all_listed():
    from compiler import CompileError, UnsupportedOpsError, compile_model

    assert issubclass(UnsupportedOpsError, CompileError)
    assert issubclass(CompileError, ValueError)
    with pytest.raises(UnsupportedOpsError) as info:
        compile_model(_model_with_unsupported_ops())
    msg = str(info.value)
    for node_name, op_type in UNSUPPORTED_NODES.items():
        assert op_type in msg, f"op type {op_type} missing from: {msg}"
        assert node_name in msg, f"node name {node_name} missing from: {msg}"
    assert "relu_ok" not in msg, f"a supported node is listed as unsupported: {msg}"


# ---------------------------------------------------------------------------------------------
# run-time input checks
# ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def relu_model():
    from runtime_min import load

    bundle = compile_cached(single_op_model("Relu", {"x": [2, 3]}))
    model = load(bundle, validation=True)
    yield model
    model.close()


def _mentions_shape(msg: str, shape) -> bool:
    forms = [str(list(shape)), str(tuple(shape)), "x".join(map(str, shape)),
             ", ".join(map(str, shape)), ",".join(map(str, shape))]
    return any(f in msg for f in forms)


def test_run_missing_input(relu_model):
    with pytest.raises(ValueError) as info:
        relu_model.run({})
    assert "x" in re.findall(r"\w+", str(info.value)), f"input name 'x' not named in: {info.value}"


def test_run_wrong_shape(relu_model):
    with pytest.raises(ValueError) as info:
        relu_model.run({"x": np.ones((3, 2), np.float32)})
    msg = str(info.value)
    assert "x" in re.findall(r"\w+", msg), f"input name not in: {msg}"
    assert _mentions_shape(msg, (2, 3)), f"expected shape (2, 3) not in: {msg}"
    assert _mentions_shape(msg, (3, 2)), f"given shape (3, 2) not in: {msg}"


def test_run_wrong_dtype(relu_model):
    with pytest.raises(ValueError) as info:
        relu_model.run({"x": np.ones((2, 3), np.float64)})
    msg = str(info.value)
    assert "x" in re.findall(r"\w+", msg), f"input name not in: {msg}"
    assert "float32" in msg and "float64" in msg, f"expected float32 and given float64 not both in: {msg}"


def test_run_still_works_after_errors(relu_model):
    x = np.random.default_rng(31).standard_normal((2, 3)).astype(np.float32)
    out = relu_model.run({"x": x})
    np.testing.assert_array_equal(out["y"], np.maximum(x, 0))
