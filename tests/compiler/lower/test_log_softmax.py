"""LogSoftmax against onnxruntime (opset 13: one axis; opset 11: the trailing dims from axis)."""

import numpy as np
import pytest

from tests.harness import check_against_onnxruntime, random_feeds
from tests.onnx_builders import single_op_model


@pytest.mark.parametrize("shape,axis", [([4, 10], -1), ([4, 10], 0), ([2, 3, 4, 5], 1), ([2, 1000], 1)],
                         ids=["2d-last", "2d-first", "4d-channels", "classifier"])
def test_log_softmax(shape, axis):
    check_against_onnxruntime(single_op_model("LogSoftmax", {"x": shape}, {"axis": axis}))


def test_log_softmax_opset11_flattens_from_axis():
    from tests.onnx_builders import _fill_output_shapes

    model = single_op_model("LogSoftmax", {"x": [2, 3, 4]}, {"axis": 1})
    model.opset_import[0].version = 11
    check_against_onnxruntime(_fill_output_shapes(model))


def test_log_softmax_large_logits():
    model = single_op_model("LogSoftmax", {"x": [3, 40]})
    feeds = {"x": (random_feeds(model, seed=4)["x"] * 100).astype(np.float32)}
    check_against_onnxruntime(model, feeds=feeds)
