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
