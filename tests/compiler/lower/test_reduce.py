"""The Reduce ops against onnxruntime over axes sets, keepdims, and both opset forms."""

import numpy as np
import pytest

from tests.harness import check_against_onnxruntime, random_feeds
from tests.onnx_builders import single_op_model


def at_opset(model, version):
    """The model re-targeted at another opset, output shapes re-inferred."""
    from tests.onnx_builders import _fill_output_shapes

    model.opset_import[0].version = version
    return _fill_output_shapes(model)


OPS = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
       "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp"]
AXES = [pytest.param([2, 3], id="spatial"), pytest.param([1], id="channels"),
        pytest.param([0, 2], id="non-adjacent"), pytest.param([-1], id="last"),
        pytest.param(None, id="all")]


def _feeds(model, op):
    x = random_feeds(model, seed=2)["x"]
    if op in ("ReduceLogSum", "ReduceProd"):
        x = np.abs(x) * 0.5 + 0.75  # log of a positive sum; a product that neither vanishes nor explodes
    return {"x": x.astype(np.float32)}


@pytest.mark.parametrize("keepdims", [1, 0], ids=["keep", "drop"])
@pytest.mark.parametrize("axes", AXES)
@pytest.mark.parametrize("op", OPS)
def test_reduce(op, axes, keepdims):
    """Axes as an input (opset 18; ReduceSum since 13)."""
    inits = {} if axes is None else {"axes": np.array(axes, np.int64)}
    model = at_opset(single_op_model(op, {"x": [2, 3, 4, 5]}, {"keepdims": keepdims}, initializers=inits), 18)
    check_against_onnxruntime(model, feeds=_feeds(model, op))


@pytest.mark.parametrize("op", ["ReduceMean", "ReduceMax", "ReduceSum"])
def test_reduce_axes_attribute(op):
    """Opset 11 to 12 (13 to 17 for all but ReduceSum) take axes as an attribute."""
    model = at_opset(single_op_model(op, {"x": [2, 8, 7, 7]}, {"axes": [2, 3], "keepdims": 1}), 11)
    check_against_onnxruntime(model)


def test_reduce_mean_global_pool_shape():
    """ReduceMean over H, W: how exporters write global average pooling."""
    model = at_opset(single_op_model("ReduceMean", {"x": [1, 256, 14, 14]}, {"keepdims": 0},
                                     initializers={"axes": np.array([2, 3], np.int64)}), 18)
    check_against_onnxruntime(model)


def test_reduce_sum_noop_with_empty_axes():
    model = single_op_model("ReduceSum", {"x": [3, 4]}, {"noop_with_empty_axes": 1})
    check_against_onnxruntime(model)


@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin"])
@pytest.mark.parametrize("axes", [[1], [0, 2], None])
def test_reduce_bool(op, axes):
    """ReduceMax / ReduceMin of bool (opset 20): any / all, outputs packed four to a word."""
    from onnx.reference import ReferenceEvaluator

    from compiler import onnx_backend

    if axes is None:
        model = single_op_model(op, {"x": [3, 5, 7]}, input_dtypes={"x": np.bool_},
                                output_dtypes=[np.bool_])
    else:  # opset 18+: axes as an input
        model = single_op_model(op, {"x": [3, 5, 7]}, initializers={"axes": np.array(axes)},
                                node_inputs=["x", "axes"], input_dtypes={"x": np.bool_},
                                output_dtypes=[np.bool_])
    model = at_opset(model, 20)
    x = np.random.default_rng(1).random((3, 5, 7)) < (0.9 if op == "ReduceMin" else 0.1)
    (got,) = onnx_backend.run_model(model, [x])
    (want,) = ReferenceEvaluator(model).run(None, {"x": x})
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("op", OPS)
def test_reduce_float64(op):
    """float64 (shaderFloat64): every Reduce op within the harness's float64 bounds (rtol 1e-12);
    ReduceLogSum and ReduceLogSumExp call expr.HELPERS' double exp and log."""
    model = at_opset(single_op_model(op, {"x": [2, 3, 4, 5]}, {"keepdims": 0},
                                     initializers={"axes": np.array([1, 3], np.int64)},
                                     input_dtypes={"x": np.float64}, output_dtypes=[np.float64]), 18)
    feeds = {"x": _feeds(model, op)["x"].astype(np.float64) * 3}
    check_against_onnxruntime(model, feeds=feeds, rtol_l2=1e-12)



