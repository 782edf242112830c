"""ArgMax and ArgMin against onnxruntime, index for index: rows split over invocations (GPU
profiles) or walked by one (lavapipe), inner axes, ties to the first index and, with
select_last_index, the last, keepdims, negative axes, int32 / int64 / float16 inputs; an LLM's
vocabulary row."""

import numpy as np
import pytest
from onnx import TensorProto, helper

from compiler import compile_model
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
