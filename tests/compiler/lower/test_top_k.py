"""TopK against onnxruntime, value for value and index for index: rows of many ties (to the lower
index), inner axes, negative axes, largest=0, K = 1 and K = the row's length, int32 / int64 /
float16 inputs, K as an attribute (opset 9) and as opset 10's input, NaN and infinities (NaN past
every number, as onnxruntime orders them), sorted=0 (onnxruntime's order is then its own: compared
as sets, vkc's sorted), a long row split into chunks, a float16 compile; what is refused."""

import numpy as np
import pytest
from onnx import TensorProto, helper

from bundles import read_bundle
from compiler import compile_model
from compiler.errors import CompileError
from compiler.lower.top_k import MAX_K
from tests.harness import check_against_onnxruntime, run_bundle, run_onnxruntime, spirv_validate

DTYPES = {np.float32: TensorProto.FLOAT, np.float16: TensorProto.FLOAT16, np.int32: TensorProto.INT32,
          np.int64: TensorProto.INT64}


def top_k_model(shape, k, axis=-1, *, largest=None, sorted_=None, dtype=np.float32, opset=17, k_input=True):
    out = list(shape)
    out[axis] = k
    attrs = {"axis": axis} | ({"largest": largest} if largest is not None else {}) \
        | ({"sorted": sorted_} if sorted_ is not None else {})
    if opset < 10:
        attrs["k"] = k
    inputs = ["x", "k"] if opset >= 10 else ["x"]
    graph_inputs = [helper.make_tensor_value_info("x", DTYPES[dtype], shape)]
    init = []
    if opset >= 10 and k_input:
        init = [helper.make_tensor("k", TensorProto.INT64, [1], [k])]
    elif opset >= 10:
        graph_inputs.append(helper.make_tensor_value_info("k", TensorProto.INT64, [1]))
    node = helper.make_node("TopK", inputs, ["values", "indices"], **attrs)
    graph = helper.make_graph([node], "g", graph_inputs,
                              [helper.make_tensor_value_info("values", DTYPES[dtype], out),
                               helper.make_tensor_value_info("indices", TensorProto.INT64, out)],
                              initializer=init)
    return helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", opset)])


CASES = [
    pytest.param([3, 200], 5, -1, {}, id="rows"),
    pytest.param([4, 50, 6], 7, 1, {}, id="middle-axis"),
    pytest.param([5, 9, 3], 2, -2, {"largest": 0}, id="negative-axis-smallest"),
    pytest.param([37], 1, 0, {}, id="k1-1d"),
    pytest.param([6, 24], 24, 1, {"largest": 0}, id="k-is-row-length"),
    pytest.param([2, 3000], 64, -1, {}, id="k64"),
    pytest.param([3, 700], MAX_K, 1, {}, id="k-max"),
    pytest.param([3, 500], 9, 1, {"dtype": np.int64}, id="int64"),
    pytest.param([8, 70], 3, 0, {"dtype": np.int32, "largest": 0}, id="int32-axis0"),
    pytest.param([5, 300], 11, 1, {"dtype": np.float16}, id="float16"),
    pytest.param([3, 40], 4, 1, {"opset": 9}, id="opset9-attribute"),
    pytest.param([3, 40], 4, 1, {"opset": 10}, id="opset10"),
]


@pytest.mark.parametrize("target", ["generic", "lavapipe", "nvidia"])
@pytest.mark.parametrize("shape,k,axis,kw", CASES)
def test_top_k(shape, k, axis, kw, target):
    dtype = kw.get("dtype", np.float32)
    x = np.random.default_rng(0).integers(-6, 7, shape).astype(dtype)   # few distinct values: many ties
    check_against_onnxruntime(top_k_model(shape, k, axis, **kw), feeds={"x": x}, target=target, exact=True)


def run_both(model, x, target="lavapipe"):
    """(vkc's outputs, onnxruntime's) for feeds onnxruntime's harness would refuse (NaN)."""
    bundle = compile_model(model, target=target)
    spirv_validate(bundle)
    return run_bundle(bundle, {"x": x})[0], run_onnxruntime(model, {"x": x})


@pytest.mark.parametrize("largest", [1, 0])
@pytest.mark.parametrize("target", ["lavapipe", "nvidia"])
def test_nan_and_infinities_as_onnxruntime(largest, target):
    rng = np.random.default_rng(3)
    x = rng.integers(-3, 4, [4, 200]).astype(np.float32)
    x[rng.random(x.shape) < 0.03] = np.nan
    x[rng.random(x.shape) < 0.01] = np.inf
    x[rng.random(x.shape) < 0.01] = -np.inf
    x[3, :] = np.nan   # a row of NaN alone
    for k in (1, 30, 200):
        got, want = run_both(top_k_model([4, 200], k, largest=largest), x, target)
        np.testing.assert_array_equal(got["indices"], want["indices"])
        np.testing.assert_array_equal(got["values"], want["values"])   # NaN where NaN


