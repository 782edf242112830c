"""compiler.onnx_backend: the onnx.backend.base.Backend interface over compile + runtime_min."""

import dataclasses

import numpy as np
import pytest
from onnx import helper
from onnx.backend.test.runner import BackendIsNotSupposedToImplementIt

from compiler import onnx_backend as backend
from tests.onnx_builders import single_op_model


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
    model = single_op_model("Sigmoid", {"x": [3]}, input_dtypes={"x": np.float64}, output_dtypes=[np.float64])
    with pytest.raises(BackendIsNotSupposedToImplementIt, match="computes sigmoid on float64"):
        backend.prepare(model)  # no float64 text for sigmoid


def test_opset_25_runs_as_it_is():
    """Opsets up to 28 compile directly (Transpose-25 only added element types)."""
    model = single_op_model("Transpose", {"x": [2, 3]}, {"perm": [1, 0]})
    model.opset_import[0].version = 25
    assert backend.normalize_opset(model).opset_import[0].version == 25
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


def test_a_newer_schema_that_changed_more_than_types_is_refused(monkeypatch):
    """A declaration written against opset 22 covers Cast-23 (it only added float4e2m1) but not
    Cast-24 (round_mode): there the op is unsupported, by name, unless the declaration says it
    implements that schema version, as the real one does (through 25)."""
    from compiler import registry

    real = registry.find_rule("Cast", "", 24)
    assert real is not None and real.schema == 25
    monkeypatch.setitem(registry._RULES, "Cast", {1: dataclasses.replace(real, schema=22)})
    assert registry.find_rule("Cast", "", 23) is not None
    assert registry.find_rule("Cast", "", 24) is None
    assert not registry.is_supported("Cast", "", 28)
