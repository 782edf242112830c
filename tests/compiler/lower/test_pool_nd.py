"""Pooling beyond test_pool.py: 3-D and 1-D windows, ceil_mode, dilations, GlobalMaxPool and
MaxPool's Indices output, against onnxruntime."""

import numpy as np
import pytest

from tests.harness import check_against_onnxruntime
from tests.onnx_builders import single_op_model

CASES = [
    pytest.param([1, 2, 9, 9], dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1), id="2d-ceil"),
    pytest.param([1, 2, 8, 8], dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1),
                 id="2d-ceil-pads"),
    pytest.param([1, 2, 9, 9], dict(kernel_shape=[3, 3], dilations=[2, 2]), id="2d-dilated"),
    pytest.param([1, 2, 10, 10], dict(kernel_shape=[2, 2], strides=[2, 2], dilations=[2, 2], ceil_mode=1),
                 id="2d-dilated-ceil"),
    pytest.param([2, 3, 11], dict(kernel_shape=[3], strides=[2], pads=[1, 1]), id="1d"),
    pytest.param([1, 2, 5, 6, 7], dict(kernel_shape=[2, 3, 2], strides=[2, 1, 2]), id="3d"),
    pytest.param([1, 2, 6, 6, 6], dict(kernel_shape=[3, 3, 3], strides=[2, 2, 2], pads=[1, 1, 1, 1, 1, 1]),
                 id="3d-pads"),
    pytest.param([1, 1, 7, 7, 7], dict(kernel_shape=[2, 2, 2], dilations=[2, 2, 2], ceil_mode=1), id="3d-dilated-ceil"),
]


@pytest.mark.parametrize("shape,attrs", CASES)
def test_maxpool(shape, attrs):
    check_against_onnxruntime(single_op_model("MaxPool", {"x": shape}, attrs))


@pytest.mark.parametrize("count_include_pad", [0, 1], ids=["exclude-pad", "include-pad"])
@pytest.mark.parametrize("shape,attrs", CASES)
def test_averagepool(shape, attrs, count_include_pad):
    if "dilations" in attrs:
        pytest.skip("onnxruntime's AveragePool rejects dilations")
    attrs = dict(attrs, count_include_pad=count_include_pad)
    check_against_onnxruntime(single_op_model("AveragePool", {"x": shape}, attrs))


@pytest.mark.parametrize("shape", [[1, 8, 7, 7], [2, 3, 5], [1, 2, 3, 4, 5], [1, 512, 1, 1]],
                         ids=["2d", "1d", "3d", "1x1"])
def test_global_max_pool(shape):
    check_against_onnxruntime(single_op_model("GlobalMaxPool", {"x": shape}))


@pytest.mark.parametrize("attrs", [
    pytest.param(dict(kernel_shape=[2, 2], strides=[2, 2]), id="k2s2"),
    pytest.param(dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]), id="k3s2p1"),
    pytest.param(dict(kernel_shape=[3, 3], storage_order=1), id="column-major"),
])
def test_maxpool_indices(attrs):
    model = single_op_model("MaxPool", {"x": [2, 3, 6, 7]}, attrs, outputs=["y", "i"],
                            output_dtypes=[np.float32, np.int64])
    check_against_onnxruntime(model)
