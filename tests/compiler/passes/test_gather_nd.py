"""GatherND with constant indices becomes a Gather of rows (compiler/passes/gather_nd.py)."""
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


def test_runtime_indices_refused():
    with pytest.raises(CompileError, match="GatherND 'gather_nd'.*computed at run time"):
        compile_model(_model([2, 3], np.array([[0, 1]], np.int64), constant=False))


def test_index_outside_refused():
    with pytest.raises(CompileError, match="outside the data's dims"):
        compile_model(_model([2, 3], np.array([[0, 3]], np.int64)))
