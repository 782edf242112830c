"""LayerNormalization (opset 17) against onnxruntime: axes, broadcast Scale and B, optional Mean
and InvStdDev outputs, long rows, a large mean offset (the two-pass variance), on the generic and
lavapipe profiles and on generic with subgroup reductions (the nvidia profile's statistics)."""

import numpy as np
import onnx
import pytest

from tests.harness import check_against_onnxruntime, random_feeds
from tests.onnx_builders import _fill_output_shapes, single_op_model, tensor_info

from dataclasses import replace

from compiler import compile_model
from compiler.compile import compile_with_kernels
from compiler.lower import layernorm
from compiler.errors import CompileError
from compiler.targets import TARGETS as PROFILES

SUBGROUP_SUMS = replace(PROFILES["generic"], name="generic-subgroup-sums", subgroup_reductions=True)
TARGETS = [pytest.param("generic", id="generic"), pytest.param("lavapipe", id="lavapipe"),
           pytest.param(SUBGROUP_SUMS, id="subgroup-sums")]


def layernorm_model(x_shape, axis=-1, *, scale_shape=None, bias=True, epsilon=None, outputs=("y",),
                    **attrs):
    """A one-node LayerNormalization at opset 17 with Scale and B as graph inputs (random at
    run time, never constants); both default to the full normalized shape X.shape[axis:]."""
    norm = list(x_shape[axis:])
    scale_shape = norm if scale_shape is None else scale_shape
    shapes = {"x": x_shape, "scale": scale_shape}
    if bias:
        shapes["bias"] = scale_shape
    attrs = dict(attrs, axis=axis)
    if epsilon is not None:
        attrs["epsilon"] = epsilon
    model = single_op_model("LayerNormalization", shapes, attrs, outputs=outputs)
    model.opset_import[0].version = 17
    return _fill_output_shapes(model)


CASES = [
    pytest.param([2, 16, 768], -1, {}, id="transformer-d768"),
    pytest.param([2, 3, 5, 7], 1, {}, id="4d-axis1"),
    pytest.param([2, 3, 5, 7], -2, {}, id="4d-axis-2"),
    pytest.param([2, 3, 5, 7], 0, {}, id="4d-axis0-one-row"),
    pytest.param([2, 16, 768], -1, {"bias": False}, id="no-bias"),
    pytest.param([2, 16, 768], -1, {"epsilon": 1e-12}, id="epsilon-1e-12"),
    pytest.param([4, 4096], -1, {}, id="long-row-d4096"),
    pytest.param([2, 10000], -1, {}, id="longer-row-d10000-reread"),
    pytest.param([3, 5], -1, {}, id="short-row-d5"),
    pytest.param([4, 6, 10], 1, {"scale_shape": [10]}, id="scale-broadcast-suffix"),
    pytest.param([4, 6, 10], 1, {"scale_shape": [6, 1]}, id="scale-broadcast-inner"),
    pytest.param([2, 3, 4, 5], 1, {"scale_shape": [4, 1]}, id="scale-broadcast-middle"),
    pytest.param([2, 3, 4, 5], 1, {"scale_shape": [1]}, id="scale-broadcast-scalar"),
]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("x_shape,axis,kw", CASES)
def test_layernorm(x_shape, axis, kw, target):
    check_against_onnxruntime(layernorm_model(x_shape, axis, **kw), target=target)


@pytest.mark.parametrize("target,d,local,regs,few_lanes", [
    ("nvidia", 768, 256, 3, False), ("nvidia", 768, 32, 24, True), ("nvidia", 4096, 128, 32, True),
    ("generic", 768, 256, 3, True), ("generic", 10000, 256, 0, False), ("lavapipe", 768, 256, 0, False)])
def test_row_held_in_registers(target, d, local, regs, few_lanes, monkeypatch):
    """Each invocation reads its elements of the row once into registers, up to ROW_REGISTERS
    of them (past that, and on lavapipe's texel path, every pass re-reads the row); with
    FEW_LANES, where subgroups add, a row takes the fewest invocations that allows (one
    subgroup at D = 768; generic has no subgroup sums)."""
    monkeypatch.setattr(layernorm, "FEW_LANES", few_lanes)
    [kernel] = compile_with_kernels(layernorm_model([2, 3, d]), target=target)[1]
    assert (kernel.params["LOCAL"], kernel.params["E"]) == (local, regs)


@pytest.mark.parametrize("x_shape", [[2, 16, 768], [4, 4096], [3, 5]])
def test_rows_on_few_lanes(x_shape, monkeypatch):
    """FEW_LANES (a profile variant, benchmarks/gpu/profile_variants.py ln-few): rows on one
    subgroup, up to 32 elements an invocation, against onnxruntime."""
    monkeypatch.setattr(layernorm, "FEW_LANES", True)
    check_against_onnxruntime(layernorm_model(x_shape, -1), target=SUBGROUP_SUMS)


