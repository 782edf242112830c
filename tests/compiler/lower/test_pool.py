"""MaxPool, AveragePool, GlobalAveragePool against onnxruntime, on the generic profile (storage
buffers) and the lavapipe profile (input through a texel buffer)."""

import numpy as np
import pytest

from tests.harness import check_against_onnxruntime, random_feeds
from tests.onnx_builders import single_op_model

POOL_CASES = [
    pytest.param(dict(kernel_shape=[2, 2], strides=[2, 2]), [1, 4, 8, 8], id="k2-s2"),
    pytest.param(dict(kernel_shape=[2, 2], strides=[2, 2]), [1, 4, 9, 9], id="k2-s2-odd-floor"),
    pytest.param(dict(kernel_shape=[3, 3], strides=[2, 2]), [1, 4, 9, 9], id="k3-s2-nopad"),
    pytest.param(dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]), [1, 4, 10, 10], id="k3-s2-p1"),
    pytest.param(dict(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1]), [1, 4, 7, 7], id="k3-s1-p1"),
    pytest.param(dict(kernel_shape=[3, 3]), [1, 4, 7, 7], id="k3-default-stride1"),
    pytest.param(dict(kernel_shape=[3, 2], strides=[1, 2]), [1, 3, 7, 8], id="k3x2-s1x2"),
    pytest.param(dict(kernel_shape=[3, 3], strides=[2, 2], pads=[0, 0, 1, 1]), [1, 4, 8, 8], id="pads-asym-end"),
    pytest.param(dict(kernel_shape=[3, 3], strides=[1, 1], pads=[2, 1, 0, 1]), [1, 2, 6, 6], id="pads-asym-2101"),
    pytest.param(dict(kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER"), [1, 4, 8, 8], id="same-upper-s2"),
    pytest.param(dict(kernel_shape=[2, 2], strides=[1, 1], auto_pad="SAME_UPPER"), [1, 4, 7, 7], id="same-upper-k2"),
    pytest.param(dict(kernel_shape=[2, 2], strides=[1, 1], auto_pad="SAME_LOWER"), [1, 4, 7, 7], id="same-lower-k2"),
    pytest.param(dict(kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_LOWER"), [1, 4, 8, 8], id="same-lower-s2"),
    pytest.param(dict(kernel_shape=[3, 3], strides=[2, 2], auto_pad="VALID"), [1, 4, 9, 9], id="valid-s2"),
    pytest.param(dict(kernel_shape=[2, 2], strides=[2, 2]), [2, 3, 6, 10], id="batch2"),
    pytest.param(dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]), [1, 64, 56, 56], id="medium-resnet-stem"),
]


TARGETS = pytest.mark.parametrize("target", ["generic", "lavapipe"])


@TARGETS
@pytest.mark.parametrize("attrs,shape", POOL_CASES)
def test_maxpool(attrs, shape, target):
    check_against_onnxruntime(single_op_model("MaxPool", {"x": shape}, attrs), target=target)


@TARGETS
def test_maxpool_all_negative_padded(target):
    """Padding must act as -inf for MaxPool, never as 0."""
    model = single_op_model("MaxPool", {"x": [1, 2, 5, 5]}, dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1]))
    feeds = {"x": -np.abs(random_feeds(model, seed=7)["x"]) - 1.0}
    check_against_onnxruntime(model, feeds=feeds, target=target)


@TARGETS
@pytest.mark.parametrize("count_include_pad", [0, 1], ids=["exclude-pad", "include-pad"])
@pytest.mark.parametrize("attrs,shape", POOL_CASES)
def test_averagepool(attrs, shape, count_include_pad, target):
    attrs = dict(attrs, count_include_pad=count_include_pad)
    check_against_onnxruntime(single_op_model("AveragePool", {"x": shape}, attrs), target=target)


@pytest.mark.parametrize("shape", [[1, 8, 7, 7], [2, 3, 5, 9], [1, 16, 1, 1], [1, 2048, 7, 7], [1, 1000, 13, 13]],
                         ids=["8x7x7", "batch2-5x9", "1x1", "resnet50-head", "squeezenet-head"])
@TARGETS
def test_global_average_pool(shape, target):
    check_against_onnxruntime(single_op_model("GlobalAveragePool", {"x": shape}), target=target)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_maxpool_8bit(dtype):
    """8-bit MaxPool: outputs packed four to a word (an odd output count leaves a partial last
    word), windows hanging over padding, with Indices."""
    model = single_op_model("MaxPool", {"x": [1, 3, 7, 7]},
                            dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
                            outputs=("y", "i"), output_dtypes=[dtype, np.int64],
                            input_dtypes={"x": dtype})
    info = np.iinfo(dtype)
    x = np.random.default_rng(0).integers(info.min, info.max + 1, (1, 3, 7, 7)).astype(dtype)
    check_against_onnxruntime(model, feeds={"x": x})


@pytest.mark.parametrize("target", ["generic", "lavapipe"])
@pytest.mark.parametrize("op,attrs", [("AveragePool", {"kernel_shape": [3, 3]}),
                                      ("MaxPool", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
                                      ("GlobalAveragePool", {})])
def test_pool_float16_writes_every_element(op, attrs, target):
    """float16 pooling (held natively as float16_t, one element per invocation): every output
    element written (the poisoned output shows a gap) and within float16 accuracy."""
    check_against_onnxruntime(single_op_model(op, {"x": [1, 8, 9, 9]}, attrs), target=target, precision="fp16",
                              rtol_l2=1e-2, rtol=2e-2, atol=2e-2)
