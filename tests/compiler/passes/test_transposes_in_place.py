"""transposes_in_place (and fuse_epilogues through a transposed read): ConvNeXt's block (a
depthwise convolution, permuted channels-last for the LayerNorm and the two Linears, permuted
back for the layer scale and the residual) with neither Transpose a copy and no elementwise
kernel: the depthwise kernel stores channels-last, and the second Linear stores its result back
in NCHW with the layer scale and the residual add in its store. Against onnxruntime on this
device's kernels, the generic profile's and the nvidia profile's (its tensor cores emulated),
float32 and float16; the torchvision ConvNeXt fixture's block transposes and adds all gone. A
product read only by a Transpose stores permuted too. Where a Transpose's result is read
elsewhere too, or its producer cannot store permuted (a convolution that is not depthwise), it
stays a copy. A prompt's head splits around ONNX's Attention (rotary embeddings of Q and K
between) are the attention's strides: no copy."""
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest

from compiler.compile import compile_model, compile_with_kernels
from compiler.targets import TARGETS, emulating_cooperative_matrix
from runtime_min import load
from tests.harness import assert_close, run_onnxruntime
from onnx import helper

from tests.onnx_builders import GraphBuilder, make_model, tensor_info

C, HW = 8, 6


def convnext_block(*, group: int = C, conv_out: bool = False) -> onnx.ModelProto:
    """x [1, C, HW, HW] + scale * T(Linear(GELU(Linear(LN(T(dwconv(x))))))), torchvision's block;
    conv_out: the convolution's NCHW result is an output too."""
    g = GraphBuilder("convnext_block")
    x = g.input("x", [1, C, HW, HW])
    y = g.conv(x, C, C, 7, pad=3, group=group)
    if conv_out:
        y = g.node("Identity", [y], out="conv")
    t = g.node("Transpose", [y], perm=[0, 2, 3, 1])
    ln = g.node("LayerNormalization", [t, g.const("gamma", g.rng.normal(1, 0.1, C).astype(np.float32)),
                                       g.const("beta", g.rng.normal(0, 0.1, C).astype(np.float32))], epsilon=1e-6)
    h = g.node("Add", [g.node("MatMul", [ln, g.const("w1", g.rng.normal(0, 0.3, (C, 4 * C)).astype(np.float32))]),
                       g.const("b1", g.rng.normal(0, 0.1, 4 * C).astype(np.float32))])
    h = g.node("Gelu", [h])
    h = g.node("Add", [g.node("MatMul", [h, g.const("w2", g.rng.normal(0, 0.3, (4 * C, C)).astype(np.float32))]),
                       g.const("b2", g.rng.normal(0, 0.1, C).astype(np.float32))])
    back = g.node("Transpose", [h], perm=[0, 3, 1, 2])
    scaled = g.node("Mul", [g.const("layer_scale", g.rng.normal(0, 0.5, (C, 1, 1)).astype(np.float32)), back])
    g.node("Add", [x, scaled], out="y")
    graph = helper.make_graph(g.nodes, g.name, g.inputs, [tensor_info(o, None) for o in
                              (["y", "conv"] if conv_out else ["y"])], initializer=g.inits)
    return make_model(graph, opset=20)   # LayerNormalization (17), Gelu (20)


def _copies(kernels) -> int:
    return sum(k.template == "strided_copy" for k in kernels)


@pytest.mark.parametrize("target, precision", [("lavapipe", "fp32"), ("generic", "fp32"), ("generic", "fp16"),
                                               ("nvidia-emulated", "fp16")])
def test_block_has_no_copies_and_matches_onnxruntime(target, precision, rng):
    """The block is the depthwise convolution, the LayerNorm and the two products: the first
    storing GELU(x W1 + b1), the second scale * (x W2 + b2) + x in NCHW."""
    if target == "nvidia-emulated":
        target = emulating_cooperative_matrix(TARGETS["nvidia"])
    model = convnext_block()
    kernels = compile_with_kernels(model, target=target, precision=precision)[1]
    # (float16: the input's and the output's casts besides)
    templates = [k.template for k in kernels if not k.nodes[0].startswith("cast ")]
    assert len(templates) == 4 and _copies(kernels) == 0 and "elementwise" not in templates, templates
    assert any(k.template == "conv2d_depthwise" and k.params["channels_last"] for k in kernels)
    feeds = {"x": rng.standard_normal([1, C, HW, HW]).astype(np.float32)}
    with load(compile_model(model, target=target, precision=precision)) as m:
        got = m.run(feeds)
    tol = dict(rtol_l2=1e-5, rtol=1e-4, atol=1e-5) if precision == "fp32" else dict(rtol_l2=1e-2, rtol=1e9, atol=1e9)
    assert_close("y", got["y"], run_onnxruntime(model, feeds)["y"], **tol)


