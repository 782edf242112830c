"""Trilu (opset 14) against onnxruntime: upper and lower, diagonal offsets inside and past the
matrix, no k, batched, 32- and 64-bit dtypes, both targets."""

import numpy as np
import pytest

from tests.harness import check_against_onnxruntime
from tests.onnx_builders import _fill_output_shapes, single_op_model


def trilu_model(shape, upper, k=None, dtype=np.float32):
    inits = {} if k is None else {"k": np.array(k, np.int64)}
    model = single_op_model("Trilu", {"x": shape}, {"upper": upper}, initializers=inits,
                            input_dtypes={"x": dtype}, output_dtypes=[dtype])
    model.opset_import[0].version = 14
    return _fill_output_shapes(model)


@pytest.mark.parametrize("upper", [1, 0], ids=["upper", "lower"])
@pytest.mark.parametrize("shape,k", [
    pytest.param([5, 7], None, id="square-ish-no-k"),
    pytest.param([2, 3, 6, 4], 1, id="batched-k1"),
    pytest.param([4, 6], -2, id="k-2"),
    pytest.param([3, 5], 9, id="k-past-cols"),
    pytest.param([3, 5], -9, id="k-past-rows"),
])
def test_trilu_float32(shape, upper, k):
    check_against_onnxruntime(trilu_model(shape, upper, k))


@pytest.mark.parametrize("dtype", [np.int64, np.int32], ids=["int64", "int32"])
def test_trilu_integers(dtype):
    model = trilu_model([2, 5, 5], 1, -1, dtype)
    feeds = {"x": np.random.default_rng(2).integers(-1000, 1000, [2, 5, 5]).astype(dtype)}
    check_against_onnxruntime(model, feeds=feeds, exact=True)


def test_trilu_lavapipe():
    check_against_onnxruntime(trilu_model([3, 33, 17], 0, 2), target="lavapipe")
