"""3-D convolution (the direct kernel) against onnxruntime: strides, padding, dilation, groups,
auto_pad, fused bias/BatchNorm/ReLU/residual epilogues, and a small r3d-like video network, on
the generic and lavapipe targets."""

import numpy as np
import pytest

from tests.harness import check_against_onnxruntime
from tests.onnx_builders import GraphBuilder, bn_params, he_normal, single_op_model, small_normal

TARGETS = ["generic", "lavapipe"]


def conv3d_model(rng, *, c=4, dhw=(5, 9, 8), m=8, k=(3, 3, 3), group=1, bias=True, **attrs):
    inits = {"w": he_normal(rng, (m, c // group, *k))}
    if bias:
        inits["b"] = small_normal(rng, (m,))
    return single_op_model("Conv", {"x": [2, c, *dhw]}, dict(attrs, group=group, kernel_shape=list(k)),
                           initializers=inits)


CASES = [
    pytest.param({}, id="3x3x3"),
    pytest.param({"pads": [1, 1, 1, 1, 1, 1]}, id="3x3x3-pad1"),
    pytest.param({"k": (3, 7, 7), "strides": [1, 2, 2], "pads": [1, 3, 3, 1, 3, 3], "c": 3, "m": 16},
                 id="r3d-stem"),
    pytest.param({"k": (1, 1, 1), "strides": [2, 2, 2], "bias": False}, id="1x1x1-stride2-no-bias"),
    pytest.param({"dilations": [2, 1, 2], "pads": [2, 0, 1, 2, 0, 1]}, id="dilated-asymmetric-pad"),
    pytest.param({"group": 2, "m": 6, "pads": [1, 1, 1, 1, 1, 1]}, id="groups2-cout-per-group3"),
    pytest.param({"group": 4, "m": 4, "k": (3, 3, 3)}, id="depthwise"),
    pytest.param({"auto_pad": "SAME_UPPER", "strides": [2, 2, 1], "k": (2, 3, 4)}, id="same-upper"),
]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("target", TARGETS)
def test_conv3d(case, target):
    check_against_onnxruntime(conv3d_model(np.random.default_rng(0), **case), target=target)


def _conv_bn(g, x, c_in, c_out, k, stride, pad):
    w = g.const("w", he_normal(g.rng, (c_out, c_in, *k)))
    y = g.node("Conv", [x, w], kernel_shape=list(k), strides=list(stride), pads=list(pad) * 2)
    return g.node("BatchNormalization", [y] + [g.const(n, v) for n, v in bn_params(g.rng, c_out).items()])


def r3d_like():
    """torchvision r3d_18 in miniature: the (3, 7, 7) stem, BatchNorm, ReLU, a basic block of
    3x3x3 convolutions with its residual, a strided block with a 1x1x1 downsample, MaxPool3d,
    AdaptiveAvgPool3d (GlobalAveragePool) and the Linear classifier."""
    g = GraphBuilder("r3d_like", seed=11)
    x = g.input("video", [1, 3, 6, 32, 32])
    stem = g.node("Relu", [_conv_bn(g, x, 3, 16, (3, 7, 7), (1, 2, 2), (1, 3, 3))])
    y = g.node("Relu", [_conv_bn(g, stem, 16, 16, (3, 3, 3), (1, 1, 1), (1, 1, 1))])
    y = _conv_bn(g, y, 16, 16, (3, 3, 3), (1, 1, 1), (1, 1, 1))
    block1 = g.node("Relu", [g.node("Add", [y, stem])])
    y = g.node("Relu", [_conv_bn(g, block1, 16, 32, (3, 3, 3), (2, 2, 2), (1, 1, 1))])
    y = _conv_bn(g, y, 32, 32, (3, 3, 3), (1, 1, 1), (1, 1, 1))
    down = _conv_bn(g, block1, 16, 32, (1, 1, 1), (2, 2, 2), (0, 0, 0))
    block2 = g.node("Relu", [g.node("Add", [y, down])])
    pooled = g.node("MaxPool", [block2], kernel_shape=[3, 3, 3], strides=[2, 2, 2], pads=[1] * 6)
    flat = g.node("Flatten", [g.node("GlobalAveragePool", [pooled])])
    g.node("Gemm", [flat, g.const("fc_w", he_normal(g.rng, (10, 32))),
                    g.const("fc_b", small_normal(g.rng, (10,)))], transB=1, out="logits")
    return g.build(["logits"])


@pytest.mark.parametrize("target", TARGETS)
def test_r3d_like_network(target):
    result = check_against_onnxruntime(r3d_like(), target=target)
    # BatchNorm, ReLU and the residual Add ride in the convolutions' stores: one dispatch per
    # convolution, pooling and the classifier.
    nodes = [d["nodes"] for d in result["manifest"]["dispatches"]]
    assert len(nodes) == 9, nodes
    assert nodes[2] == ["/conv_2", "/batchnormalization_2", "/add_0", "/relu_2"], nodes