@pytest.mark.parametrize("options", [dict(conv_out=True), dict(group=1)], ids=["read-elsewhere", "not-depthwise"])
def test_transposes_stay_where_they_must(options, rng):
    """The convolution's NCHW result an output too, or a dense convolution: its Transpose stays a copy
    (the one back to NCHW still goes), and the results are right."""
    model = convnext_block(**options)
    kernels = compile_with_kernels(model, target="generic")[1]
    assert _copies(kernels) == 1
    feeds = {"x": rng.standard_normal([1, C, HW, HW]).astype(np.float32)}
    with load(compile_model(model, target="generic")) as m:
        got = m.run(feeds)
    want = run_onnxruntime(model, feeds)
    for name in want:
        assert_close(name, got[name], want[name], rtol_l2=1e-5, rtol=1e-4, atol=1e-5)


def test_torchvision_convnext_transposes_gone():
    """The fixture (torchvision's ConvNeXt class): 18 blocks, each once 6 kernels (two copies and
    an add more), now 4; the stem's and the downsamples' LayerNorms between two Transposes
    normalize the channel axis in place (8 copies gone); left is the input's cast to float16."""
    path = Path(__file__).resolve().parents[2] / "models" / "fixtures" / "convnext_tiny.onnx"
    kernels = compile_with_kernels(onnx.load(path), input_shapes={"input": [1, 3, 64, 64]}, target="nvidia",
                                   precision="fp16")[1]
    counts = Counter(k.template for k in kernels)
    assert counts["strided_copy"] == 0 and counts["conv2d_depthwise"] == 18 and counts["elementwise_typed"] == 1, counts
    assert sum(k.template == "layernorm" and k.params["STRIDED"] for k in kernels) == 4
    assert len(kernels) == 88, counts


def layernorm_2d(*, read_elsewhere: bool = False, perm=(0, 2, 3, 1)) -> onnx.ModelProto:
    """conv(x) permuted channels-last, LayerNorm over the channels, permuted back, then a
    convolution (ConvNeXt's stem and downsampling layers); read_elsewhere: the LayerNorm's result
    is an output too."""
    g = GraphBuilder("layernorm_2d")
    x = g.input("x", [2, 3, HW, HW])
    t = g.node("Transpose", [g.conv(x, 3, C, 2, stride=2, pad=0)], perm=list(perm))
    ln = g.node("LayerNormalization", [t, g.const("gamma", g.rng.normal(1, 0.1, C).astype(np.float32)),
                                       g.const("beta", g.rng.normal(0, 0.1, C).astype(np.float32))],
                epsilon=1e-6, out="ln" if read_elsewhere else None)
    back = g.node("Transpose", [ln], perm=[list(perm).index(a) for a in range(4)])
    g.node("Identity", [g.conv(back, C, C, 1)], out="y")
    outputs = ["y", "ln"] if read_elsewhere else ["y"]
    graph = helper.make_graph(g.nodes, g.name, g.inputs, [tensor_info(o, None) for o in outputs], initializer=g.inits)
    return make_model(graph, opset=17)


@pytest.mark.parametrize("target, precision", [("lavapipe", "fp32"), ("generic", "fp32"), ("generic", "fp16")])
def test_layernorm_between_transposes_normalizes_channels_in_place(target, precision, rng):
    model = layernorm_2d()
    bundle, kernels = compile_with_kernels(model, target=target, precision=precision)
    assert _copies(kernels) == 0 and any(k.template == "layernorm" and k.params["STRIDED"] for k in kernels)
    feeds = {"x": rng.standard_normal([2, 3, HW, HW]).astype(np.float32)}
    with load(bundle) as m:
        got = m.run(feeds)
    tol = dict(rtol_l2=1e-5, rtol=1e-4, atol=1e-5) if precision == "fp32" else dict(rtol_l2=1e-2, rtol=1e9, atol=1e9)
    assert_close("y", got["y"], run_onnxruntime(model, feeds)["y"], **tol)