@pytest.mark.parametrize("op", [o for o in OPS if o != "ReduceLogSumExp"])
@pytest.mark.parametrize("shape,axes", [([2, 3, 40, 37], [2, 3]), ([3, 300], [1]), ([70, 5], [0])],
                         ids=["spatial-1480", "row-300", "strided-70"])
def test_reduce_long_rows_shared_by_lanes(op, shape, axes):
    """GPU profiles split rows of >= 32 elements over lanes of one workgroup that combine in shared
    memory (256 lanes for 1480 elements, 64 for 300, 16 for 70; partial last workgroups; strided
    rows); CPU profiles keep one invocation per output."""
    from compiler.dtypes import scalar_type
    from compiler.lower.reduce import reduction_lanes
    from compiler.targets import TARGETS

    n = int(np.prod([shape[a] for a in axes]))
    types = {"T": scalar_type("float32")}
    assert reduction_lanes(TARGETS["generic"], n, "sum", types) == {1480: 256, 300: 64, 70: 16}[n]
    assert reduction_lanes(TARGETS["lavapipe"], n, "sum", types) == 1
    model = at_opset(single_op_model(op, {"x": shape}, {"keepdims": 0},
                                     initializers={"axes": np.array(axes, np.int64)}), 18)
    feeds = _feeds(model, op)
    if op == "ReduceProd":  # 1480 factors near 1, so the product stays finite
        feeds["x"] = (1 + 0.01 * random_feeds(model, seed=3)["x"]).astype(np.float32)
    check_against_onnxruntime(model, feeds=feeds, target="generic")


@pytest.mark.parametrize("target", ["generic", "lavapipe"])
def test_mean_of_a_constant_row_is_its_value(target):
    """A mean is the first element plus the mean of the differences from it: a constant row's is
    its value exactly, so x - mean(x) is 0 (a plain sum / R of 17 copies of -0.33535156 is one
    rounding off, and a LayerNorm written out divides that by sqrt(epsilon))."""
    from onnx import TensorProto, helper, numpy_helper

    from compiler import compile_model
    from tests.harness import run_bundle

    graph = helper.make_graph(
        [helper.make_node("ReduceMean", ["x", "axes"], ["m"]), helper.make_node("Sub", ["x", "m"], ["y"])],
        "centered", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [112, 17])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [112, 17])],
        [numpy_helper.from_array(np.array([-1], np.int64), "axes")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)
    x = np.repeat(np.random.default_rng(3).standard_normal((112, 1)), 17, axis=1).astype(np.float32)
    got, _ = run_bundle(compile_model(model, target=target), {"x": x})
    assert not got["y"].any()


@pytest.mark.parametrize("target", ["generic", "lavapipe"])
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("op", ["ReduceSum", "ReduceProd"])
@pytest.mark.parametrize("axes", [[1], [0, 2], [1, 2]])
def test_reduce_integers(op, dtype, axes, target):
    """Integer sums and products (a count of mask elements, as Mask2Former's decoder takes),
    exact, over 40-element rows (several invocations share a row on GPU profiles) and across."""
    if op == "ReduceSum":
        model = single_op_model(op, {"x": [3, 40, 5]}, initializers={"axes": np.array(axes, np.int64)},
                                node_inputs=["x", "axes"], input_dtypes={"x": dtype}, output_dtypes=[dtype])
    else:
        model = single_op_model(op, {"x": [3, 40, 5]}, {"axes": axes}, input_dtypes={"x": dtype},
                                output_dtypes=[dtype])
    low = -2 if op == "ReduceProd" else -1000
    x = np.random.default_rng(4).integers(low, -low + 1, (3, 40, 5)).astype(dtype)
    check_against_onnxruntime(model, feeds={"x": x}, target=target, exact=True)
