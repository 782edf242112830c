"""Binary elementwise ops with numpy broadcasting, and the unary activations (generic profile;
the broadcasting cases and the fused chain also on the lavapipe profile, whose kernels fetch
operands through texel buffers)."""

import numpy as np
import pytest

from tests.harness import check_against_onnxruntime, random_feeds
from tests.onnx_builders import GraphBuilder, single_op_model

BROADCAST_CASES = [
    pytest.param([2, 3, 4, 5], [2, 3, 4, 5], id="same-shape"),
    pytest.param([2, 3, 4, 5], [5], id="last-axis"),
    pytest.param([2, 3, 4, 5], [3, 1, 1], id="channel"),
    pytest.param([2, 3, 4, 5], [], id="scalar"),
    pytest.param([2, 3, 4, 5], [1], id="one-element"),
    pytest.param([2, 3, 4, 5], [4, 5], id="rank-differing"),
    pytest.param([5], [2, 3, 4, 5], id="lhs-smaller"),
    pytest.param([], [3, 7], id="lhs-scalar"),
    pytest.param([2, 1, 4, 1], [1, 3, 1, 5], id="both-broadcast"),
    pytest.param([7, 13], [7, 1], id="odd-column"),
    pytest.param([1, 1, 1, 1], [1, 3, 1, 1], id="all-ones"),
]

OPS = ["Add", "Sub", "Mul", "Div"]


def _safe_denominator(x: np.ndarray) -> np.ndarray:
    """Keep |x| in [0.5, 2] so Div compares numbers, not the rounding of tiny denominators."""
    sign = np.where(x >= 0, 1.0, -1.0)
    return (sign * (0.5 + np.abs(x) % 1.5)).astype(np.float32)


@pytest.mark.parametrize("target", ["generic", "lavapipe"])
@pytest.mark.parametrize("a_shape,b_shape", BROADCAST_CASES)
@pytest.mark.parametrize("op", OPS)
def test_binary(op, a_shape, b_shape, target):
    model = single_op_model(op, {"a": a_shape, "b": b_shape})
    feeds = random_feeds(model, seed=1)
    if op == "Div":
        feeds["b"] = _safe_denominator(feeds["b"])
    check_against_onnxruntime(model, feeds=feeds, target=target)


@pytest.mark.parametrize("b_shape", [[], [3, 1, 1], [4, 5], [2, 3, 4, 5]],
                         ids=["scalar", "channel", "rank-differing", "same-shape"])
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("const_side", ["rhs", "lhs"])
def test_binary_constant_operand(op, b_shape, const_side, rng):
    c = rng.standard_normal(b_shape).astype(np.float32)
    if op == "Div" and const_side == "rhs":
        c = _safe_denominator(c)
    node_inputs = ["a", "c"] if const_side == "rhs" else ["c", "a"]
    model = single_op_model(op, {"a": [2, 3, 4, 5]}, initializers={"c": c}, node_inputs=node_inputs)
    feeds = random_feeds(model, seed=2)
    if op == "Div" and const_side == "lhs":
        feeds["a"] = _safe_denominator(feeds["a"])
    check_against_onnxruntime(model, feeds=feeds)


def test_binary_same_input_twice():
    model = single_op_model("Mul", {"a": [3, 8]}, node_inputs=["a", "a"])
    check_against_onnxruntime(model)


UNARY_SHAPES = [pytest.param([2, 3, 4, 5], id="4d"), pytest.param([7, 13], id="odd-2d"),
                pytest.param([1000], id="1d-1000"), pytest.param([1, 64, 28, 28], id="medium")]


@pytest.mark.parametrize("shape", UNARY_SHAPES)
@pytest.mark.parametrize("op", ["Relu", "Sigmoid"])
def test_unary(op, shape):
    model = single_op_model(op, {"x": shape})
    feeds = {"x": (random_feeds(model, seed=3)["x"] * 4).astype(np.float32)}  # reach the tails
    check_against_onnxruntime(model, feeds=feeds)


CLIP_CASES = [
    pytest.param(0.0, 6.0, id="relu6"),
    pytest.param(-0.5, 0.75, id="min-max"),
    pytest.param(-0.25, None, id="min-only"),
    pytest.param(None, 0.3, id="max-only"),
    pytest.param(None, None, id="no-bounds"),
]


@pytest.mark.parametrize("lo,hi", CLIP_CASES)
def test_clip(lo, hi):
    inits = {}
    node_inputs = ["x"]
    if lo is not None:
        inits["min"] = np.array(lo, np.float32)
    if hi is not None:
        inits["max"] = np.array(hi, np.float32)
    if lo is not None or hi is not None:
        node_inputs.append("min" if lo is not None else "")
    if hi is not None:
        node_inputs.append("max")
    model = single_op_model("Clip", {"x": [2, 3, 4, 5]}, initializers=inits, node_inputs=node_inputs)
    check_against_onnxruntime(model)


def test_clip_bounds_as_graph_inputs_are_rejected_clearly():
    """min/max fed at run time (scalar graph inputs): vkc needs them constant and must say so,
    naming the node, rather than compile something wrong."""
    from compiler import CompileError, compile_model

    model = single_op_model("Clip", {"x": [4, 9], "min": [], "max": []}, node_name="clip_rt")
    with pytest.raises(CompileError) as info:
        compile_model(model)
    assert "clip_rt" in str(info.value), str(info.value)


@pytest.mark.parametrize("target", ["generic", "lavapipe"])
def test_elementwise_chain(target):
    """Add -> Mul(const) -> Sigmoid -> Sub -> Relu: a chain the fusion pass may merge."""
    g = GraphBuilder("chain", seed=5)
    a = g.input("a", [2, 8, 5, 5])
    b = g.input("b", [8, 1, 1])
    x = g.node("Add", [a, b])
    x = g.node("Mul", [x, g.const("scale", g.rng.standard_normal([8, 1, 1]).astype(np.float32))])
    x = g.node("Sigmoid", [x])
    x = g.node("Sub", [x, a])
    g.node("Relu", [x], out="y")
    check_against_onnxruntime(g.build(["y"]), target=target)


def test_elementwise_diamond_two_outputs():
    """One value used by two consumers, both graph outputs."""
    g = GraphBuilder("diamond", seed=6)
    a = g.input("a", [3, 17])
    s = g.node("Sigmoid", [a])
    g.node("Mul", [s, a], out="swish")
    g.node("Relu", [s], out="relu_of_sigmoid")
    check_against_onnxruntime(g.build(["swish", "relu_of_sigmoid"]))


@pytest.mark.parametrize("shapes", [
    pytest.param([[2, 3, 4], [2, 3, 4]], id="2-inputs"),
    pytest.param([[2, 3, 4], [3, 4], [2, 1, 4]], id="3-inputs-broadcast"),
    pytest.param([[5, 6]], id="1-input"),
])
def test_sum(shapes):
    """Variadic Sum (ResNet-50 exports from Caffe2 use it for the residual add)."""
    check_against_onnxruntime(single_op_model("Sum", {f"x{i}": s for i, s in enumerate(shapes)}))