@pytest.mark.parametrize("options", [dict(read_elsewhere=True), dict(perm=(0, 3, 2, 1))], ids=["read-elsewhere", "not-one-axis-last"])
def test_layernorm_transposes_stay_where_they_must(options, rng):
    model = layernorm_2d(**options)
    bundle, kernels = compile_with_kernels(model, target="generic")
    assert _copies(kernels) >= 1 and not any(k.params.get("STRIDED") for k in kernels)
    feeds = {"x": rng.standard_normal([2, 3, HW, HW]).astype(np.float32)}
    with load(bundle) as m:
        got = m.run(feeds)
    want = run_onnxruntime(model, feeds)
    for name in want:
        assert_close(name, got[name], want[name], rtol_l2=1e-5, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("shape, perm", [([1, 4, 6, 8], [0, 3, 1, 2]), ([1, 6, 8], [0, 2, 1]), ([2, 3, 6, 8], [0, 1, 3, 2])],
                         ids=["rows", "one-batch", "batch-by-batch"])
def test_product_read_only_by_a_transpose_stores_permuted(shape, perm, rng):
    """x @ W [8, 5] + b, permuted: one kernel, its store transposed. Its rows one GEMM (ConvNeXt's
    [1, H, W, C] to NCHW), one batch (SegFormer's and CvT's [1, S, C] to [1, C, S] under the
    dynamo exporter), or batch by batch where the rows are not one stride apart."""
    g = GraphBuilder("product_transposed")
    y = g.node("Add", [g.node("MatMul", [g.input("x", shape), g.const("w", g.rng.normal(size=(8, 5)).astype(np.float32))]),
                       g.const("b", g.rng.normal(size=5).astype(np.float32))])
    g.node("Transpose", [y], perm=perm, out="y")
    model = g.build(["y"])
    kernels = compile_with_kernels(model, target="generic")[1]
    assert len(kernels) == 1, [k.template for k in kernels]
    feeds = {"x": rng.standard_normal(shape).astype(np.float32)}
    with load(compile_model(model, target="generic")) as m:
        assert_close("y", m.run(feeds)["y"], run_onnxruntime(model, feeds)["y"], rtol_l2=1e-5, rtol=1e-4, atol=1e-5)


def test_depthwise_result_read_transposed_by_an_expression(rng):
    """dwconv(x) permuted channels-last, then + b [C] (channels-last) and a ReLU: one kernel, the
    depthwise convolution storing channels-last with the expression in its store."""
    g = GraphBuilder("depthwise_transposed")
    y = g.conv(g.input("x", [1, C, HW, HW]), C, C, 3, group=C)
    t = g.node("Transpose", [y], perm=[0, 2, 3, 1])
    g.node("Relu", [g.node("Add", [t, g.const("b", g.rng.normal(size=C).astype(np.float32))])], out="y")
    model = g.build(["y"])
    kernels = compile_with_kernels(model, target="generic")[1]
    assert [k.template for k in kernels] == ["conv2d_depthwise"] and kernels[0].params["channels_last"]
    feeds = {"x": rng.standard_normal([1, C, HW, HW]).astype(np.float32)}
    with load(compile_model(model, target="generic")) as m:
        assert_close("y", m.run(feeds)["y"], run_onnxruntime(model, feeds)["y"], rtol_l2=1e-5, rtol=1e-4, atol=1e-5)


def test_product_read_both_transposed_and_not(rng):
    """y = x W [1, 4, 4, 4] read as y + T(y) (perm 0, 3, 1, 2, which the product could store): one
    accumulator cannot be in both orders, so the add stays a kernel of its own."""
    g = GraphBuilder("both_orders")
    y = g.node("MatMul", [g.input("x", [1, 4, 4, 6]), g.const("w", g.rng.normal(size=(6, 4)).astype(np.float32))])
    g.node("Add", [y, g.node("Transpose", [y], perm=[0, 3, 1, 2])], out="z")
    model = g.build(["z"])
    assert len(compile_with_kernels(model, target="generic")[1]) == 2
    feeds = {"x": rng.standard_normal([1, 4, 4, 6]).astype(np.float32)}
    with load(compile_model(model, target="generic")) as m:
        assert_close("z", m.run(feeds)["z"], run_onnxruntime(model, feeds)["z"], rtol_l2=1e-5, rtol=1e-4, atol=1e-5)

def head_split_attention(*, s=6, heads=4, kv_heads=2, d=16, rotary=False, qt_output=False) -> onnx.ModelProto:
    """A prompt's attention as ONNX writes it: Q, K and V [1, S, heads * d] split into heads
    (Reshape, Transpose to [1, H, S, d]), ONNX's Attention (causal), its output merged back
    (Transpose, Reshape); rotary: Q and K rotated after their head split (RotaryEmbedding of the
    4-D heads, positions 3 ..); qt_output: Q's head split is an output too."""
    g = GraphBuilder("head_split_attention")
    rows = {"q": heads, "k": kv_heads, "v": kv_heads}
    half = d // 2
    angles = np.outer(np.arange(16), 1.0 / 10000 ** (np.arange(half) / half))
    cos, sin = g.const("cos", np.cos(angles).astype(np.float32)), g.const("sin", np.sin(angles).astype(np.float32))
    positions = g.const("positions", (3 + np.arange(s))[None].astype(np.int64))
    split = {}
    for name, h in rows.items():
        x = g.input(name, [1, s, h * d])
        t = g.node("Transpose", [g.node("Reshape", [x, g.const("shape", np.array([1, s, h, d], np.int64))])],
                   perm=[0, 2, 1, 3], out=f"{name}t")
        if rotary and name != "v":
            t = g.node("RotaryEmbedding", [t, cos, sin, positions])
        split[name] = t
    att = g.node("Attention", [split["q"], split["k"], split["v"]], is_causal=1)
    merged = g.node("Transpose", [att], perm=[0, 2, 1, 3])
    g.node("Reshape", [merged, g.const("shape", np.array([1, s, heads * d], np.int64))], out="y")
    outputs = ["y", "qt"] if qt_output else ["y"]
    graph = helper.make_graph(g.nodes, g.name, g.inputs, [tensor_info(o, None) for o in outputs], initializer=g.inits)
    return make_model(graph, opset=24)


@pytest.mark.parametrize("rotary", [False, True])
@pytest.mark.parametrize("target, precision", [("generic", "fp32"), ("nvidia-emulated", "fp16")])
def test_head_splits_go_into_attention_layouts(rotary, target, precision, rng):
    """take_transposes_into_layouts: attention reads Q, K and V where the Transposes' inputs lie
    and writes its output merged; rotary embeddings of the head splits rotate [1, S, heads * d]
    before them. No copy; against onnxruntime."""
    model = head_split_attention(rotary=rotary)
    target = emulating_cooperative_matrix(TARGETS["nvidia"]) if target == "nvidia-emulated" else target
    bundle, kernels = compile_with_kernels(model, target=target, precision=precision)
    assert _copies(kernels) == 0
    assert Counter(k.template for k in kernels)["rotary"] == (2 if rotary else 0)
    feeds = {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
             for i in model.graph.input}
    with load(bundle) as m:
        got = m.run(feeds)
    tol = dict(rtol_l2=1e-5, rtol=1e-4, atol=1e-5) if precision == "fp32" else dict(rtol_l2=1e-2, rtol=1e9, atol=1e9)
    assert_close("y", got["y"], run_onnxruntime(model, feeds)["y"], **tol)


def test_head_split_read_elsewhere_stays_a_copy(rng):
    """Q's head split, an output too, is copied once (for the output); the attention reads it."""
    model = head_split_attention(rotary=True, qt_output=True)
    bundle, kernels = compile_with_kernels(model, target="generic")
    assert _copies(kernels) == 1
    feeds = {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
             for i in model.graph.input}
    with load(bundle) as m:
        got = m.run(feeds)
    ref = run_onnxruntime(model, feeds)
    for name in ("y", "qt"):
        assert_close(name, got[name], ref[name], rtol_l2=1e-5, rtol=1e-4, atol=1e-5)
