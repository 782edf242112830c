"""Epilogue fusion (bias, activation, residual Add rendered into the producing kernel's store).

The residual operand of a fused Add must be complete before the fused kernel runs, whichever
node produces it and wherever that node sits in the ONNX node order."""

import numpy as np
import pytest

from tests.harness import check_against_onnxruntime
from tests.onnx_builders import GraphBuilder


def _two_branch_add(*, bn: bool, k_a: int = 1, other: str = "conv", relu_after: bool = False,
                    swap: bool = False, seed: int = 40):
    g = GraphBuilder("two_branch_add", seed)
    x = g.input("x", [1, 4, 6, 6])
    a = g.conv(x, 4, 8, k_a, bias=not bn)
    a = g.bn(a, 8) if bn else a
    if other == "conv":
        b = g.conv(x, 4, 8, 1, bias=not bn)
        b = g.bn(b, 8) if bn else b
    elif other == "conv-after-relu":
        b = g.conv(g.node("Relu", [x]), 4, 8, 1, bias=not bn)
    elif other == "sigmoid-of-conv":
        b = g.node("Sigmoid", [g.conv(x, 4, 8, 3)])
    else:
        raise ValueError(other)
    s = g.node("Add", [b, a] if swap else [a, b], out=None if relu_after else "y")
    if relu_after:
        g.node("Relu", [s], out="y")
    return g.build(["y"])


@pytest.mark.parametrize("case", [
    pytest.param(dict(bn=False), id="conv+conv"),
    pytest.param(dict(bn=False, swap=True), id="conv+conv-swapped"),
    pytest.param(dict(bn=True), id="convbn+convbn-resnet-projection"),
    pytest.param(dict(bn=True, k_a=3, relu_after=True), id="convbn3x3+convbn1x1-relu"),
    pytest.param(dict(bn=False, other="conv-after-relu"), id="conv+conv-of-relu"),
    pytest.param(dict(bn=False, other="sigmoid-of-conv", swap=True), id="sigmoid-of-conv+conv"),
])
def test_add_of_two_kernel_outputs(case):
    check_against_onnxruntime(_two_branch_add(**case))


def test_conv_add_input_relu():
    """Conv -> Add(graph input) -> Relu: the identity-shortcut residual."""
    g = GraphBuilder("residual", seed=41)
    x = g.input("x", [1, 8, 7, 7])
    y = g.conv(x, 8, 8, 3)
    g.node("Relu", [g.node("Add", [x, y])], out="y")
    check_against_onnxruntime(g.build(["y"]))


def test_gemm_add_gemm():
    g = GraphBuilder("gemm_add", seed=42)
    x = g.input("x", [3, 16])
    a = g.gemm(x, 16, 8)
    b = g.gemm(g.node("Relu", [x]), 16, 8)
    g.node("Add", [a, b], out="y")
    check_against_onnxruntime(g.build(["y"]))


def test_fused_value_also_a_graph_output():
    """The Conv output feeds a fused Relu and is itself a graph output: both must be right."""
    g = GraphBuilder("conv_relu_shared", seed=43)
    x = g.input("x", [1, 4, 6, 6])
    c = g.conv(x, 4, 6, 3)
    g.node("Identity", [c], out="conv_out")
    g.node("Relu", [c], out="y")
    check_against_onnxruntime(g.build(["conv_out", "y"]))


def test_add_relu_chain_after_conv_with_broadcast_bias():
    """Conv -> Add([C,1,1] constant) -> Relu -> Mul(scalar): bias-like and scale epilogues."""
    g = GraphBuilder("conv_chain", seed=44)
    x = g.input("x", [1, 4, 6, 6])
    c = g.conv(x, 4, 6, 3, bias=False)
    c = g.node("Add", [c, g.const("shift", (0.3 * g.rng.standard_normal((6, 1, 1))).astype(np.float32))])
    c = g.node("Relu", [c])
    g.node("Mul", [c, g.const("scale", np.array(g.rng.uniform(0.5, 2.0), np.float32))], out="y")
    check_against_onnxruntime(g.build(["y"]))


@pytest.mark.parametrize("bias", [True, False], ids=["conv-bias", "conv-nobias"])
@pytest.mark.parametrize("shape", [(), (6, 1, 1), (1, 6, 1, 1), (6, 6), (1, 6, 6, 6)],
                         ids=["scalar", "C11", "1C11", "HW", "full"])
def test_conv_add_constant(bias, shape):
    """Conv -> Add(constant of every broadcastable shape)."""
    g = GraphBuilder("conv_add_const", seed=45)
    x = g.input("x", [1, 4, 6, 6])
    c = g.conv(x, 4, 6, 3, bias=bias)
    g.node("Add", [c, g.const("shift", (0.3 * g.rng.standard_normal(shape)).astype(np.float32))], out="y")
    check_against_onnxruntime(g.build(["y"]))
