"""ScatterND against onnxruntime: slices written at constant and run-time indices (negative ones
count from the end), element indices (float16 and uint8 ones several to a word), float16, uint8
and int64 data, the reductions in update order with repeated indices; and what is refused, with
the reason."""
import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from compiler import compile_model
from compiler.errors import CompileError
from runtime_min import load
from tests.harness import check_against_onnxruntime

TYPES = {np.float32: TensorProto.FLOAT, np.float16: TensorProto.FLOAT16, np.int64: TensorProto.INT64,
         np.int32: TensorProto.INT32, np.uint8: TensorProto.UINT8}


def scatter_model(data, indices_shape, updates, constant=None, reduction=None, dtype=np.float32):
    inputs = [helper.make_tensor_value_info("data", TYPES[dtype], data),
              helper.make_tensor_value_info("updates", TYPES[dtype], updates)]
    inits = []
    if constant is None:
        inputs.append(helper.make_tensor_value_info("indices", TensorProto.INT64, indices_shape))
    else:
        inits.append(numpy_helper.from_array(np.array(constant, np.int64), "indices"))
    attrs = {"reduction": reduction} if reduction else {}
    node = helper.make_node("ScatterND", ["data", "indices", "updates"], ["y"], **attrs)
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("y", TYPES[dtype], data)], inits)
    return helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 18)])


def values(rng, shape, dtype):
    return (rng.integers(-9, 10, shape) if np.dtype(dtype).kind in "iu" else rng.standard_normal(shape)).astype(dtype)


FORMS = {
    "rows": ([4, 5, 6], [[1], [-1]], [2, 5, 6]),                 # whole rows, one from the end
    "slices": ([4, 5, 6], [[0, 1], [3, -2], [2, 0]], [3, 6]),    # slices of the last dim
    "elements": ([3, 4], [[2, 3], [0, 0], [1, 2]], [3]),         # single elements
    "batched": ([2, 6, 8], [[[1, 2]], [[0, 5]]], [2, 1, 8]),     # indices of rank 3
    "last-of-odd": ([7], [[6], [-5]], [2]),                      # the last element, in a partial word
}
CASES = [pytest.param(*FORMS[form], dtype, id=f"{form}-{np.dtype(dtype).name}")
         for form in FORMS for dtype in (np.float32, np.float16, np.int64, np.uint8)]


@pytest.mark.parametrize("constant", [True, False], ids=["constant-indices", "run-time-indices"])
@pytest.mark.parametrize("data, indices, updates, dtype", CASES)
def test_scatter(data, indices, updates, dtype, constant, rng):
    indices = np.array(indices, np.int64)
    model = scatter_model(data, list(indices.shape), updates, indices if constant else None, dtype=dtype)
    feeds = {"data": values(rng, data, dtype), "updates": values(rng, updates, dtype)}
    if not constant:
        feeds["indices"] = indices
    check_against_onnxruntime(model, feeds=feeds, exact=True)


@pytest.mark.parametrize("reduction", ["add", "mul", "max", "min"])
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_reductions_apply_repeated_indices_in_order(reduction, dtype, rng):
    indices = np.array([[1], [3], [1], [1]], np.int64)
    model = scatter_model([4, 5], [4, 1], [4, 5], indices, reduction=reduction, dtype=dtype)
    check_against_onnxruntime(model, feeds={"data": values(rng, [4, 5], dtype), "updates": values(rng, [4, 5], dtype)})


@pytest.mark.parametrize("reduction", ["add", "mul", "max", "min"])
def test_reductions_of_nan_and_infinities_as_onnxruntime(reduction):
    special = [np.nan, -np.inf, -1.0, -0.0, 0.0, 1.0, np.inf]
    data = np.repeat(np.array(special, np.float32)[None], 7, axis=0)        # every pair (data, update)
    updates = np.repeat(np.array(special, np.float32)[:, None], 7, axis=1)
    model = scatter_model([7, 7], [7, 1], [7, 7], np.arange(7)[:, None], reduction=reduction)
    feeds = {"data": data, "updates": updates}
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    with load(compile_model(model, target="generic")) as m:
        np.testing.assert_array_equal(m.run(feeds)["y"], want)   # NaN where onnxruntime has NaN


@pytest.mark.parametrize("kw, message", [
    (dict(data=[4, 5], indices_shape=[2, 1], updates=[2, 5], constant=[[1], [1]]), "more than once"),
    (dict(data=[4, 5], indices_shape=[1, 1], updates=[1, 5], constant=[[4]]), "outside the data's leading dims"),
    (dict(data=[4, 6], indices_shape=[1, 1], updates=[1, 6], constant=[[0]], dtype=np.float16, reduction="add"),
     "float16 data is not built"),
], ids=["repeated", "out-of-range", "float16-reduction"])
def test_refused(kw, message):
    with pytest.raises(CompileError, match=message):
        compile_model(scatter_model(kw.pop("data"), kw.pop("indices_shape"), kw.pop("updates"), **kw),
                      target="generic")
