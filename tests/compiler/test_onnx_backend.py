"""compiler.onnx_backend: the onnx.backend.base.Backend interface over compile + runtime_min."""

import numpy as np
import pytest
from onnx import helper
from onnx.backend.test.runner import BackendIsNotSupposedToImplementIt

from compiler import onnx_backend as backend
from onnx_builders import single_op_model


def test_prepare_and_run_returns_outputs_in_order():
    model = single_op_model("Split", {"x": [4, 6]}, {"axis": 1}, outputs=["a", "b"])
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    rep = backend.prepare(model)
    a, b = rep.run([x])
    np.testing.assert_array_equal(a, x[:, :3])
    np.testing.assert_array_equal(b, x[:, 3:])
    (a2, _) = rep.run({"x": x + 1})
    np.testing.assert_array_equal(a2, x[:, :3] + 1)
    rep.close()


def test_run_model_and_run_node():
    x = np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4)
    (y,) = backend.run_model(single_op_model("Relu", {"x": [3, 4]}), [x])
    np.testing.assert_array_equal(y, np.maximum(x, 0))
    (z,) = backend.run_node(helper.make_node("Sigmoid", ["x"], ["z"]), [x])
    np.testing.assert_allclose(z, 1 / (1 + np.exp(-x)), rtol=1e-5)


def test_shape_inputs_are_frozen_at_first_run():
    """Reshape's shape as a graph input: compiled on the first run with its value, recompiled
    when it changes."""
    model = single_op_model("Reshape", {"x": [2, 6], "shape": [2]}, input_dtypes={"shape": np.int64})
    rep = backend.prepare(model)
    assert rep.static == ["shape"]
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    (y,) = rep.run([x, np.array([3, 4], np.int64)])
    assert y.shape == (3, 4)
    (y,) = rep.run([x, np.array([4, -1], np.int64)])
    assert y.shape == (4, 3)
    rep.close()


def test_unsupported_op_and_dtype_are_skips():
    with pytest.raises(BackendIsNotSupposedToImplementIt, match="Det"):
        backend.prepare(single_op_model("Det", {"a": [3, 3]}))
    model = single_op_model("Exp", {"x": [3]}, input_dtypes={"x": np.float64}, output_dtypes=[np.float64])
    with pytest.raises(BackendIsNotSupposedToImplementIt, match="computes exp on float64"):
        backend.prepare(model)  # GLSL has no double exp()


def test_newer_opset_with_unchanged_ops_runs_as_22():
    model = single_op_model("Transpose", {"x": [2, 3]}, {"perm": [1, 0]})
    model.opset_import[0].version = 25
    assert backend.normalize_opset(model).opset_import[0].version == 22
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(backend.run_model(model, [x])[0], x.T)


def test_older_opset_with_unchanged_ops_runs_as_7():
    """ONNX's Not cases import opset 1; Not is defined at 7 as at 1 (Relu is not: it had
    consumed_inputs until opset 6)."""
    model = single_op_model("Not", {"x": [4]}, input_dtypes={"x": np.bool_}, output_dtypes=[np.bool_])
    model.opset_import[0].version = 1
    assert backend.normalize_opset(model).opset_import[0].version == 7
    x = np.array([True, False, False, True])
    np.testing.assert_array_equal(backend.run_model(model, [x])[0], ~x)
    relu = single_op_model("Relu", {"x": [2]})
    relu.opset_import[0].version = 5
    assert backend.normalize_opset(relu).opset_import[0].version == 5


def test_supports_device():
    assert backend.supports_device("CPU") and backend.supports_device("GPU")
    assert not backend.supports_device("CUDA")
    assert backend.VkcBackend.is_compatible(single_op_model("Relu", {"x": [2]}))
    assert not backend.VkcBackend.is_compatible(single_op_model("Det", {"a": [3, 3]}))


def test_an_op_whose_newer_schema_only_added_types_runs_at_22():
    """Cast gained float4/int2 types and a round_mode attribute at opsets 23-25; a float -> float16
    Cast at opset 25 means what it meant at 22 and is relabeled, a cast to int2 is not."""
    from onnx import TensorProto, helper

    from compiler.onnx_backend import normalize_opset

    def cast_model(to):
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])
        y = helper.make_tensor_value_info("y", to, [3])
        node = helper.make_node("Cast", ["x"], ["y"], to=to)
        return helper.make_model(helper.make_graph([node], "g", [x], [y]),
                                 opset_imports=[helper.make_opsetid("", 25)])

    def opset(m):
        return next(i.version for i in m.opset_import if i.domain in ("", "ai.onnx"))

    assert opset(normalize_opset(cast_model(TensorProto.FLOAT16))) == 22
    assert opset(normalize_opset(cast_model(TensorProto.INT2))) == 25
