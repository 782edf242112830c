"""CumSum against onnxruntime: every axis, exclusive and reverse, float32 and integers."""

import numpy as np
import pytest

from tests.harness import check_against_onnxruntime
from tests.onnx_builders import single_op_model

from compiler import compile_model
from compiler.errors import CompileError


def cumsum_model(shape, axis, dtype=np.float32, axis_dtype=np.int64, **attrs):
    return single_op_model("CumSum", {"x": shape}, attrs,
                           initializers={"axis": np.array(axis, axis_dtype)},
                           input_dtypes={"x": dtype}, output_dtypes=[dtype])


@pytest.mark.parametrize("attrs", [{}, {"exclusive": 1}, {"reverse": 1},
                                   {"exclusive": 1, "reverse": 1}],
                         ids=["inclusive", "exclusive", "reverse", "exclusive-reverse"])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_cumsum_float32(axis, attrs):
    check_against_onnxruntime(cumsum_model([3, 40, 6], axis, **attrs))


@pytest.mark.parametrize("dtype", [np.int32, np.int64], ids=["int32", "int64"])
def test_cumsum_integers(dtype):
    model = cumsum_model([4, 9], 1, dtype, axis_dtype=np.int32, exclusive=1)
    feeds = {"x": np.random.default_rng(3).integers(-100, 100, [4, 9]).astype(dtype)}
    check_against_onnxruntime(model, feeds=feeds, exact=True)


def test_cumsum_lavapipe():
    check_against_onnxruntime(cumsum_model([2, 128, 3], 1, reverse=1), target="lavapipe")


def test_cumsum_runtime_axis_is_refused():
    model = single_op_model("CumSum", {"x": [3, 4], "axis": []}, input_dtypes={"axis": np.int64})
    with pytest.raises(CompileError, match="axis"):
        compile_model(model)


@pytest.mark.parametrize("attrs", [{}, {"exclusive": 1}, {"reverse": 1}, {"exclusive": 1, "reverse": 1}],
                         ids=["inclusive", "exclusive", "reverse", "exclusive-reverse"])
def test_cumsum_of_constants_folds(attrs):
    """CumSum of a constant with the axis as a one-element vector (onnx's reference evaluator
    takes only a scalar; onnxruntime both): folded at compile time, no cumsum kernel, the
    values onnxruntime computes."""
    from onnx import TensorProto, helper, numpy_helper
    from compiler.compile import compile_with_kernels
    from tests.onnx_builders import make_model
    table = np.arange(1, 13, dtype=np.int64).reshape(3, 4) * np.array([1, -2, 3, 5])
    nodes = [helper.make_node("CumSum", ["table", "axis"], ["sums"], **attrs),
             helper.make_node("Add", ["x", "sums"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.INT64, [3, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.INT64, [3, 4])],
                              [numpy_helper.from_array(table, "table"),
                               numpy_helper.from_array(np.array([1], np.int64), "axis")])
    model = make_model(graph)
    assert not any(k.template == "cumsum" for k in compile_with_kernels(model)[1])
    feeds = {"x": np.arange(12, dtype=np.int64).reshape(3, 4)}
    check_against_onnxruntime(model, feeds=feeds, exact=True)
