"""Views (Flatten, Reshape, Identity, Dropout): aliases of their source, no kernel."""

import numpy as np
import pytest

from tests.harness import check_against_onnxruntime
from tests.onnx_builders import GraphBuilder, he_normal, single_op_model


@pytest.mark.parametrize("axis", [0, 1, 2, -1], ids=["axis0", "axis1", "axis2", "axis-1"])
def test_flatten(axis):
    check_against_onnxruntime(single_op_model("Flatten", {"x": [2, 3, 4, 5]}, {"axis": axis}))


@pytest.mark.parametrize("in_shape,target", [
    pytest.param([2, 3, 4, 5], [0, -1], id="0,-1"),
    pytest.param([2, 3, 4, 5], [0, 0, -1], id="0,0,-1"),
    pytest.param([2, 3, 4, 5], [-1, 20], id="-1,20"),
    pytest.param([2, 3, 4, 5], [2, 0, 5, -1], id="2,0,5,-1"),
    pytest.param([2, 3, 4, 5], [120], id="to-1d"),
    pytest.param([6, 20], [2, 3, 4, 5], id="to-4d"),
    pytest.param([1, 2048, 1, 1], [1, 2048], id="resnet-head"),
])
def test_reshape(in_shape, target):
    model = single_op_model("Reshape", {"x": in_shape},
                            initializers={"shape": np.array(target, np.int64)})
    check_against_onnxruntime(model)


def test_identity():
    check_against_onnxruntime(single_op_model("Identity", {"x": [3, 5, 7]}))


def test_dropout_inference():
    check_against_onnxruntime(single_op_model("Dropout", {"x": [2, 16]}))


def test_dropout_mask_output():
    """The mask of inference Dropout is a constant all-true bool tensor, copied out packed."""
    model = single_op_model("Dropout", {"x": [3, 7]}, outputs=("y", "mask"),
                            output_dtypes=[np.float32, np.bool_])
    check_against_onnxruntime(model)


def test_identity_int8_input_as_output():
    model = single_op_model("Identity", {"x": [5, 3]}, input_dtypes={"x": np.int8}, output_dtypes=[np.int8])
    check_against_onnxruntime(model, exact=True)


def test_dropout_with_ratio_input():
    model = single_op_model("Dropout", {"x": [2, 16]}, initializers={"ratio": np.array(0.3, np.float32)})
    check_against_onnxruntime(model)


def test_chained_views_feed_a_kernel_and_are_outputs():
    """Relu -> Reshape(0,-1) -> Identity -> Flatten -> Dropout -> Gemm, with the Flatten output
    also a graph output: the aliases must both be readable by the Gemm and come back out."""
    g = GraphBuilder("views", seed=10)
    x = g.input("x", [2, 4, 3, 3])
    r = g.node("Relu", [x])
    v = g.node("Reshape", [r, g.const("shape", np.array([0, -1], np.int64))])
    v = g.node("Identity", [v])
    f = g.node("Flatten", [v], out="flat", axis=1)
    d = g.node("Dropout", [f])
    g.node("Gemm", [d, g.const("w", he_normal(g.rng, (5, 36))), g.const("b", (0.1 * g.rng.standard_normal(5)).astype(np.float32))],
           out="y", transB=1)
    check_against_onnxruntime(g.build(["flat", "y"]))


def test_view_of_graph_input_feeds_kernel():
    g = GraphBuilder("input_view", seed=11)
    x = g.input("x", [2, 3, 4, 5])
    f = g.node("Flatten", [x], axis=2)
    g.node("Sigmoid", [f], out="y")
    check_against_onnxruntime(g.build(["y"]))


def test_view_of_initializer_feeds_kernel(rng):
    """A Reshape of a weight (constant-foldable) used as the MatMul operand."""
    g = GraphBuilder("init_view", seed=12)
    x = g.input("x", [3, 8])
    w = g.const("w_flat", he_normal(rng, (48,), fan_in=8))
    w = g.node("Reshape", [w, g.const("shape", np.array([8, 6], np.int64))])
    g.node("MatMul", [x, w], out="y")
    check_against_onnxruntime(g.build(["y"]))


def test_two_outputs_alias_one_tensor():
    """Two views of the same kernel output, both graph outputs."""
    g = GraphBuilder("two_views", seed=13)
    x = g.input("x", [2, 3, 4])
    s = g.node("Sigmoid", [x])
    g.node("Flatten", [s], out="flat", axis=1)
    g.node("Reshape", [s, g.const("shape", np.array([-1], np.int64))], out="vec")
    check_against_onnxruntime(g.build(["flat", "vec"]))


def test_cast_to_its_own_dtype_is_a_view():
    """Relu -> Cast(float32 -> float32) -> Softmax: the Cast adds no kernel (HF's GPT-2 exports
    one after each attention softmax, where a kernel would also stop attention fusion)."""
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Cast", ["r"], ["c"], to=TensorProto.FLOAT),
             helper.make_node("Softmax", ["c"], ["y"], axis=-1)]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 17)])
    result = check_against_onnxruntime(model)
    assert len(result["manifest"]["dispatches"]) == 2


@pytest.mark.parametrize("shape,perm,view", [
    pytest.param([1, 5, 6], [1, 0, 2], True, id="batch1-seq-first"),
    pytest.param([5, 1, 6], [1, 0, 2], True, id="seq-first-to-batch1"),
    pytest.param([2, 1, 3, 1], [1, 0, 3, 2], True, id="size1-dims-only"),
    pytest.param([2, 5, 6], [1, 0, 2], False, id="batch2-a-copy"),
])
def test_transpose_moving_only_size1_dims_is_a_view(shape, perm, view):
    """A Transpose whose dims longer than 1 keep their order (nn.MultiheadAttention's batch-first
    swap at batch 1) is a view; any other is a kernel. The Softmax keeps the result off the input
    (an elementwise reader would read a copying Transpose in place: passes/transposes_in_place.py)."""
    from bundles import read_bundle
    from tests.harness import compile_cached

    g = GraphBuilder("transpose_view", seed=13)
    t = g.node("Transpose", [g.input("x", shape)], perm=perm)
    g.node("Softmax", [t], out="y", axis=-1)
    model = g.build(["y"])
    check_against_onnxruntime(model)
    names = [k["name"] for k in read_bundle(compile_cached(model)).manifest["kernels"]]
    assert ("strided_copy" not in names) == view, names
