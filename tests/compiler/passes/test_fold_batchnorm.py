"""BatchNormalization folding into Conv / Gemm, and BatchNormalization on its own."""

import numpy as np
import pytest

from tests.harness import check_against_onnxruntime
from tests.onnx_builders import GraphBuilder, bn_params, single_op_model


def _conv_bn(*, c=4, m=8, k=3, group=1, bias=True, relu=False, epsilon=1e-5, n=1, hw=9, seed=20):
    g = GraphBuilder("conv_bn", seed)
    x = g.input("x", [n, c, hw, hw])
    y = g.conv(x, c, m, k, group=group, bias=bias, name="/conv/Conv")
    y = g.bn(y, m, epsilon=epsilon, name="/bn/BatchNormalization")
    if relu:
        y = g.node("Relu", [y], name="/relu/Relu")
    g.node("Identity", [y], out="y")
    return g.build(["y"])


CONV_BN_CASES = [
    pytest.param(dict(), id="k3-bias"),
    pytest.param(dict(bias=False), id="k3-nobias"),
    pytest.param(dict(k=1, c=16, m=32), id="k1"),
    pytest.param(dict(c=8, m=8, group=8), id="depthwise"),
    pytest.param(dict(c=8, m=8, group=2), id="group2"),
    pytest.param(dict(relu=True), id="k3-relu"),
    pytest.param(dict(epsilon=1e-3, n=2), id="eps1e-3-batch2"),
]


@pytest.mark.parametrize("case", CONV_BN_CASES)
def test_conv_bn(case):
    check_against_onnxruntime(_conv_bn(**case))


def test_conv_bn_is_folded():
    """Conv + BN (+ Relu) is one dispatch: the BN lives in the Conv's weights and bias."""
    result = check_against_onnxruntime(_conv_bn(relu=True))
    dispatches = result["manifest"]["dispatches"]
    assert len(dispatches) == 1, f"expected 1 dispatch for Conv+BN+Relu, got {len(dispatches)}: " + \
        str([d.get("nodes") for d in dispatches])


def _gemm_bn(*, batch=4, n_in=16, n_out=12, seed=21):
    g = GraphBuilder("gemm_bn", seed)
    x = g.input("x", [batch, n_in])
    y = g.gemm(x, n_in, n_out, name="/fc/Gemm")
    y = g.bn(y, n_out, name="/bn/BatchNormalization")
    g.node("Identity", [y], out="y")
    return g.build(["y"])


@pytest.mark.parametrize("batch,n_in,n_out", [(4, 16, 12), (1, 33, 7)], ids=["4x16x12", "1x33x7"])
def test_gemm_bn(batch, n_in, n_out):
    check_against_onnxruntime(_gemm_bn(batch=batch, n_in=n_in, n_out=n_out))


def test_gemm_bn_is_folded():
    result = check_against_onnxruntime(_gemm_bn())
    dispatches = result["manifest"]["dispatches"]
    assert len(dispatches) == 1, f"expected 1 dispatch for Gemm+BN, got {len(dispatches)}: " + \
        str([d.get("nodes") for d in dispatches])


@pytest.mark.parametrize("shape", [[2, 6, 5, 7], [3, 6], [1, 6, 1, 1]], ids=["4d", "2d", "4d-1x1"])
def test_standalone_batchnorm(shape, rng):
    """A BatchNormalization on a graph input (nothing to fold into)."""
    p = bn_params(rng, shape[1])
    model = single_op_model("BatchNormalization", {"x": shape}, {"epsilon": 1e-5}, initializers=p)
    check_against_onnxruntime(model)


def test_batchnorm_after_add_not_folded():
    """BN after an Add (not after Conv/Gemm), followed by Relu."""
    g = GraphBuilder("add_bn", seed=22)
    a = g.input("a", [1, 6, 5, 5])
    b = g.input("b", [1, 6, 5, 5])
    y = g.bn(g.node("Add", [a, b]), 6)
    g.node("Relu", [y], out="y")
    check_against_onnxruntime(g.build(["y"]))


def test_conv_with_two_consumers_then_bn():
    """The Conv output is also a graph output, so its BN must not be folded into its weights."""
    g = GraphBuilder("conv_shared", seed=23)
    x = g.input("x", [1, 4, 7, 7])
    c = g.conv(x, 4, 6, 3, name="/conv/Conv")
    g.node("Identity", [c], out="conv_out")
    g.node("Relu", [g.bn(c, 6)], out="y")
    check_against_onnxruntime(g.build(["conv_out", "y"]))
