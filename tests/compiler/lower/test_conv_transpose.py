"""ConvTranspose against onnxruntime: strides, pads, dilations, groups, output_padding,
output_shape, auto_pad, bias, and 1-D to 3-D."""

import numpy as np
import pytest

from tests.harness import check_against_onnxruntime
from tests.onnx_builders import he_normal, single_op_model

CASES = [  # input shape, (c_out per group, kernel), attributes
    pytest.param([1, 4, 5, 5], (3, [3, 3]), {}, id="plain"),
    pytest.param([1, 4, 5, 5], (3, [4, 4]), dict(strides=[2, 2], pads=[1, 1, 1, 1]), id="dcgan-up2"),
    pytest.param([2, 3, 4, 6], (2, [3, 2]), dict(strides=[3, 2], pads=[0, 1, 2, 0]), id="asymmetric"),
    pytest.param([1, 2, 5, 5], (2, [3, 3]), dict(dilations=[2, 1]), id="dilated"),
    pytest.param([1, 4, 4, 4], (3, [3, 3]), dict(group=2, strides=[2, 2]), id="groups"),
    pytest.param([1, 4, 4, 4], (1, [3, 3]), dict(group=4, strides=[2, 2], pads=[1, 1, 1, 1]), id="depthwise"),
    pytest.param([1, 2, 3, 3], (2, [3, 3]), dict(strides=[2, 2], output_padding=[1, 1]), id="output-padding"),
    pytest.param([1, 2, 3, 3], (2, [3, 3]), dict(strides=[2, 2], output_shape=[7, 8]), id="output-shape"),
    pytest.param([1, 2, 3, 4], (2, [3, 3]), dict(strides=[2, 2], auto_pad="SAME_UPPER"), id="same-upper"),
    pytest.param([1, 2, 3, 4], (2, [3, 3]), dict(strides=[2, 2], auto_pad="SAME_LOWER"), id="same-lower"),
    pytest.param([1, 3, 7], (2, [3]), dict(strides=[2]), id="1d"),
    pytest.param([1, 2, 3, 3, 3], (2, [2, 2, 2]), dict(strides=[2, 2, 2]), id="3d"),
    pytest.param([1, 16, 8, 8], (8, [2, 2]), dict(strides=[2, 2]), id="unet-up"),
]


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
@pytest.mark.parametrize("shape,weights,attrs", CASES)
def test_conv_transpose(shape, weights, attrs, bias, rng):
    c_out_g, kernel = weights
    group = attrs.get("group", 1)
    inits = {"w": he_normal(rng, [shape[1], c_out_g, *kernel])}
    if bias:
        inits["b"] = rng.standard_normal(c_out_g * group).astype(np.float32)
    check_against_onnxruntime(single_op_model("ConvTranspose", {"x": shape}, attrs, initializers=inits))


def test_conv_transpose_weights_at_run_time():
    check_against_onnxruntime(single_op_model("ConvTranspose", {"x": [1, 3, 4, 4], "w": [3, 2, 3, 3]},
                                              dict(strides=[2, 2])))