@pytest.mark.parametrize("target", TARGETS)
def test_layernorm_scale_broadcast_d(target):
    """A scale and bias of shape [D] (as transformers store them) over a [..., D] input."""
    check_against_onnxruntime(layernorm_model([2, 16, 768], -1, scale_shape=[768]), target=target)


@pytest.mark.parametrize("target", TARGETS)
def test_layernorm_mean_and_inv_std_outputs(target):
    model = layernorm_model([2, 3, 5, 7], 2, outputs=("y", "mean", "inv_std"))
    result = check_against_onnxruntime(model, target=target)
    assert result["outputs"]["mean"].shape == (2, 3, 1, 1)


@pytest.mark.parametrize("target", TARGETS)
def test_layernorm_large_mean_offset(target):
    """Rows around 100 with unit spread: E[x^2] - E[x]^2 would lose most digits in float32;
    the kernel's two passes (mean, then the variance of x - mean) keep them."""
    model = layernorm_model([2, 16, 768], -1, outputs=("y", "mean", "inv_std"))
    feeds = random_feeds(model, seed=3)
    feeds["x"] = (feeds["x"] + 100.0).astype(np.float32)
    check_against_onnxruntime(model, feeds=feeds, target=target)


def test_layernorm_many_rows_use_the_y_grid():
    """More rows than the 65535 x-limit of workgroups: rows continue along y."""
    model = layernorm_model([70000, 4], -1)
    check_against_onnxruntime(model, target="generic")


def test_layernorm_stash_type_is_refused():
    model = layernorm_model([2, 8], -1, stash_type=0)
    with pytest.raises(CompileError, match="stash_type 0"):
        compile_model(model)


# com.microsoft's transformer normalizations (onnxruntime's transformer optimizer writes them):
# input + skip (+ bias) normalized over the last dim, optionally writing that sum out.
def skip_layernorm_model(x_shape, *, skip_shape=None, beta=True, bias=False, simplified=False,
                         outputs=("y",), epsilon=None):
    d = x_shape[-1]
    op = "SkipSimplifiedLayerNormalization" if simplified else "SkipLayerNormalization"
    shapes = {"x": x_shape, "skip": skip_shape or x_shape, "gamma": [d]}
    names = ["x", "skip", "gamma"]
    if beta and not simplified:
        shapes["beta"], names = [d], names + ["beta"]
    if bias:
        shapes["bias"] = [d]
        names += ([""] if not beta and not simplified else []) + ["bias"]
    # output slots: output, mean, inv_std_var, input_skip_bias_sum ("" skips one); contrib
    # ops have no ONNX shape inference, so the graph outputs carry their shapes
    rows = list(x_shape[:-1]) + [1]
    node = onnx.helper.make_node(op, names, list(outputs), domain="com.microsoft",
                                 **({} if epsilon is None else {"epsilon": epsilon}))
    graph = onnx.helper.make_graph(
        [node], op, [tensor_info(n, s) for n, s in shapes.items()],
        [tensor_info(o, rows if o in ("mean", "inv_std") else x_shape) for o in outputs if o])
    return onnx.helper.make_model(graph, ir_version=8, opset_imports=[
        onnx.helper.make_opsetid("", 17), onnx.helper.make_opsetid("com.microsoft", 1)])


SKIP_CASES = [
    pytest.param([2, 16, 768], {}, id="bert-base-row"),
    pytest.param([2, 8, 64], {"beta": False}, id="no-beta"),
    pytest.param([2, 8, 64], {"bias": True}, id="bias"),
    pytest.param([2, 8, 64], {"beta": False, "bias": True}, id="bias-no-beta"),
    pytest.param([2, 8, 64], {"epsilon": 1e-5}, id="epsilon"),
    pytest.param([2, 8, 64], {"skip_shape": [1, 8, 64]}, id="skip-broadcast-batch"),
    pytest.param([2, 8, 64], {"skip_shape": [8, 64]}, id="skip-2d"),
    pytest.param([2, 8, 64], {"outputs": ("y", "", "", "sum"), "bias": True}, id="sum-output"),
    pytest.param([2, 8, 64], {"outputs": ("y", "mean", "inv_std", "sum"), "bias": True},
                 id="all-outputs"),
    pytest.param([2, 8, 64], {"simplified": True}, id="rms"),
    pytest.param([2, 8, 64], {"simplified": True, "bias": True, "outputs": ("y", "", "", "sum")},
                 id="rms-bias-sum-output"),
    pytest.param([2, 8, 4096], {"simplified": True}, id="rms-long-row"),
]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("x_shape,kw", SKIP_CASES)
def test_skip_layernorm(x_shape, kw, target):
    check_against_onnxruntime(skip_layernorm_model(x_shape, **kw), target=target)


