"""ScatterElements becomes a ScatterND of single elements (compiler/passes/scatter_elements.py):
full index tuples from the indices' positions with the indices as the axis' column."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper

from tests.harness import check_against_onnxruntime
from tests.onnx_builders import make_model, tensor_info

from compiler import compile_model
from compiler.errors import CompileError


def _model(data_shape, indices, axis, reduction="none", dtype=np.float32, constant=False):
    node = helper.make_node("ScatterElements", ["x", "i", "u"], ["y"], axis=axis, reduction=reduction,
                            name="scatter_elements")
    inputs = [tensor_info("x", data_shape, dtype), tensor_info("u", list(indices.shape), dtype)]
    inits = [numpy_helper.from_array(indices, "i")] if constant else []
    if not constant:
        inputs.append(tensor_info("i", list(indices.shape), indices.dtype))
    graph = helper.make_graph([node], "g", inputs, [tensor_info("y", data_shape, dtype)], initializer=inits)
    return make_model(graph, opset=18)


def _distinct(rng, data_shape, index_shape, axis):
    """Indices along `axis` that name each element at most once (ONNX leaves repeats without a
    reduction undefined), some negative."""
    dim = data_shape[axis]
    picks = np.argsort(rng.random(index_shape[:axis] + [dim] + index_shape[axis + 1:]), axis=axis)
    picks = np.take(picks, np.arange(index_shape[axis]), axis=axis)
    return np.where(rng.random(picks.shape) < 0.3, picks - dim, picks).astype(np.int64)


CASES = [
    pytest.param([2, 8], [2, 2], 1, id="moe-expert-mask"),    # zeros.scatter(1, top_k_index, 1)
    pytest.param([5, 3, 4], [2, 3, 4], 0, id="axis-0"),
    pytest.param([3, 6, 4], [3, 2, 3], 1, id="axis-1-fewer-columns"),
    pytest.param([3, 4, 7], [2, 4, 5], -1, id="last-axis"),
    pytest.param([9], [4], 0, id="rank-1"),
]


@pytest.mark.parametrize("data_shape,index_shape,axis", CASES)
@pytest.mark.parametrize("constant", [False, True], ids=["runtime", "constant"])
def test_matches_onnxruntime(data_shape, index_shape, axis, constant, rng):
    indices = _distinct(rng, data_shape, index_shape, axis % len(data_shape))
    feeds = {"x": rng.standard_normal(data_shape).astype(np.float32),
             "u": rng.standard_normal(index_shape).astype(np.float32)}
    if not constant:
        feeds["i"] = indices
    check_against_onnxruntime(_model(data_shape, indices, axis, constant=constant), feeds=feeds, exact=True)


def test_int32_indices_and_add_reduction(rng):
    """Repeated indices combine with a reduction; indices may be int32."""
    indices = rng.integers(-4, 4, [3, 5]).astype(np.int32)
    feeds = {"x": rng.standard_normal([3, 4]).astype(np.float32),
             "u": rng.standard_normal([3, 5]).astype(np.float32), "i": indices}
    check_against_onnxruntime(_model([3, 4], indices, 1, reduction="add"), feeds=feeds)


def test_repeated_constant_indices_refused():
    indices = np.array([[0, 0]], np.int64)
    with pytest.raises(CompileError, match="more than once"):
        compile_model(_model([1, 3], indices, 1, constant=True))
