"""ONNX Attention (opset 23, 24 and 25) against onnxruntime: 4-D and 3-D layouts, grouped-query
attention, float and bool masks, causal, sliding windows, the internal cache (past_key/past_value
-> present) and the external cache (nonpad_kv_seqlen, with TensorScatter); what vkc refuses."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tests.harness import check_against_onnxruntime

from compiler.compile import compile_with_kernels
from compiler.errors import CompileError

TARGETS = ["generic", "lavapipe"]
F = TensorProto.FLOAT


def attention_model(*, b=1, hq=4, hkv=4, sq=5, skv=5, d=16, dv=None, layout=4, causal=0,
                    mask=None, past=0, lengths=False, scale=None, opset=24, **extra):
    """One Attention node; mask: None, "float" [sq, skv_total] or "bool" [b, 1, sq, skv_total]."""
    dv = dv or d
    if layout == 4:
        shapes = {"q": [b, hq, sq, d], "k": [b, hkv, skv, d], "v": [b, hkv, skv, dv]}
    else:
        shapes = {"q": [b, sq, hq * d], "k": [b, skv, hkv * d], "v": [b, skv, hkv * dv]}
    inputs = [helper.make_tensor_value_info(n, F, s) for n, s in shapes.items()]
    names = ["q", "k", "v", "", "", "", ""]
    total = past + skv
    if mask == "float":
        inputs.append(helper.make_tensor_value_info("mask", F, [sq, total]))
        names[3] = "mask"
    elif mask == "bool":
        inputs.append(helper.make_tensor_value_info("mask", TensorProto.BOOL, [b, 1, sq, total]))
        names[3] = "mask"
    outputs = [helper.make_tensor_value_info("y", F, None)]
    out_names = ["y"]
    if past:
        inputs += [helper.make_tensor_value_info("past_k", F, [b, hkv, past, d]),
                   helper.make_tensor_value_info("past_v", F, [b, hkv, past, dv])]
        names[4:6] = ["past_k", "past_v"]
        out_names += ["present_k", "present_v"]
        outputs += [helper.make_tensor_value_info(n, F, None) for n in out_names[1:]]
    if lengths:
        inputs.append(helper.make_tensor_value_info("lengths", TensorProto.INT64, [b]))
        names[6] = "lengths"
    while names and not names[-1]:
        names.pop()
    attrs = {"is_causal": causal}
    if layout == 3:
        attrs.update(q_num_heads=hq, kv_num_heads=hkv)
    if scale is not None:
        attrs["scale"] = scale
    attrs.update(extra)
    node = helper.make_node("Attention", names, out_names, **attrs)
    graph = helper.make_graph([node], "attention", inputs, outputs)
    return onnx.shape_inference.infer_shapes(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]))


def feeds_for(model, *, lengths=None, seed=0):
    rng = np.random.default_rng(seed)
    feeds = {}
    for vi in model.graph.input:
        shape = [x.dim_value for x in vi.type.tensor_type.shape.dim]
        kind = vi.type.tensor_type.elem_type
        if vi.name == "lengths":
            feeds[vi.name] = np.asarray(lengths, np.int64)
        elif kind == TensorProto.BOOL:
            keep = rng.random(shape) < 0.7
            keep[..., 0] = True  # no row fully masked
            feeds[vi.name] = keep
        else:
            feeds[vi.name] = rng.normal(size=shape).astype(np.float32)
    return feeds


def _check(model, target, **kw):
    return check_against_onnxruntime(model, target=target, feeds=feeds_for(model, **kw), full_check=False)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("kw", [
    pytest.param(dict(), id="4d"),
    pytest.param(dict(b=2, hq=8, hkv=2, causal=1), id="gqa-causal"),
    pytest.param(dict(layout=3, hq=4, hkv=2, sq=6, skv=9, mask="float", scale=0.2), id="3d-gqa-float-mask"),
    pytest.param(dict(b=2, sq=7, skv=7, mask="bool", dv=8), id="bool-mask-dv8"),
    pytest.param(dict(b=2, hq=4, hkv=1, sq=3, skv=3, past=6, causal=1), id="past-causal-mqa"),
    pytest.param(dict(opset=23, sq=1, skv=1, past=9, causal=1), id="opset23-decode-step"),
    pytest.param(dict(opset=25, sq=2, skv=2, past=5, causal=1), id="opset25"),
    pytest.param(dict(sq=3, skv=7, causal=1, softcap=2.5), id="causal-top-left-softcap"),
    pytest.param(dict(layout=3, hq=4, hkv=2, sq=2, skv=2, past=4, causal=1), id="3d-past"),
    # opset 25's sliding windows: the query's key and left_window_size before it
    pytest.param(dict(opset=25, sq=7, skv=7, causal=1, left_window_size=2), id="window"),
    pytest.param(dict(opset=25, b=2, hq=4, hkv=2, sq=3, skv=3, past=6, left_window_size=4, right_window_size=0,
                      mask="float"), id="window-right-0-past-mask"),
    pytest.param(dict(opset=25, sq=5, skv=5, causal=1, right_window_size=2, left_window_size=1),
                 id="window-causal-hides-the-right"),
])
def test_attention(kw, target):
    model = attention_model(**kw)
    kernels = compile_with_kernels(model, target=target)[1]
    assert sum(k.template.startswith("attention") for k in kernels) == 1
    _check(model, target)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("sq, lengths, d, window", [(1, [5, 12], 16, {}), (4, [4, 16], 16, {}), (3, [9, 3], 16, {}),
                                                    (4, [6, 13], 64, {}), (3, [9, 14], 16, {"left_window_size": 4})])
def test_external_cache_reads_the_first_lengths_keys(target, sq, lengths, d, window):
    """A [B, heads, 16, D] cache of which only nonpad_kv_seqlen[b] rows count, causal: the rows
    past the length never reach the result (they hold NaN here). At D = 64 the tiled kernel
    fetches the next K and V block while computing one. A window (opset 25) ends at each
    batch's length."""
    model = attention_model(b=2, hq=4, hkv=2, sq=sq, skv=16, d=d, causal=1, lengths=True,
                            **(dict(opset=25, **window) if window else {}))
    feeds = feeds_for(model, lengths=lengths)
    result = check_against_onnxruntime(model, target=target, feeds=feeds, full_check=False)
    for i, n in enumerate(lengths):
        feeds["k"][i, :, n:] = np.nan
        feeds["v"][i, :, n:] = np.nan
    from tests.harness import run_bundle
    got, _ = run_bundle(result["bundle"], feeds)
    np.testing.assert_array_equal(got["y"], result["outputs"]["y"])


