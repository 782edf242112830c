"""Transpose and Expand (templates/strided_copy.comp.j2) against onnxruntime."""

import numpy as np
import pytest

from tests.harness import check_against_onnxruntime
from tests.onnx_builders import single_op_model

TRANSPOSE_CASES = [
    pytest.param([3, 4], None, id="2d-default"),
    pytest.param([2, 3, 4, 5], None, id="4d-default-reverses"),
    pytest.param([1, 8, 7, 6], [0, 2, 3, 1], id="nchw-to-nhwc"),
    pytest.param([1, 7, 6, 8], [0, 3, 1, 2], id="nhwc-to-nchw"),
    pytest.param([2, 3, 4, 5], [0, 1, 2, 3], id="identity"),
    pytest.param([2, 3, 4, 5], [1, 0, 2, 3], id="swap-outer-keeps-inner"),
    pytest.param([2, 3, 4, 5, 6], [4, 2, 0, 3, 1], id="5d"),
    pytest.param([1, 3, 1, 5], [3, 2, 1, 0], id="unit-dims"),
    pytest.param([2, 4, 8, 3, 3], [0, 2, 1, 3, 4], id="shufflenet-channel-shuffle"),
]


@pytest.mark.parametrize("shape,perm", TRANSPOSE_CASES)
def test_transpose(shape, perm):
    attrs = {} if perm is None else {"perm": perm}
    check_against_onnxruntime(single_op_model("Transpose", {"x": shape}, attrs))


@pytest.mark.parametrize("dtype", [np.int32, np.int64], ids=["int32", "int64"])
def test_transpose_integer(dtype):
    model = single_op_model("Transpose", {"x": [2, 3, 5]}, {"perm": [2, 0, 1]},
                            input_dtypes={"x": dtype}, output_dtypes=[dtype])
    check_against_onnxruntime(model)


PACKED = [np.int8, np.uint8, np.int16, np.uint16, np.float16, np.bool_]


@pytest.mark.parametrize("dtype", PACKED, ids=lambda d: np.dtype(d).name)
def test_transpose_packed(dtype):
    """8/16-bit elements move packed, a whole output word per invocation; 105 elements leave a
    partial last word."""
    model = single_op_model("Transpose", {"x": [3, 5, 7]}, {"perm": [2, 0, 1]},
                            input_dtypes={"x": dtype}, output_dtypes=[dtype])
    check_against_onnxruntime(model, exact=True)


@pytest.mark.parametrize("dtype", [np.int8, np.bool_, np.float16], ids=lambda d: np.dtype(d).name)
def test_expand_packed(dtype):
    model = single_op_model("Expand", {"x": [3, 1]}, input_dtypes={"x": dtype}, output_dtypes=[dtype],
                            initializers={"shape": np.array([2, 3, 5], np.int64)})
    check_against_onnxruntime(model, exact=True)


@pytest.mark.parametrize("shape,target", [
    pytest.param([3, 1], [3, 4], id="column"),
    pytest.param([1, 4], [3, 4], id="row"),
    pytest.param([4], [2, 3, 4], id="rank-up"),
    pytest.param([1, 3, 1, 1], [2, 3, 5, 5], id="channel"),
    pytest.param([2, 1, 4], [1, 1], id="target-smaller"),
])
def test_expand(shape, target):
    model = single_op_model("Expand", {"x": shape}, initializers={"shape": np.array(target, np.int64)})
    check_against_onnxruntime(model)
