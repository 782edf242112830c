"""GatherND becomes a Gather of rows (compiler/passes/gather_nd.py), at flat indices computed at
compile time (constant indices) or by elementwise ops (indices computed at run time)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper

from tests.harness import check_against_onnxruntime
from tests.onnx_builders import make_model, tensor_info

from compiler import compile_model
from compiler.errors import CompileError


def _model(data_shape, indices, batch_dims=0, dtype=np.float32, constant=True):
    out_shape = list(indices.shape[:-1]) + list(data_shape[batch_dims + indices.shape[-1]:])
    node = helper.make_node("GatherND", ["x", "i"], ["y"], batch_dims=batch_dims, name="gather_nd")
    inputs = [tensor_info("x", data_shape, dtype)]
    inits = [numpy_helper.from_array(indices, "i")] if constant else []
    if not constant:
        inputs.append(tensor_info("i", list(indices.shape), np.int64))
    graph = helper.make_graph([node], "g", inputs, [tensor_info("y", out_shape, dtype)], initializer=inits)
    return make_model(graph)


@pytest.mark.parametrize("data_shape,indices,batch_dims", [
    ([2, 3, 4], np.array([[0, 1], [1, -1], [0, 0]], np.int64), 0),           # slices of 4
    ([2, 3], np.array([[[1, 2]], [[0, 0]]], np.int64), 0),                    # elements
    ([2, 3, 4], np.array([[[1]], [[2]]], np.int64), 1),                       # per batch
    ([1, 16], np.stack([np.zeros(16), np.arange(16)], -1).astype(np.int64)[None, None, None], 0),  # dynamo's mask
])
def test_constant_indices_match_onnxruntime(data_shape, indices, batch_dims):
    check_against_onnxruntime(_model(data_shape, indices, batch_dims), target="lavapipe", exact=True)


def test_bool_data():
    feeds = {"x": np.array([[True, False, True, True]])}
    idx = np.stack([np.zeros(4), np.arange(4)[::-1]], -1).astype(np.int64)
    check_against_onnxruntime(_model([1, 4], idx, dtype=np.bool_), feeds=feeds, target="lavapipe")


RUNTIME_CASES = [
    pytest.param([3, 7, 5], [3, 2], 0, id="clip-pooling"),      # h[arange(B), ids.argmax(-1)]
    pytest.param([3, 7, 5], [3, 1], 1, id="batch-dims-1"),
    pytest.param([4, 6], [2, 3, 2], 0, id="elements"),
    pytest.param([2, 3, 4, 5], [2, 2, 2], 0, id="two-dims-of-four"),
    pytest.param([2, 3, 4, 5], [2, 3, 6, 2], 2, id="batch-dims-2"),
]


def _random_indices(rng, data_shape, index_shape, batch_dims):
    """Every column in [-dim, dim): negative ones count from the end."""
    dims = data_shape[batch_dims:batch_dims + index_shape[-1]]
    return np.stack([rng.integers(-d, d, index_shape[:-1]) for d in dims], -1).astype(np.int64)


@pytest.mark.parametrize("data_shape,index_shape,batch_dims", RUNTIME_CASES)
def test_runtime_indices_match_onnxruntime(data_shape, index_shape, batch_dims, rng):
    indices = _random_indices(rng, data_shape, index_shape, batch_dims)
    feeds = {"x": rng.standard_normal(data_shape).astype(np.float32), "i": indices}
    check_against_onnxruntime(_model(data_shape, indices, batch_dims, constant=False), feeds=feeds,
                              exact=True)


def test_runtime_indices_of_integer_data(rng):
    data_shape, index_shape = [2, 5, 3], [2, 1]
    indices = _random_indices(rng, data_shape, index_shape, 1)
    feeds = {"x": rng.integers(-2**40, 2**40, data_shape), "i": indices}
    check_against_onnxruntime(_model(data_shape, indices, 1, np.int64, constant=False), feeds=feeds)


def test_runtime_indices_outside_are_clamped(rng):
    """ONNX leaves them undefined and onnxruntime fails; each column is clamped into its dim,
    as vkc's Gather clamps (after wrapping a negative index once)."""
    from tests.harness import compile_cached, run_bundle

    data = rng.standard_normal([3, 4, 2]).astype(np.float32)
    indices = np.array([[0, 9], [-9, 1], [5, -1], [2, 4]], np.int64)
    got, _ = run_bundle(compile_cached(_model([3, 4, 2], indices, constant=False)), {"x": data, "i": indices})
    np.testing.assert_array_equal(got["y"], data[[0, 0, 2, 2], [3, 1, 3, 3]])


def test_index_outside_refused():
    with pytest.raises(CompileError, match="outside the data's dims"):
        compile_model(_model([2, 3], np.array([[0, 3]], np.int64)))
