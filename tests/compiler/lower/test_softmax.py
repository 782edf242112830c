"""Softmax (opset 13: along one axis) against onnxruntime."""

import numpy as np
import pytest

from tests.harness import check_against_onnxruntime, random_feeds
from tests.onnx_builders import single_op_model

SOFTMAX_CASES = [
    pytest.param([4, 10], -1, id="2d-axis-1"),
    pytest.param([4, 10], 1, id="2d-axis1"),
    pytest.param([4, 10], 0, id="2d-axis0"),
    pytest.param([2, 1000], -1, id="2d-classifier-1000"),
    pytest.param([3, 1], -1, id="2d-single-column"),
    pytest.param([2, 3, 4, 5], -1, id="4d-axis-1"),
    pytest.param([2, 3, 4, 5], 1, id="4d-axis1"),
    pytest.param([2, 3, 4, 5], 2, id="4d-axis2"),
    pytest.param([1, 1000, 1, 1], 1, id="4d-squeezenet-head-axis1"),
    pytest.param([2, 7, 33], -1, id="3d-odd"),
]


@pytest.mark.parametrize("shape,axis", SOFTMAX_CASES)
def test_softmax(shape, axis):
    check_against_onnxruntime(single_op_model("Softmax", {"x": shape}, {"axis": axis}))


def test_softmax_default_axis():
    check_against_onnxruntime(single_op_model("Softmax", {"x": [3, 4, 6]}))


@pytest.mark.parametrize("scale", [30.0, 200.0], ids=["large-logits", "huge-logits"])
def test_softmax_is_numerically_stable(scale):
    """exp() overflows above ~88: the kernel must subtract the row max."""
    model = single_op_model("Softmax", {"x": [4, 50]}, {"axis": -1})
    feeds = {"x": (random_feeds(model, seed=8)["x"] * scale).astype(np.float32)}
    check_against_onnxruntime(model, feeds=feeds)
