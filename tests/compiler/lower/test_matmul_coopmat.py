"""Cooperative-matrix kernels (templates/matmul_coopmat.comp.j2): which matmuls take them, and every
module variant the lowering produces passes spirv-val. lavapipe has no cooperative matrix: a bundle
holding one is refused by name; test_coopmat_emulation.py checks the kernels' numbers there with the
cooperative matrices emulated, the H200 with them (benchmarks/gpu/coopmat.py)."""
from __future__ import annotations

import functools
from dataclasses import replace

import numpy as np
import pytest
from onnx import helper, numpy_helper

from tests.harness import spirv_target_env, spirv_val, spirv_validate
from tests.compiler.lower.test_matmul_nbits import nbits_model
from tests.llm_models import swiglu_model

from bundles import read_bundle
from compiler import codegen
from compiler.compile import compile_with_kernels
from compiler.dtypes import TYPES
from compiler.targets import TARGETS
from compiler.tune import PAIRED_TILE, WIDE_TILE
from runtime_min import VkcRuntimeError, load

NVIDIA = TARGETS["nvidia"]
# Full tiles (no shrinking for small problems) and split-K everywhere: the other tile choices.
FULL = replace(NVIDIA, name="nvidia-full-tiles", min_workgroups=1)
SPLIT = replace(NVIDIA, name="nvidia-split-k", min_workgroups=100000, coopmat_short_k=0)
# One shared-memory buffer: a 256x128 tile, or a deeper K step.
SINGLE = replace(FULL, name="nvidia-one-stage", coopmat_stages=1, coopmat_k=32, coopmat_tiles=((4, 2, 4, 4),))
# Convolutions gather im2col on the fly where its scratch is over the profile's budget.
IMPLICIT = replace(NVIDIA, name="nvidia-implicit-im2col", im2col_max_bytes=0)


def _model(nodes, inputs, output, out_shape, inits=()):
    graph = helper.make_graph(nodes, "m", [helper.make_tensor_value_info(n, 1, s) for n, s in inputs],
                              [helper.make_tensor_value_info(output, 1, out_shape)],
                              [numpy_helper.from_array(a, n) for n, a in inits])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def gemm(M, N, K, trans_a=0, trans_b=0, const_b=True, bias=True, act="Relu"):
    rng = np.random.default_rng(0)
    b_shape = [N, K] if trans_b else [K, N]
    inputs = [("a", [K, M] if trans_a else [M, K])] + ([] if const_b else [("b", b_shape)])
    inits = ([("b", rng.standard_normal(b_shape).astype(np.float32))] if const_b else []) + \
        ([("c", rng.standard_normal(N).astype(np.float32))] if bias else [])
    nodes = [helper.make_node("Gemm", ["a", "b"] + (["c"] if bias else []), ["y0"],
                              transA=trans_a, transB=trans_b),
             helper.make_node(act or "Identity", ["y0"], ["y"])]
    return _model(nodes, inputs, "y", [M, N], inits)


def matmul_residual(batch, M, K, N):
    nodes = [helper.make_node("MatMul", ["a", "b"], ["y0"]), helper.make_node("Add", ["y0", "r"], ["y"])]
    return _model(nodes, [("a", [batch, M, K]), ("b", [K, N]), ("r", [batch, M, N])], "y",
                  [batch, M, N])