def test_skip_simplified_layernorm_refuses_the_mean_output():
    model = skip_layernorm_model([2, 8, 64], simplified=True, outputs=("y", "mean"))
    with pytest.raises(CompileError, match="Mean output 'mean'"):
        compile_model(model)


def test_skip_layernorm_refuses_a_skip_it_cannot_index():
    model = skip_layernorm_model([2, 8, 64], skip_shape=[2, 1, 64])
    with pytest.raises(CompileError, match="residual input 'skip' of shape \\[2, 1, 64\\]"):
        compile_model(model)


# RMS normalization: ONNX's RMSNormalization (opset 23) and onnxruntime's SimplifiedLayerNormalization
# (which onnxruntime declares in the ONNX domain, so onnx.checker does not know it).
def rms_model(x_shape, axis=-1, *, op="RMSNormalization", scale_shape=None, outputs=("y",),
              **attrs):
    norm = list(x_shape[axis:])
    shapes = {"x": x_shape, "scale": norm if scale_shape is None else scale_shape}
    rows = list(x_shape[:axis % len(x_shape)]) + [1] * len(norm)
    node = onnx.helper.make_node(op, list(shapes), list(outputs), axis=axis, **attrs)
    graph = onnx.helper.make_graph(
        [node], op, [tensor_info(n, s) for n, s in shapes.items()],
        [tensor_info(o, x_shape if o == "y" else rows) for o in outputs])
    return onnx.helper.make_model(graph, ir_version=10,
                                  opset_imports=[onnx.helper.make_opsetid("", 23)])


RMS_CASES = [
    pytest.param([2, 7, 256], -1, {}, id="d256"),
    pytest.param([2, 3, 5, 7], 1, {}, id="4d-axis1"),
    pytest.param([4, 6, 10], 1, {"scale_shape": [10]}, id="scale-broadcast"),
    pytest.param([2, 4096], -1, {"epsilon": 1e-6}, id="long-row-epsilon"),
]


@pytest.mark.parametrize("op", ["RMSNormalization", "SimplifiedLayerNormalization"])
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("x_shape,axis,kw", RMS_CASES)
def test_rms_normalization(x_shape, axis, kw, target, op):
    check_against_onnxruntime(rms_model(x_shape, axis, op=op, **kw), target=target,
                              full_check=True if op == "RMSNormalization" else None)


def test_simplified_layernorm_inv_std_output():
    model = rms_model([2, 3, 64], op="SimplifiedLayerNormalization", outputs=("y", "inv_std"))
    result = check_against_onnxruntime(model, full_check=None)
    assert result["outputs"]["inv_std"].shape == (2, 3, 1)


# float16 storage, float32 statistics; the reference is onnxruntime's float32 result (every
# element within 1e-2 absolute and relative: a float16 ulp of the sum output near 4 is 4e-3).
@pytest.mark.parametrize("model", [
    pytest.param(rms_model([2, 7, 256]), id="rms"),
    pytest.param(rms_model([2, 7, 256], op="SimplifiedLayerNormalization"), id="simplified"),
    pytest.param(skip_layernorm_model([2, 8, 256], simplified=True, bias=True,
                                      outputs=("y", "", "", "sum")), id="skip-simplified-sum")])
def test_rms_normalization_fp16(model):
    kernels = compile_with_kernels(model, precision="fp16")[1]
    assert [k.params["T"].name for k in kernels if k.template == "layernorm"] == ["float16"]
    check_against_onnxruntime(model, precision="fp16", rtol_l2=1e-2, rtol=1e-2,
                              atol=1e-2, full_check=None)


@pytest.mark.parametrize("op", ["RMSNormalization", "SimplifiedLayerNormalization"])
def test_rms_normalization_stash_type_is_refused(op):
    with pytest.raises(CompileError, match=f"{op} .*stash_type 0"):
        compile_model(rms_model([2, 8], op=op, stash_type=0))


@pytest.mark.parametrize("target", TARGETS)
def test_constant_rows_normalize_to_the_bias(target):
    """A constant row's centered values are 0 exactly (the mean is taken from the row's first
    value): with epsilon 1e-12, a mean one rounding off would come out as 1e-7 / 1e-6 of noise."""
    model = layernorm_model([3, 112], epsilon=1e-12)
    rng = np.random.default_rng(4)
    feeds = {"x": np.full((3, 112), -0.60553724, np.float32),
             "scale": rng.standard_normal(112).astype(np.float32),
             "bias": rng.standard_normal(112).astype(np.float32)}
    got = check_against_onnxruntime(model, feeds=feeds, target=target)["outputs"]["y"]
    np.testing.assert_array_equal(got, np.broadcast_to(feeds["bias"], (3, 112)))
