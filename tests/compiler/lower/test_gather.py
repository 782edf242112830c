"""Gather against onnxruntime: constant and run-time indices, int32 and int64, negative ones."""

import numpy as np
import pytest

from tests.harness import check_against_onnxruntime
from tests.onnx_builders import single_op_model


@pytest.mark.parametrize("axis,indices", [
    pytest.param(0, np.array(2), id="scalar-axis0"),
    pytest.param(1, np.array(-1), id="scalar-negative-axis1"),
    pytest.param(2, np.array([3]), id="one-index-keeps-dim"),
    pytest.param(1, np.array([0, 2, 2, 1]), id="vector"),
    pytest.param(-1, np.array([[0, 4], [-1, 1]]), id="2d-indices"),
])
@pytest.mark.parametrize("dtype", [np.int64, np.int32], ids=["int64", "int32"])
def test_gather_constant_indices(axis, indices, dtype):
    model = single_op_model("Gather", {"x": [3, 4, 5]}, {"axis": axis},
                            initializers={"i": indices.astype(dtype)})
    check_against_onnxruntime(model)


@pytest.mark.parametrize("dtype", [np.int64, np.int32], ids=["int64", "int32"])
def test_gather_runtime_indices(dtype):
    model = single_op_model("Gather", {"x": [6, 5], "i": [2, 3]}, {"axis": 0},
                            input_dtypes={"i": dtype})
    feeds = {"x": np.random.default_rng(1).standard_normal([6, 5]).astype(np.float32),
             "i": np.array([[0, 5, -2], [3, -6, 1]], dtype)}
    check_against_onnxruntime(model, feeds=feeds)


def test_gather_int64_data():
    """Shape-like int64 data gathered at run time (not folded: the data is an input)."""
    model = single_op_model("Gather", {"x": [4, 3]}, {"axis": 1}, input_dtypes={"x": np.int64},
                            output_dtypes=[np.int64], initializers={"i": np.array([2, 0], np.int64)})
    check_against_onnxruntime(model)


@pytest.mark.parametrize("target", ["generic", "lavapipe"])
def test_gather_embedding_table_runtime_ids(target):
    """A [vocab, hidden] float32 table looked up with [B, S] int64 token ids given at run time;
    negative ids count from the end of the vocabulary, as ONNX says."""
    table = (np.random.default_rng(7).standard_normal([1000, 64]) * 0.02).astype(np.float32)
    model = single_op_model("Gather", {"ids": [2, 16]}, {"axis": 0}, input_dtypes={"ids": np.int64},
                            initializers={"table": table}, node_inputs=["table", "ids"])
    ids = np.random.default_rng(8).integers(-1000, 1000, [2, 16]).astype(np.int64)
    check_against_onnxruntime(model, feeds={"ids": ids}, target=target)


@pytest.mark.parametrize("dtype", [np.bool_, np.int8, np.float16, np.uint16],
                         ids=["bool", "int8", "float16", "uint16"])
@pytest.mark.parametrize("axis", [0, 1, 2])
def test_gather_packed_elements(dtype, axis):
    """8- and 16-bit data (attention masks are bool) gathered at run-time indices: each invocation
    assembles a word of the output from elements that need not share a word of the input; odd
    sizes leave a partial last word."""
    rng = np.random.default_rng(axis)
    shape = [3, 5, 7]
    x = (rng.integers(0, 2, shape) if dtype == np.bool_ else
         rng.standard_normal(shape) * 4 if dtype == np.float16 else rng.integers(-100, 100, shape))
    idx = rng.integers(-shape[axis], shape[axis], [2, 3]).astype(np.int64)
    model = single_op_model("Gather", {"x": shape, "i": [2, 3]}, {"axis": axis},
                            input_dtypes={"x": dtype, "i": np.int64}, output_dtypes=[dtype])
    check_against_onnxruntime(model, feeds={"x": x.astype(dtype), "i": idx}, exact=True)