def conv(n, cin, hw, cout, k, stride=1, pad=0, group=1):
    rng = np.random.default_rng(0)
    o = (hw + 2 * pad - k) // stride + 1
    nodes = [helper.make_node("Conv", ["x", "w", "bias"], ["y0"], kernel_shape=[k, k],
                              strides=[stride] * 2, pads=[pad] * 4, group=group),
             helper.make_node("Sigmoid", ["y0"], ["y"])]
    inits = [("w", rng.standard_normal((cout, cin // group, k, k)).astype(np.float32)),
             ("bias", rng.standard_normal(cout).astype(np.float32))]
    return _model(nodes, [("x", [n, cin, hw, hw])], "y", [n, cout, o, o], inits)


def coopmat_kernels(model, target=NVIDIA, precision="fp16"):
    bundle, kernels = compile_with_kernels(model, target=target, precision=precision)
    return bundle, [k for k in kernels if k.template == "matmul_coopmat"]


# What the lowering produces: row/column-major A and B, vec4 and scalar loads, aligned and
# ragged tiles, implicit-GEMM convolution and GEMMs over im2col with the images side by side
# (plain and grouped), fused epilogues with operands,
# split-K partial sums, each tile size of the profile.
VARIANTS = {
    "aligned_vec4": (gemm(256, 256, 256), FULL),
    "ragged_scalar": (gemm(100, 70, 33, act="Tanh"), NVIDIA),
    "transposed_inputs": (gemm(96, 80, 64, trans_a=1, trans_b=1, const_b=False, bias=False, act=None), FULL),
    "transposed_b_ragged": (gemm(129, 131, 130, trans_b=1, const_b=False), NVIDIA),
    "vec4_loads": (gemm(96, 68, 36), FULL),
    "transposed_vec4": (gemm(100, 84, 64, trans_a=1, trans_b=1, const_b=False, bias=False, act=None), NVIDIA),
    "split_k": (gemm(64, 64, 1024), SPLIT),
    "batched_residual": (matmul_residual(3, 100, 64, 72), NVIDIA),
    "large_tile_two_stages": (gemm(512, 512, 64), replace(FULL, coopmat_stages=2, coopmat_k=32)),
    "one_stage_256x128": (gemm(512, 256, 200), SINGLE),
    "one_stage_conv_k64": (conv(2, 16, 20, 48, 3, pad=1), replace(SINGLE, coopmat_k=64,
                                                                  coopmat_tiles=((2, 4, 4, 2),))),
    "conv3x3": (conv(1, 16, 20, 48, 3, pad=1), IMPLICIT),
    "conv7x7_s2": (conv(2, 3, 40, 64, 7, stride=2, pad=3), replace(FULL, im2col_max_bytes=0)),
    "conv3x3_columns": (conv(3, 16, 7, 48, 3, pad=1), NVIDIA),
    "conv1x1_columns": (conv(4, 32, 7, 64, 1), NVIDIA),
    "conv_grouped_split_k": (conv(1, 32, 14, 64, 3, stride=2, pad=1, group=2), SPLIT),
    "conv1x1_ragged_pixels": (conv(1, 64, 7, 128, 1), NVIDIA),
    # two K steps in flight (coopmat_deep_prefetch): even and odd step counts, split-K, im2col
    "deep_prefetch_odd_steps": (gemm(128, 768, 320), replace(NVIDIA, coopmat_deep_prefetch=8)),
    "deep_prefetch_split_k": (gemm(64, 64, 2048), replace(SPLIT, coopmat_deep_prefetch=8)),
    "deep_prefetch_conv": (conv(1, 16, 20, 48, 3, pad=1), replace(IMPLICIT, coopmat_deep_prefetch=32)),
    # few workgroups and a short K: steps of 256 (coopmat_short_k)
    "short_k_deep_steps": (gemm(128, 768, 768), NVIDIA),
    # vkc tune's 128x256 candidate, two K steps in flight
    "wide_tile_deep_prefetch": (gemm(256, 512, 320), replace(FULL, **WIDE_TILE)),
    # and its 128x128 tile of four subgroups (two workgroups an SM), two K steps in flight
    "paired_tile_deep_prefetch": (gemm(256, 256, 320), replace(FULL, **PAIRED_TILE)),
    # SwiGLU's gate and up in one product (passes/paired_products.py): whole and ragged tiles
    "paired_gate_up": (swiglu_model(64, k=64, f=128), NVIDIA),
    "paired_gate_up_ragged": (swiglu_model(33, k=72, f=30), SINGLE),
    # block-quantized weights dequantized as they are fetched (lower/matmul_nbits.py): 4 bits
    # with zero points, 8 without
    "packed_4bit": (nbits_model([64, 256], 70, zero_points="packed"), NVIDIA),
    "packed_8bit_ragged": (nbits_model([100, 80], 40, bits=8, block_size=16), SINGLE),
}


@functools.cache
def variant(name):
    """(bundle, cooperative-matrix kernels) of VARIANTS[name], compiled once for the module's tests."""
    return coopmat_kernels(*VARIANTS[name])


@pytest.mark.parametrize("name", VARIANTS)
def test_every_variant_passes_spirv_val(name):
    bundle, kernels = variant(name)
    assert kernels, f"{name}: no cooperative-matrix kernel"
    spirv_validate(bundle)
    req = read_bundle(bundle).manifest["requirements"]
    assert req["vulkan_api"] == [1, 2, 0] and req["extensions"] == ["VK_KHR_cooperative_matrix"]
    assert {"cooperativeMatrix", "vulkanMemoryModel", "shaderFloat16"} <= set(req["features"])


def test_variants_cover_the_template():
    seen = set()
    for name in VARIANTS:
        for k in variant(name)[1]:
            p = k.params
            seen |= {("A", p["A_MAJOR"], p["A_VEC"]), ("B", p["B_MAJOR"], p["B_VEC"]),
                     ("aligned", p["aligned"]), ("split", p["split_k"]), ("b_mode", p["b_mode"]),
                     ("tile", p["BM"], p["BN"]), ("epilogue", p["n_epilogue"] > 0),
                     ("stages", p["STAGES"]), ("coords", p["coords"]), ("deep", p["DEEP_PREFETCH"]),
                     ("paired", p["PAIRED"])}
    for want in [("A", "row", 8), ("A", "row", 4), ("A", "row", 1), ("A", "col", 8), ("A", "col", 4),
                 ("B", "row", 8), ("B", "row", 4), ("B", "row", 1), ("B", "col", 8), ("B", "col", 1),
                 ("aligned", True), ("aligned", False),
                 ("split", True), ("split", False), ("b_mode", "im2col"), ("epilogue", True),
                 ("tile", 128, 128), ("tile", 256, 128), ("tile", 32, 32), ("stages", 1), ("stages", 2),
                 ("coords", "conv"), ("coords", "conv_cols"), ("coords", "matmul"),
                 ("deep", True), ("deep", False), ("paired", True), ("paired", False), ("b_mode", "packed"),
                 ("B", "col", 4)]:
        assert want in seen, want


def test_float32_store_variant_validates():
    """A float16 product stored as float32 (a matmul whose output the graph keeps in float32)."""
    _, kernels = coopmat_kernels(gemm(100, 70, 33), NVIDIA)
    k = replace(kernels[0], params=dict(kernels[0].params, T=TYPES["float32"]))
    source = codegen.render(k)
    assert "writeonly buffer C_buffer { float C[]; }" in source
    module = codegen.compile_glsl(source, "coopmat_f32_store")
    assert spirv_target_env(module) == "vulkan1.2"
    assert spirv_val(module) is None


@pytest.mark.parametrize("model", [gemm(128, 128, 128), matmul_residual(2, 64, 64, 64),
                                   conv(1, 16, 20, 48, 3, pad=1)], ids=["gemm", "matmul", "conv"])
def test_nvidia_takes_coopmat_for_float16_only(model):
    assert coopmat_kernels(model, NVIDIA, "fp16")[1]
    assert not coopmat_kernels(model, NVIDIA, "fp32")[1]
    # Profiles whose device lists no cooperative matrix keep today's kernels.
    for name in ("generic", "lavapipe", "mobile"):
        assert not coopmat_kernels(model, TARGETS[name], "fp16")[1]


def test_fp16_matmul_products_take_coopmat_and_store_float32():
    """--precision fp16-matmul on the nvidia profile: a float32 model's MatMul with its residual Add
    runs on the cooperative-matrix kernel, reading float16 A and B and storing float32 (its Cast
    and the Add fused), and the module passes spirv-val."""
    bundle, kernels = coopmat_kernels(matmul_residual(2, 64, 64, 64), NVIDIA, "fp16-matmul")
    assert len(kernels) == 1 and kernels[0].params["T"].name == "float32"
    assert kernels[0].params["n_epilogue"] == 1
    spirv_validate(bundle)


def test_shape_comes_from_the_profile():
    """The kernel takes the largest float16 x float16 -> float32 shape the profile lists, none
    when it lists only other types."""
    only_16x8 = replace(NVIDIA, cooperative_matrix=((16, 8, 16, "float16", "float16", "float32", "float32"),
                                                    (16, 16, 16, "float16", "float16", "float16", "float16")))
    (k,) = coopmat_kernels(gemm(128, 128, 128), only_16x8)[1]
    assert (k.params["LM"], k.params["LN"], k.params["LK"]) == (16, 8, 16)
    ints = replace(NVIDIA, cooperative_matrix=((16, 16, 32, "int8", "int8", "int32", "int32"),))
    assert not coopmat_kernels(gemm(128, 128, 128), ints)[1]


def test_tile_choice():
    """Large products take the largest tile; one whose tile would pad M twice over a smaller one
    (64 output channels) a tile 64 high; few workgroups the smallest tile and split-K."""
    def tile(model, target=NVIDIA):
        (k,) = coopmat_kernels(model, target)[1]
        return k.params["BM"], k.params["BN"], k.params["split_k"]
    assert tile(gemm(4096, 2048, 512)) == (128, 128, False)
    assert tile(conv(32, 64, 56, 64, 3, pad=1)) == (64, 128, False)
    assert tile(gemm(64, 64, 2048)) == (32, 32, True)


def test_split_k_only_with_16_byte_fetches():
    """Split-K on the tensor cores is taken only where A and B are fetched 16 bytes at a time; with
    8- or 2-byte B fetches its sums were wrong on an H200 (matmul.py), so those run unsplit."""
    def split(model):
        (k,) = coopmat_kernels(model, SPLIT)[1]
        return k.params["A_VEC"], k.params["B_VEC"], k.params["split_k"]
    assert split(matmul_residual(3, 7, 1024, 24)) == (8, 8, True)
    assert split(matmul_residual(3, 7, 1024, 20)) == (8, 4, False)
    assert split(conv(1, 512, 7, 2048, 1)) == (8, 1, False)


def test_short_products_on_few_workgroups_take_deeper_k_steps_unsplit():
    """BERT-base b1's 128x768x768 on nvidia: 96 workgroups of the smallest tile, K too short for
    two slices of coopmat_short_k steps: one slice in steps of 256 (the deepest leaving 3).
    Without the rule it splits into slices of 64-deep steps; a long K still splits, and so does a
    grid under an eighth of coopmat_workgroups (10 workgroups, as MobileNetV2's 160x49x960)."""
    def kernel(model, target):
        (k,) = coopmat_kernels(model, target)[1]
        return k.params["BM"], k.params["BN"], k.params["BK"], k.params["split_k"]
    assert kernel(gemm(128, 768, 768), NVIDIA) == (32, 32, 256, False)
    assert kernel(gemm(128, 768, 768), replace(NVIDIA, coopmat_short_k=0)) == (32, 32, 64, True)
    assert kernel(gemm(128, 768, 320), NVIDIA) == (32, 32, 64, False)   # 5 steps: none deeper leaves 3
    assert kernel(gemm(128, 768, 3072), NVIDIA) == (32, 32, 64, True)
    assert kernel(gemm(128, 2304, 768), NVIDIA)[2:] == (64, False)      # enough workgroups
    assert kernel(gemm(160, 64, 960), NVIDIA) == (32, 32, 64, True)     # 10 workgroups


def test_few_rows_keep_the_register_kernel():
    """A batch-1 Linear layer (one row) would fill 1/16 of each tensor-core tile."""
    assert not coopmat_kernels(gemm(1, 1000, 512), NVIDIA)[1]


def test_lavapipe_refuses_a_coopmat_bundle_by_name():
    bundle, _ = coopmat_kernels(gemm(64, 64, 64), NVIDIA)
    with pytest.raises(VkcRuntimeError) as e:
        load(bundle)
    msg = str(e.value)
    assert "extension VK_KHR_cooperative_matrix" in msg
    assert "feature cooperativeMatrix (SPIR-V capability CooperativeMatrixKHR" in msg
    assert "Traceback" not in msg and "cffi" not in msg


def test_stem_taps_padded_for_16_byte_loads():
    """A 7x7 stem over 3 channels has 147 taps: its weights and im2col rows are padded to 152, so
    that the GEMM loads A 16 bytes at a time instead of one element."""
    (k,) = coopmat_kernels(conv(2, 3, 40, 64, 7, stride=2, pad=3), NVIDIA)[1]
    assert k.params["A_VEC"] == 8 and k.params["B_VEC"] == 8 and k.params["coords"] == "conv_cols"
    assert dict((name, v) for name, _, v in k.spec)["K"] == 152


def test_shape_must_split_evenly_between_lanes():
    """The epilogue hands each lane the same run of neighbours in one row of a tile: a shape with
    fewer elements than a subgroup has lanes (a made-up 8x8 on 128 lanes) is not taken."""
    odd = replace(NVIDIA, subgroup_size=128, max_invocations=1024,
                  cooperative_matrix=((8, 8, 16, "float16", "float16", "float32", "float32"),))
    assert not coopmat_kernels(gemm(128, 128, 128), odd)[1]
    wave64 = replace(odd, subgroup_size=64, coopmat_tiles=((2, 2, 2, 2),))
    bundle, (k,) = coopmat_kernels(gemm(128, 128, 128), wave64)
    assert k.params["SUBGROUP"] == 64 and (k.params["LM"], k.params["LN"]) == (8, 8)
    assert all(spirv_val(bytes(spirv)) is None for spirv in read_bundle(bundle).spirv)
