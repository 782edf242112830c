"""Conv (implicit GEMM, 1x1-as-GEMM, depthwise, grouped) against onnxruntime."""

import importlib
from dataclasses import replace

import onnx
import pytest

from compiler.targets import TARGETS

from tests.harness import check_against_onnxruntime
from tests.onnx_builders import he_normal, single_op_model, small_normal


def _conv_model(rng, *, n=1, c=4, hw=(9, 9), m=8, k=(3, 3), group=1, bias=True, **attrs):
    kh, kw = (k, k) if isinstance(k, int) else k
    w = he_normal(rng, (m, c // group, kh, kw))
    inits = {"w": w}
    if bias:
        inits["b"] = small_normal(rng, (m,), scale=0.5)
    attrs = dict(attrs)
    attrs.setdefault("kernel_shape", [kh, kw])
    if group != 1:
        attrs["group"] = group
    return single_op_model("Conv", {"x": [n, c, *hw]}, attrs, initializers=inits)


CONV_CASES = [
    # kernel sizes
    pytest.param(dict(k=1), id="k1"),
    pytest.param(dict(k=1, c=16, m=24, hw=(7, 7)), id="k1-16to24"),
    pytest.param(dict(k=3, pads=[1, 1, 1, 1]), id="k3-p1"),
    pytest.param(dict(k=3), id="k3-nopad"),
    pytest.param(dict(k=5, pads=[2, 2, 2, 2]), id="k5-p2"),
    pytest.param(dict(k=7, c=3, m=8, hw=(15, 15), strides=[2, 2], pads=[3, 3, 3, 3]), id="k7-s2-p3-stem"),
    pytest.param(dict(k=(3, 1), pads=[1, 0, 1, 0]), id="k3x1"),
    pytest.param(dict(k=(1, 5), pads=[0, 2, 0, 2]), id="k1x5"),
    pytest.param(dict(k=(2, 3)), id="k2x3-nopad"),
    # strides
    pytest.param(dict(k=3, strides=[2, 2], pads=[1, 1, 1, 1]), id="k3-s2-p1"),
    pytest.param(dict(k=1, strides=[2, 2]), id="k1-s2"),
    pytest.param(dict(k=3, strides=[2, 1], pads=[1, 1, 1, 1]), id="k3-s2x1"),
    pytest.param(dict(k=3, strides=[2, 2], hw=(10, 10)), id="k3-s2-even-nopad"),
    # pads
    pytest.param(dict(k=3, pads=[0, 1, 2, 1]), id="pads-asym-0121"),
    pytest.param(dict(k=3, pads=[2, 0, 0, 1]), id="pads-asym-2001"),
    pytest.param(dict(k=1, pads=[1, 1, 1, 1]), id="k1-padded"),
    # auto_pad
    pytest.param(dict(k=3, auto_pad="SAME_UPPER"), id="same-upper-k3"),
    pytest.param(dict(k=3, auto_pad="SAME_UPPER", strides=[2, 2], hw=(10, 10)), id="same-upper-k3-s2-even"),
    pytest.param(dict(k=4, auto_pad="SAME_UPPER", hw=(9, 9)), id="same-upper-k4"),
    pytest.param(dict(k=4, auto_pad="SAME_LOWER", hw=(9, 9)), id="same-lower-k4"),
    pytest.param(dict(k=3, auto_pad="SAME_LOWER", strides=[2, 2], hw=(10, 10)), id="same-lower-k3-s2-even"),
    pytest.param(dict(k=3, auto_pad="VALID"), id="valid-k3"),
    pytest.param(dict(k=3, auto_pad="VALID", strides=[2, 2]), id="valid-k3-s2"),
    # dilation
    pytest.param(dict(k=3, dilations=[2, 2], pads=[2, 2, 2, 2]), id="dil2-p2"),
    pytest.param(dict(k=3, dilations=[2, 1], pads=[2, 1, 2, 1]), id="dil2x1"),
    pytest.param(dict(k=3, dilations=[2, 2], strides=[2, 2], hw=(11, 11)), id="dil2-s2"),
    # groups
    pytest.param(dict(k=3, c=8, m=8, group=2, pads=[1, 1, 1, 1]), id="group2"),
    pytest.param(dict(k=1, c=8, m=12, group=4), id="group4-k1"),
    pytest.param(dict(k=3, c=8, m=8, group=8, pads=[1, 1, 1, 1]), id="depthwise-k3"),
    pytest.param(dict(k=3, c=8, m=8, group=8, pads=[1, 1, 1, 1], strides=[2, 2]), id="depthwise-k3-s2"),
    pytest.param(dict(k=5, c=6, m=6, group=6, pads=[2, 2, 2, 2], bias=False), id="depthwise-k5-nobias"),
    pytest.param(dict(k=3, c=4, m=8, group=4, pads=[1, 1, 1, 1]), id="depthwise-multiplier2"),
    pytest.param(dict(k=3, c=8, m=8, group=8, auto_pad="SAME_UPPER", strides=[2, 2], hw=(10, 10)), id="depthwise-same-upper-s2"),
    # bias, batch, odd spatial sizes
    pytest.param(dict(k=3, bias=False, pads=[1, 1, 1, 1]), id="k3-nobias"),
    pytest.param(dict(k=1, bias=False), id="k1-nobias"),
    pytest.param(dict(k=3, n=2, pads=[1, 1, 1, 1]), id="batch2-k3"),
    pytest.param(dict(k=1, n=2), id="batch2-k1"),
    pytest.param(dict(k=3, n=2, c=8, m=8, group=8, pads=[1, 1, 1, 1]), id="batch2-depthwise"),
    pytest.param(dict(k=3, hw=(7, 11), pads=[1, 1, 1, 1]), id="odd-7x11"),
    pytest.param(dict(k=3, hw=(13, 5), strides=[2, 2], pads=[1, 1, 1, 1]), id="odd-13x5-s2"),
    pytest.param(dict(k=3, c=3, m=5, hw=(1, 1), pads=[1, 1, 1, 1]), id="spatial-1x1"),
    pytest.param(dict(k=3, c=5, m=7, hw=(9, 9), pads=[1, 1, 1, 1]), id="odd-channels-5to7"),
    # medium
    pytest.param(dict(k=3, c=32, m=64, hw=(28, 28), pads=[1, 1, 1, 1]), id="medium-32to64-28x28"),
    pytest.param(dict(k=1, c=64, m=128, hw=(28, 28)), id="medium-k1-64to128-28x28"),
]


@pytest.mark.parametrize("case", CONV_CASES)
def test_conv(case, rng):
    check_against_onnxruntime(_conv_model(rng, **case))


LAVAPIPE = [TARGETS["lavapipe"],
            replace(TARGETS["lavapipe"], name="lavapipe-implicit-im2col", im2col_max_bytes=0)]


@pytest.mark.parametrize("target", LAVAPIPE, ids=lambda t: t.name)
@pytest.mark.parametrize("case", CONV_CASES)
def test_conv_lavapipe_texel_kernel(case, target, rng):
    """The lavapipe profile reads weights and image through texel buffers: im2col written out
    then a GEMM, or (past im2col_max_bytes) implicit GEMM."""
    check_against_onnxruntime(_conv_model(rng, **case), target=target)


WINOGRAD_CASES = [
    pytest.param(dict(k=3, c=16, m=16, hw=(9, 9), pads=[1, 1, 1, 1]), id="odd-output"),
    pytest.param(dict(k=3, c=32, m=64, hw=(7, 7), pads=[1, 1, 1, 1]), id="more-channels-than-tiles"),
    pytest.param(dict(k=3, c=16, m=24, hw=(10, 6), pads=[0, 1, 2, 1], n=2), id="asym-pads-batch2"),
    pytest.param(dict(k=3, c=20, m=20, hw=(5, 5)), id="nopad-3x3-output"),
    pytest.param(dict(k=3, c=16, m=16, hw=(12, 12), pads=[1, 1, 1, 1], bias=False), id="no-bias"),
]


@pytest.mark.parametrize("profile", ["lavapipe", "nvidia"])
@pytest.mark.parametrize("tile", [2, 4])
@pytest.mark.parametrize("case", WINOGRAD_CASES)
def test_conv_winograd(case, tile, profile, rng):
    """3x3 stride-1 layers run as Winograd F(m x m, 3x3): input transform, (m + 2)^2 GEMMs (the
    texel kernel on lavapipe, the shared-memory tiles on nvidia, whose profile takes F(2x2)),
    output transform with the epilogue."""
    target = replace(TARGETS[profile], name=f"{profile}-winograd-{tile}", winograd=tile)
    result = check_against_onnxruntime(_conv_model(rng, **case), target=target)
    names = [k["name"] for k in result["manifest"]["kernels"]]
    assert any(n.startswith("winograd_input") for n in names), names
    assert any(n.startswith("winograd_output") for n in names), names


def test_winograd_weights_past_one_binding_take_the_gemm(monkeypatch, rng):
    """Winograd F(4x4) holds 36 / 9 times a kernel's weights: past the range every device binds
    (2^27 bytes; Wide ResNet-50's 1024-channel layers reach 144 MiB) the layer takes im2col and a
    GEMM instead, and the bundle runs where a 128 MiB binding is the limit. (A small stand-in
    for 2^27 here.)"""
    conv = importlib.import_module("compiler.lower.conv")
    monkeypatch.setattr(conv, "GUARANTEED_BINDING_BYTES", 36 * 16 * 16 * 4 - 4)
    target = replace(TARGETS["lavapipe"], name="lavapipe-winograd-small-binding", winograd=4)
    result = check_against_onnxruntime(_conv_model(rng, **WINOGRAD_CASES[0].values[0]), target=target)
    names = [k["name"] for k in result["manifest"]["kernels"]]
    assert not any(n.startswith("winograd") for n in names), names


# GPU profiles write im2col out with the batch's images side by side along its rows (and copy
# small images of pointwise layers the same way): the generic profile with a scratch budget.
COLUMNS = replace(TARGETS["generic"], name="generic-im2col-columns", im2col_max_bytes=64 << 20)
COLUMN_CASES = CONV_CASES + [
    pytest.param(dict(k=3, n=3, c=8, m=12, hw=(7, 7), pads=[1, 1, 1, 1]), id="batch3-k3-7x7"),
    pytest.param(dict(k=1, n=3, c=16, m=24, hw=(7, 7)), id="batch3-pointwise-7x7"),
    pytest.param(dict(k=3, n=2, c=8, m=8, group=2, hw=(5, 6), strides=[2, 2]), id="batch2-group2-s2"),
    pytest.param(dict(k=1, n=5, c=4, m=40, hw=(3, 3), bias=False), id="batch5-pointwise-3x3"),
    pytest.param(dict(k=1, n=2, c=8, m=16, hw=(8, 8)), id="batch2-pointwise-64-pixels-no-copy"),
]


@pytest.mark.parametrize("case", COLUMN_CASES)
def test_conv_images_as_columns(case, rng):
    result = check_against_onnxruntime(_conv_model(rng, **case), target=COLUMNS)
    names = [k["name"] for k in result["manifest"]["kernels"]]
    pointwise_whole = case.get("k") == 1 and not case.get("strides") and not case.get("pads") \
        and (case.get("n", 1) == 1 or case.get("hw", (9, 9))[0] * case.get("hw", (9, 9))[1] % 64 == 0)
    depthwise = case.get("group", 1) == case.get("c", 4) and case.get("group", 1) > 1
    assert any(n.startswith("im2col") for n in names) == (not pointwise_whole and not depthwise), names


def test_conv_images_as_columns_residual_float16(rng):
    """The fused epilogue (bias, residual Add, Relu) reads image, channel and pixel from a column
    that spans images; float16 storage on the same path."""
    n, c, m, hw = 3, 8, 16, (5, 5)
    w = he_normal(rng, (m, c, 3, 3))
    b = small_normal(rng, (m,), scale=0.5)
    model = single_op_model("Conv", {"x": [n, c, *hw]}, dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
                            initializers={"w": w, "b": b})
    graph = model.graph
    graph.input.append(onnx.helper.make_tensor_value_info("r", onnx.TensorProto.FLOAT, [n, m, *hw]))
    conv_out = graph.output[0].name
    graph.node.append(onnx.helper.make_node("Add", [conv_out, "r"], ["sum"]))
    graph.node.append(onnx.helper.make_node("Relu", ["sum"], ["out"]))
    del graph.output[:]
    graph.output.append(onnx.helper.make_tensor_value_info("out", onnx.TensorProto.FLOAT, [n, m, *hw]))
    for precision, tol in (("fp32", 1e-4), ("fp16", 1e-2)):
        result = check_against_onnxruntime(model, target=COLUMNS, precision=precision, rtol_l2=tol,
                                           **({} if precision == "fp32" else dict(rtol=2e-2, atol=2e-2)))
        # fp16: float32 inputs and outputs cast at the ends (elementwise_typed kernels)
        names = [k["name"] for k in result["manifest"]["kernels"] if not k["name"].startswith("elementwise_typed")]
        assert len(names) == 2 and names[0] == "im2col" and names[1].endswith("_epilogue"), names


def test_conv_im2col_over_budget_gathers_on_the_fly(rng):
    """A layer whose im2col is larger than the profile's scratch budget is not written out: the
    GEMM gathers it on the fly (implicit GEMM), with the same results."""
    small = replace(COLUMNS, name="generic-im2col-1k", im2col_max_bytes=1024)
    model = _conv_model(rng, k=3, n=2, c=8, m=8, hw=(9, 9), pads=[1, 1, 1, 1])
    result = check_against_onnxruntime(model, target=small)
    names = [k["name"] for k in result["manifest"]["kernels"]]
    assert not any(n.startswith("im2col") for n in names) and any("im2col" in n for n in names), names


def test_conv1d_images_as_columns(rng):
    """A 1-D convolution (Whisper's stem) runs as 2-D with one row: its images side by side too."""
    w = he_normal(rng, (12, 6, 3))
    model = single_op_model("Conv", {"x": [3, 6, 20]}, dict(kernel_shape=[3], pads=[1, 1], strides=[2]),
                            initializers={"w": w, "b": small_normal(rng, (12,), scale=0.5)})
    result = check_against_onnxruntime(model, target=COLUMNS)
    assert [k["name"] for k in result["manifest"]["kernels"]][0] == "im2col"
