"""GatherElements against onnxruntime: every axis, int32 and int64 indices at run time or
constant, negative indices, indices smaller than the data, 64-bit data."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.harness import check_against_onnxruntime
from tests.onnx_builders import single_op_model


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
@pytest.mark.parametrize("dtype", [np.int64, np.int32], ids=["int64", "int32"])
def test_gather_elements_runtime_indices(axis, dtype):
    data_shape = [4, 70, 5]
    idx_shape = list(data_shape)
    idx_shape[axis] = 3
    idx_shape[(axis + 1) % 3] -= 1   # smaller than the data outside the axis too
    model = single_op_model("GatherElements", {"x": data_shape, "i": idx_shape}, {"axis": axis},
                            input_dtypes={"i": dtype})
    rng = np.random.default_rng(4)
    a = data_shape[axis]
    feeds = {"x": rng.standard_normal(data_shape).astype(np.float32),
             "i": rng.integers(-a, a, idx_shape).astype(dtype)}
    check_against_onnxruntime(model, feeds=feeds)


def test_gather_elements_constant_indices():
    idx = np.random.default_rng(5).integers(-6, 6, [3, 6, 2]).astype(np.int64)
    model = single_op_model("GatherElements", {"x": [3, 6, 2]}, {"axis": 1},
                            initializers={"i": idx})
    check_against_onnxruntime(model)
    check_against_onnxruntime(model, target="lavapipe")


def test_gather_elements_int64_data():
    model = single_op_model("GatherElements", {"x": [2, 100]}, {"axis": 1},
                            input_dtypes={"x": np.int64}, output_dtypes=[np.int64],
                            initializers={"i": np.array([[99, 0, -1], [5, 6, -100]], np.int64)})
    feeds = {"x": np.random.default_rng(6).integers(-2**40, 2**40, [2, 100])}
    check_against_onnxruntime(model, feeds=feeds, exact=True)


def test_gather_elements_of_constants_folds_past_64_choices_with_shorter_indices():
    """Folded at compile time (registry `evaluate`): onnx's reference cannot pick among more than
    64, and the indices are shorter than the data outside the axis."""
    rng = np.random.default_rng(7)
    table = rng.standard_normal([3, 100]).astype(np.float32)
    idx = rng.integers(-100, 100, [2, 5]).astype(np.int64)
    graph = helper.make_graph(
        [helper.make_node("GatherElements", ["table", "i"], ["g"], axis=1), helper.make_node("Add", ["x", "g"], ["y"])],
        "fold", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5])],
        [numpy_helper.from_array(table, "table"), numpy_helper.from_array(idx, "i")])
    result = check_against_onnxruntime(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    assert not any("GatherElements" in str(d.get("nodes")) for d in result["manifest"]["dispatches"])
