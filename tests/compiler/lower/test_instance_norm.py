"""InstanceNormalization against onnxruntime: [N, C, L] (the audio feature encoders' GroupNorm
of one group a channel), [N, C, H, W] and [N, C, D, H, W], Scale and B as constants and as run-time
inputs, long rows, a large per-channel offset (the two-pass variance), float16 storage, on the
generic and lavapipe profiles and with subgroup reductions; shapes it refuses."""
from dataclasses import replace

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from compiler import compile_model
from compiler.errors import CompileError
from compiler.targets import TARGETS as PROFILES
from tests.harness import check_against_onnxruntime

SUBGROUP_SUMS = replace(PROFILES["generic"], name="generic-subgroup-sums", subgroup_reductions=True)
TARGETS = [pytest.param("generic", id="generic"), pytest.param("lavapipe", id="lavapipe"),
           pytest.param(SUBGROUP_SUMS, id="subgroup-sums")]


def instance_norm_model(shape, *, constant=True, epsilon=None, opset=17, channels=None):
    """One InstanceNormalization; Scale and B constants (drawn) or graph inputs."""
    c = shape[1] if channels is None else channels
    rng = np.random.default_rng(1)
    params = {"scale": rng.standard_normal(c).astype(np.float32),
              "bias": rng.standard_normal(c).astype(np.float32)}
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)]
    if not constant:
        inputs += [helper.make_tensor_value_info(n, TensorProto.FLOAT, [c]) for n in params]
    attrs = {} if epsilon is None else {"epsilon": epsilon}
    graph = helper.make_graph(
        [helper.make_node("InstanceNormalization", ["x", "scale", "bias"], ["y"], name="norm", **attrs)],
        "instance_norm", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
        [numpy_helper.from_array(a, n) for n, a in params.items()] if constant else [])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("shape", [(2, 8, 50), (1, 4, 6, 7), (1, 3, 2, 4, 5), (1, 2, 3000), (1, 512, 3)])
def test_instance_norm(shape, target):
    check_against_onnxruntime(instance_norm_model(shape), target=target)


def test_scale_and_bias_at_run_time_and_epsilon():
    check_against_onnxruntime(instance_norm_model((2, 6, 33), constant=False, epsilon=0.1), target="lavapipe")


def test_opset_7_and_large_offsets():
    """Each channel around 1000 with unit spread: the variance is of x - mean (two passes)."""
    x = (1000 + np.random.default_rng(2).standard_normal((2, 4, 64))).astype(np.float32)
    check_against_onnxruntime(instance_norm_model((2, 4, 64), opset=7), feeds={"x": x})


@pytest.mark.parametrize("target", ["generic", "lavapipe"])
def test_float16(target):
    check_against_onnxruntime(instance_norm_model((2, 16, 40)), target=target, precision="fp16",
                              rtol_l2=1e-2, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("shape, channels, match", [
    ((2, 8), None, r"'x' of shape \[2, 8\] has no spatial dim"),
    ((2, 8, 5), 4, r"'scale' of shape \[4\] is not one value per channel \(\[8\]\)"),
])
def test_refused(shape, channels, match):
    model = instance_norm_model(shape, channels=channels)
    with pytest.raises(CompileError, match=match):
        compile_model(model, target="generic")


@pytest.mark.parametrize("groups", [2, 16])
def test_group_norm_as_torch_exports_it(groups):
    """nn.GroupNorm(groups, 16) on [N, 16, L] as torch.onnx.export writes it (wav2vec2's feature
    encoder: groups = channels): Reshape to [N, groups, -1], InstanceNormalization of unit scale
    and zero bias, Reshape back, then the per-channel affine as Mul and Add."""
    rng = np.random.default_rng(3)
    c = 16
    inits = {"ones": np.ones(groups, np.float32), "zeros": np.zeros(groups, np.float32),
             "grouped": np.array([0, groups, -1], np.int64), "back": np.array([2, c, 40], np.int64),
             "w": rng.standard_normal((c, 1)).astype(np.float32), "b": rng.standard_normal((c, 1)).astype(np.float32)}
    nodes = [helper.make_node("Reshape", ["x", "grouped"], ["g"]),
             helper.make_node("InstanceNormalization", ["g", "ones", "zeros"], ["n"], epsilon=1e-5),
             helper.make_node("Reshape", ["n", "back"], ["r"]),
             helper.make_node("Mul", ["r", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["y"])]
    graph = helper.make_graph(nodes, "group_norm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, c, 40])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, c, 40])],
                              [numpy_helper.from_array(a, n) for n, a in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    check_against_onnxruntime(model, target="lavapipe")
    check_against_onnxruntime(model, target="lavapipe", precision="fp16", rtol_l2=1e-2, rtol=2e-2, atol=2e-2)
