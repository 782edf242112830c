"""Every device profile's matmul kernels (shared-memory tiles, register tiles, vec4 and scalar
loads, aligned and ragged edges) against numpy on the local device."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper

from tests.harness import check_against_onnxruntime, function_local_variables

from dataclasses import replace

from compiler.targets import TARGETS as PROFILES

# Named profiles, plus the NVIDIA profile without its small-problem tile shrinking, so the
# 128x128 tiles with 8x8 registers run here too.
TARGETS = ["generic", "nvidia", "lavapipe", "mobile",
           # lavapipe's texel-buffer kernel, and the storage-buffer register kernel it falls back
           # to where an operand has more texels than the device can address.
           replace(PROFILES["lavapipe"], name="lavapipe-texel-limit", max_texel_elements=4000),
           replace(PROFILES["lavapipe"], name="lavapipe-wide", cpu_rows=4, cpu_cols=4, cpu_lanes=16),
           replace(PROFILES["nvidia"], name="nvidia-full-tiles", min_workgroups=1),
           replace(PROFILES["nvidia"], name="nvidia-8x8", tile_n=128, reg_n=8, min_workgroups=1),
           # Demands more workgroups than any test shape has tiles: every GPU matmul splits K.
           replace(PROFILES["generic"], name="generic-split-k", min_workgroups=100000),
           replace(PROFILES["nvidia"], name="nvidia-split-k", min_workgroups=100000)]

# (M, N, K, transA, transB): aligned tiles, ragged edges, K not a multiple of 4, skinny rows.
SHAPES = [(128, 128, 64, 0, 0), (130, 68, 36, 0, 0), (65, 33, 17, 0, 0), (64, 128, 32, 1, 0),
          (96, 64, 48, 0, 1), (70, 40, 20, 1, 1), (3, 100, 64, 0, 1), (1, 256, 128, 0, 0),
          (40, 36, 300, 0, 0), (64, 64, 520, 1, 0),  # deep K: split-K on GPU profiles
          (5, 70, 77, 0, 0)]  # a few rows, K past whole unrolled steps (the register kernel's tail)


def gemm(M, N, K, trans_a, trans_b, seed=0):
    rng = np.random.default_rng(seed)
    b_shape = (N, K) if trans_b else (K, N)
    w = numpy_helper.from_array((rng.standard_normal(b_shape) / np.sqrt(K)).astype(np.float32), "w")
    bias = numpy_helper.from_array(rng.standard_normal(N).astype(np.float32), "bias")
    node = helper.make_node("Gemm", ["x", "w", "bias"], ["y"], transA=trans_a, transB=trans_b)
    a_shape = [K, M] if trans_a else [M, K]
    graph = helper.make_graph([node], "gemm", [helper.make_tensor_value_info("x", 1, a_shape)],
                              [helper.make_tensor_value_info("y", 1, [M, N])], [w, bias])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


@pytest.mark.parametrize("target", TARGETS, ids=lambda t: getattr(t, "name", t))
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s[:3])) + f"_t{s[3]}{s[4]}")
def test_gemm_on_every_target(target, shape):
    check_against_onnxruntime(gemm(*shape), target=target)


def batched(seed=0):
    rng = np.random.default_rng(seed)
    w = numpy_helper.from_array(rng.standard_normal((3, 1, 36, 20)).astype(np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "bmm",
                              [helper.make_tensor_value_info("x", 1, [3, 2, 68, 36])],
                              [helper.make_tensor_value_info("y", 1, [3, 2, 68, 20])], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


@pytest.mark.parametrize("target", TARGETS, ids=lambda t: getattr(t, "name", t))
def test_broadcast_batched_matmul_on_every_target(target):
    check_against_onnxruntime(batched(), target=target)


@pytest.mark.parametrize("target", TARGETS, ids=lambda t: getattr(t, "name", t))
@pytest.mark.parametrize("k,stride,group", [(3, 1, 1), (3, 2, 2), (1, 1, 1), (5, 1, 1)])
def test_conv_on_every_target(target, k, stride, group):
    rng = np.random.default_rng(1)
    cin, cout = 8, 12
    w = numpy_helper.from_array(rng.standard_normal((cout, cin // group, k, k)).astype(np.float32) * 0.2, "w")
    b = numpy_helper.from_array(rng.standard_normal(cout).astype(np.float32), "b")
    conv = helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[k // 2] * 4, strides=[stride] * 2,
                            group=group)
    relu = helper.make_node("Relu", ["c"], ["y"])
    out = (13 + 2 * (k // 2) - k) // stride + 1
    graph = helper.make_graph([conv, relu], "conv", [helper.make_tensor_value_info("x", 1, [2, cin, 13, 13])],
                              [helper.make_tensor_value_info("y", 1, [2, cout, out, out])], [w, b])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    check_against_onnxruntime(model, target=target)


@pytest.mark.parametrize("target", ["nvidia", "nvidia-8x8", "nvidia-split-k", "generic"])
def test_tiled_kernels_keep_no_array_in_local_memory(target):
    """Every loop over a register array of the tiled kernel is unrolled, so no array is indexed at
    run time and none is left as a function-local variable: a driver keeps such an array in local
    memory (an H200 ran 128x128 tiles with their 8x8 accumulators so, 18x slower)."""
    from compiler.compile import compile_model

    target = next((t for t in TARGETS if getattr(t, "name", t) == target), target)
    seen = 0
    for model in (gemm(130, 68, 520, 0, 0), gemm(64, 128, 32, 1, 0)):
        found = function_local_variables(compile_model(model, target=target), "matmul_tiled")
        assert not any(found.values()), found
        seen += len(found)
    assert seen


def test_a_short_side_gets_a_fitted_tile():
    """Rows that fill half a tile or less (a convolution's few output channels) take a tile
    halved along M and longer along N, within the profile's invocations a tile; rows that fill
    the tile, and a short N, keep the profile's tile."""
    from compiler.lower.matmul import choose_tile

    nv, generic = PROFILES["nvidia"], PROFILES["generic"]
    # UNet's 16-channel layers at 224x224: 16x256 tiles, halved along N for min_workgroups.
    assert choose_tile(generic, 16, 50176, 144, 1) == (16, 256, 4, 4)
    assert choose_tile(nv, 16, 50176, 144, 1) == (16, 128, 4, 4)
    assert choose_tile(replace(nv, min_workgroups=1), 16, 50176, 144, 1) == (16, 256, 4, 4)
    assert choose_tile(replace(nv, min_workgroups=1), 32, 50176, 288, 1) == (32, 128, 4, 4)
    assert choose_tile(replace(nv, min_workgroups=1), 2, 50176, 16, 1) == (16, 256, 4, 4)
    assert choose_tile(nv, 1576, 2304, 768, 1) == (128, 64, 8, 4)   # ViT's QKV: as before
    assert choose_tile(replace(nv, min_workgroups=1), 4096, 16, 64, 1) == (128, 64, 8, 4)


@pytest.mark.parametrize("target", [replace(PROFILES["generic"], name="generic-full-tiles", min_workgroups=1),
                                    "nvidia"], ids=lambda t: getattr(t, "name", t))
@pytest.mark.parametrize("cout", [12, 16, 32])
def test_conv_with_few_output_channels(target, cout):
    """3x3 convolutions of 16 channels into `cout` over 40x40 pixels (two images): the fitted
    tiles (16 or 32 rows), ragged along M and N, against onnxruntime."""
    from compiler.compile import compile_with_kernels

    rng = np.random.default_rng(cout)
    w = numpy_helper.from_array((rng.standard_normal((cout, 16, 3, 3)) / 12).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(cout).astype(np.float32), "b")
    conv = helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1] * 4)
    graph = helper.make_graph([conv], "conv", [helper.make_tensor_value_info("x", 1, [2, 16, 40, 40])],
                              [helper.make_tensor_value_info("y", 1, [2, cout, 40, 40])], [w, b])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    [gemm] = [k for k in compile_with_kernels(model, target=target)[1] if k.template == "matmul_tiled"]
    assert gemm.params["BM"] == max(16, cout)
    check_against_onnxruntime(model, target=target)
