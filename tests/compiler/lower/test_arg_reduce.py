"""ArgMax and ArgMin against onnxruntime, index for index: rows split over invocations (GPU
profiles) or walked by one (lavapipe), inner axes, ties to the first index and, with
select_last_index, the last, keepdims, negative axes, int32 / int64 / float16 inputs; an LLM's
vocabulary row, split into chunks that workgroups of their own scan."""

import numpy as np
import pytest
from onnx import TensorProto, helper

from bundles import read_bundle
from compiler import compile_model
from runtime_min import load
from compiler.errors import CompileError
from tests.harness import check_against_onnxruntime

DTYPES = {np.float32: TensorProto.FLOAT, np.float16: TensorProto.FLOAT16, np.int32: TensorProto.INT32,
          np.int64: TensorProto.INT64}


def arg_model(op, shape, axis, *, keepdims=1, last=0, dtype=np.float32, opset=17):
    out = list(shape)
    if keepdims:
        out[axis % len(shape)] = 1
    else:
        del out[axis % len(shape)]
    attrs = dict(axis=axis, keepdims=keepdims) | (dict(select_last_index=last) if opset >= 12 else {})
    node = helper.make_node(op, ["x"], ["y"], **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", DTYPES[dtype], shape)],
                              [helper.make_tensor_value_info("y", TensorProto.INT64, out)])
    return helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", opset)])


CASES = [
    pytest.param([2, 3, 1000], -1, {}, id="rows-last-axis"),
    pytest.param([4, 50, 6], 1, {"last": 1}, id="middle-axis-last-index"),
    pytest.param([7], 0, {"keepdims": 0}, id="1d"),
    pytest.param([1, 32000], -1, {"keepdims": 0}, id="vocabulary-row"),
    pytest.param([3, 5000], 1, {"dtype": np.int64, "keepdims": 0}, id="int64"),
    pytest.param([6, 70], 0, {"dtype": np.int32, "last": 1}, id="int32-axis0"),
    pytest.param([5, 300], 1, {"dtype": np.float16}, id="float16"),
    pytest.param([3, 40], 1, {"opset": 11}, id="opset11"),
]


@pytest.mark.parametrize("target", ["generic", "lavapipe", "nvidia"])
@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("shape,axis,kw", CASES)
def test_arg_reduce(shape, axis, kw, op, target):
    dtype = kw.get("dtype", np.float32)
    # few distinct values: many ties
    x = np.random.default_rng(0).integers(-4, 5, shape).astype(dtype)
    check_against_onnxruntime(arg_model(op, shape, axis, **kw), feeds={"x": x}, target=target, exact=True)


def test_empty_axis_refused():
    with pytest.raises(CompileError, match="axis 1 .* is empty"):
        compile_model(arg_model("ArgMax", [3, 0], 1), target="lavapipe")


def kernels(model, target):
    m = read_bundle(compile_model(model, target=target)).manifest
    return [m["kernels"][d["kernel"]]["name"] for d in m["dispatches"]]


@pytest.mark.parametrize("target", ["lavapipe", "nvidia"])
def test_long_rows_split_into_chunks(target):
    """A few long rows take a workgroup a chunk, the last of a row's chunks to finish picking
    among them (one dispatch after the run's zeroing of its counters); ties across chunks still
    go to the first index (the last with select_last_index), here on Llama-3's vocabulary."""
    model = arg_model("ArgMax", [2, 128256], -1, keepdims=0)
    assert kernels(model, target) == ["zero_fill", "arg_reduce"]
    x = np.random.default_rng(1).integers(-4, 5, [2, 128256]).astype(np.float16)
    x[:, [5, 70000, 128255]] = 9   # the same maximum in three chunks
    check_against_onnxruntime(arg_model("ArgMax", [2, 128256], -1, keepdims=0, dtype=np.float16),
                              feeds={"x": x}, target=target, exact=True)
    check_against_onnxruntime(arg_model("ArgMin", [2, 128256], -1, last=1), feeds={"x": -x.astype(np.float32)},
                              target=target, exact=True)


def test_nan_in_a_later_chunk_wins_as_numpy():
    x = np.random.default_rng(2).standard_normal([1, 50000]).astype(np.float32)
    x[0, [30000, 41000]] = np.nan
    x[0, 10] = 100.0
    with load(compile_model(arg_model("ArgMax", [1, 50000], -1), target="lavapipe")) as m:
        assert m.run({"x": x})["y"].item() == np.argmax(x) == 30000