def test_float16_gqa_cache():
    model = attention_model(b=1, hq=8, hkv=2, sq=2, skv=12, d=32, causal=1, lengths=True)
    check_against_onnxruntime(model, target="lavapipe", feeds=feeds_for(model, lengths=[7]),
                              full_check=False, precision="fp16", rtol_l2=1e-2, rtol=1e9, atol=1e9)


def test_layers_share_the_key_counts():
    """Two Attention nodes over one nonpad_kv_seqlen (a decoder's layers): its int32 key counts
    are cast once, for both (one elementwise kernel, not one a layer)."""
    one = attention_model(b=2, hq=4, hkv=2, sq=1, skv=16, causal=1, lengths=True)
    g = one.graph
    second = helper.make_node("Attention", ["y", "k", "v", "", "", "", "lengths"], ["y2"], is_causal=1)
    del g.output[:]
    g.node.append(second)
    g.output.append(helper.make_tensor_value_info("y2", F, None))
    model = onnx.shape_inference.infer_shapes(one)
    kernels = compile_with_kernels(model, target="lavapipe")[1]
    assert [k.template for k in kernels].count("elementwise_typed") == 1
    _check(model, "lavapipe", lengths=[5, 12])


@pytest.mark.parametrize("kw, phrase", [
    (dict(opset=25, left_window_size=2), "windows look back only"),
    (dict(opset=25, sq=3, skv=7, causal=1, left_window_size=2), "without a cache"),
    (dict(sq=4, skv=2, past=8, causal=1), "4 queries but 2 new keys"),
    (dict(opset=25, sq=2, skv=4, past=8, left_window_size=3, right_window_size=0), "2 queries but 4 new keys"),
])
def test_refused(kw, phrase):
    with pytest.raises(CompileError, match=phrase):
        compile_with_kernels(attention_model(**kw))