def test_unsorted_is_sorted_anyway():
    """sorted=0: onnxruntime returns the same elements in an order of its own; vkc's are sorted."""
    x = np.random.default_rng(4).integers(-4, 5, [3, 1000]).astype(np.float32)
    got, want = run_both(top_k_model([3, 1000], 200, sorted_=0), x)
    order = np.lexsort((want["indices"], -want["values"]), axis=-1)
    np.testing.assert_array_equal(got["indices"], np.take_along_axis(want["indices"], order, -1))
    np.testing.assert_array_equal(got["values"], np.take_along_axis(want["values"], order, -1))


def kernels(bundle):
    m = read_bundle(bundle).manifest
    return [m["kernels"][d["kernel"]]["name"] for d in m["dispatches"]]


@pytest.mark.parametrize("target", ["lavapipe", "nvidia"])
def test_long_row_split_into_chunks(target):
    """A 100 K-entry row, K = 40: a workgroup a chunk, then a pass over the chunks' candidates;
    ties at the K-th value in several chunks still go to the lower indices."""
    model = top_k_model([1, 100000], 40)
    assert kernels(compile_model(model, target=target)) == ["top_k", "top_k"]
    x = np.random.default_rng(5).standard_normal([1, 100000]).astype(np.float32)
    x[0, [7, 33000, 66000, 99999]] = 9.0
    x[0, np.random.default_rng(6).choice(100000, 60, replace=False)] = 5.0  # the K-th value, 60 times
    check_against_onnxruntime(model, feeds={"x": x}, target=target, exact=True)


@pytest.mark.parametrize("target", ["generic", "lavapipe"])
def test_every_element_a_candidate(target):
    """Rising rows: each element enters its invocation's list. llvmpipe ends an invocation's loops
    after 65535 iterations in all, so long rows take chunks even where there are rows enough for
    the device (16 here), and K = MAX_K rows enough chunks that each invocation scans within it
    (on lavapipe, 256 K elements take the lists of invocations that one invocation's would not)."""
    for rows, r, k in ((16, 30000, MAX_K), (1, 100000, 40), (1, 256000, MAX_K)):
        model = top_k_model([rows, r], k)
        x = np.tile(np.arange(r, dtype=np.float32), (rows, 1))
        check_against_onnxruntime(model, feeds={"x": x}, target=target, exact=True)


def test_float16_compile():
    """--precision fp16: the input rounds to float16 and the values come back float32; indices as
    onnxruntime's over the rounded input (ties the rounding made included)."""
    model = top_k_model([2, 5000], 40, largest=0)
    x = np.random.default_rng(7).standard_normal([2, 5000]).astype(np.float32)
    got, _ = run_bundle(compile_model(model, target="lavapipe", precision="fp16"), {"x": x})
    want = run_onnxruntime(model, {"x": x.astype(np.float16).astype(np.float32)})
    assert got["values"].dtype == np.float32
    np.testing.assert_array_equal(got["indices"], want["indices"])
    np.testing.assert_array_equal(got["values"], want["values"])


@pytest.mark.parametrize("model, words", [
    (top_k_model([2, 600], MAX_K + 1), [f"K = {MAX_K + 1} is more than the {MAX_K}", "no full-sort path"]),
    (top_k_model([2, 6], 0), ["K = 0 is not in 1..6"]),
    (top_k_model([2, 6], 3, k_input=False), ["TopK", "'k' comes from the computation", "constant"]),
])
def test_refused(model, words):
    with pytest.raises(CompileError) as e:
        compile_model(model, target="lavapipe")
    assert all(w in str(e.value) for w in words) and "\n" not in str(e.value), str(e.value)


def test_row_past_one_merge_refused():
    with pytest.raises(CompileError, match="rows of 20000000 elements take 506 chunks at K = 256, more candidates "
                                           "than one workgroup merges"):
        compile_model(top_k_model([1, 20_000_000], MAX_K), target="generic")


def test_check_names_a_run_time_k():
    from compiler.check import check_model
    report = check_model(top_k_model([2, 6], 3, k_input=False), target="lavapipe")
    assert "TopK 'TopK_0': 'k' comes from the computation" in report.error
