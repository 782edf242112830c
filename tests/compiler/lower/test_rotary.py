"""RotaryEmbedding against onnxruntime: ONNX's (opset 23) and com.microsoft's, 3-D and 4-D inputs,
interleaved and half-split pairs, partial rotation, position_ids read at run time (the same
bundle run at other positions), float32 and float16."""

import numpy as np
import onnx
import pytest

from compiler import compile_model
from compiler.compile import compile_with_kernels
from compiler.errors import CompileError
from tests.harness import check_against_onnxruntime, compile_cached, run_bundle, run_onnxruntime
from tests.onnx_builders import init, tensor_info

MAX_POS = 64


def rotary_model(x_shape, *, contrib=False, positions="ids", rot=0, half=None, heads=0,
                 interleaved=0, constant_tables=False, **attrs):
    """One RotaryEmbedding node; cos/sin caches are graph inputs (random at run time), or with
    constant_tables weights of real angles (as exporters store them). positions: "ids" ([B, S]
    int64 position_ids), "start" (contrib: one start position), None (ONNX's op with
    per-token tables)."""
    b, s = x_shape[0], x_shape[-2] if len(x_shape) == 4 else x_shape[1]
    head = x_shape[-1] if len(x_shape) == 4 else x_shape[-1] // (heads or 1)
    half = half or (rot or head) // 2
    table = [MAX_POS, half] if positions else [b, s, half]
    ids = {"ids": [b, s], "start": [1]}.get(positions)
    attrs = dict(attrs, interleaved=interleaved)
    attrs.update({"num_heads": heads} if heads else {})
    attrs.update({"rotary_embedding_dim": rot} if rot else {})
    inputs = [tensor_info("x", x_shape)]
    angles = np.random.default_rng(1).uniform(0, 2 * np.pi, table)
    weights = [init("cos", np.cos(angles).astype(np.float32)),
               init("sin", np.sin(angles).astype(np.float32))] if constant_tables else []
    inputs += [] if constant_tables else [tensor_info("cos", table), tensor_info("sin", table)]
    if ids:
        inputs.append(tensor_info("pos", ids, np.int64))
    names = ["x", "pos", "cos", "sin"] if contrib else ["x", "cos", "sin"] + (["pos"] if ids else [])
    node = onnx.helper.make_node("RotaryEmbedding", names, ["y"],
                                 domain="com.microsoft" if contrib else "", **attrs)
    graph = onnx.helper.make_graph([node], "rotary", inputs, [tensor_info("y", x_shape)],
                                   initializer=weights)
    opsets = [onnx.helper.make_opsetid("", 23)]
    opsets += [onnx.helper.make_opsetid("com.microsoft", 1)] if contrib else []
    return onnx.helper.make_model(graph, ir_version=10, opset_imports=opsets)


def feeds_for(model, seed=0, start=0):
    """Random x and tables; positions a random permutation (so a wrong row shows) or a start."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for vi in model.graph.input:
        shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        if vi.name == "pos":
            feeds["pos"] = (np.array([start], np.int64) if shape == [1] else
                            rng.permutation(MAX_POS)[:np.prod(shape)].reshape(shape).astype(np.int64))
        else:
            feeds[vi.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


CASES = [
    pytest.param([2, 5, 64], dict(heads=4), id="3d-ids"),
    pytest.param([2, 4, 5, 16], {}, id="4d-ids"),
    pytest.param([2, 5, 64], dict(heads=4, interleaved=1), id="3d-interleaved"),
    pytest.param([1, 3, 96], dict(heads=2, rot=32), id="3d-partial"),
    pytest.param([2, 4, 5, 16], dict(interleaved=1, rot=8), id="4d-interleaved-partial"),
    pytest.param([2, 5, 64], dict(heads=4, positions=None), id="3d-per-token-tables"),
    pytest.param([2, 4, 5, 16], dict(positions=None), id="4d-per-token-tables"),
]
CONTRIB_CASES = [
    pytest.param([2, 5, 64], dict(heads=4), id="3d-ids"),
    pytest.param([1, 4, 1, 32], dict(positions="start"), id="4d-decode-start"),
    pytest.param([2, 5, 64], dict(heads=4, positions="start", interleaved=1), id="3d-start-interleaved"),
    pytest.param([1, 3, 96], dict(heads=2, rot=32), id="3d-partial"),
    pytest.param([2, 5, 64], dict(half=8), id="3d-heads-from-tables"),
]


@pytest.mark.parametrize("x_shape,kw", CASES)
def test_rotary_embedding(x_shape, kw):
    model = rotary_model(x_shape, **kw)
    check_against_onnxruntime(model, feeds=feeds_for(model))


@pytest.mark.parametrize("x_shape,kw", CONTRIB_CASES)
def test_contrib_rotary_embedding(x_shape, kw):
    model = rotary_model(x_shape, contrib=True, **kw)
    check_against_onnxruntime(model, feeds=feeds_for(model, start=7))


@pytest.mark.parametrize("contrib", [False, True])
def test_positions_are_read_at_run_time(contrib):
    """One bundle, run at several positions (as decoding steps are): each run matches."""
    model = rotary_model([1, 4, 1, 32], contrib=contrib)
    bundle = compile_cached(model)
    for seed in range(3):
        feeds = feeds_for(model, seed=seed)
        got, _ = run_bundle(bundle, feeds)
        np.testing.assert_allclose(got["y"], run_onnxruntime(model, feeds)["y"], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("model", [
    pytest.param(rotary_model([2, 5, 64], heads=4, constant_tables=True), id="onnx"),
    pytest.param(rotary_model([2, 5, 64], contrib=True, heads=4, interleaved=1,
                              constant_tables=True), id="contrib")])
def test_rotary_embedding_fp16(model):
    """Tables of cos and sin (|value| <= 1, constants) keep a rotation within float16's range."""
    kernels = compile_with_kernels(model, precision="fp16")[1]
    assert [k.params["T"].name for k in kernels if k.template == "rotary"] == ["float16"]
    check_against_onnxruntime(model, feeds=feeds_for(model), precision="fp16", rtol_l2=1e-2,
                              rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("model,match", [
    (rotary_model([2, 5, 64], contrib=True, heads=4, is_packed_batching=1), "is_packed_batching 1"),
    (rotary_model([2, 5, 64], contrib=True, heads=4, scale=0.5), "scale 0.5"),
    (rotary_model([2, 5, 64], heads=4, rot=34, half=17), "rotary_embedding_dim 34 must be even"),
])
def test_refusals(model, match):
    with pytest.raises(CompileError, match=match):
        compile_model(model)
