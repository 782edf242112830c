"""The tensor-core kernels (templates/matmul_coopmat.comp.j2, attention_coopmat.comp.j2) on lavapipe,
their cooperative-matrix operations emulated (Target.emulate_cooperative_matrix,
templates/coopmat.glsl.j2): the nvidia profile's kernels, tiles and epilogues against onnxruntime.
Inputs and weights hold float16 values, so onnxruntime's float32 reference sees the operands the
tensor cores do; what separates the two is float32 summation order and, where a kernel stores
float16, one rounding of the result (and of attention's probabilities).

Tolerances: a float32 store: rel L2 1e-5 and every element within 1e-4 * max|ref| + 1e-3 * |ref|
(measured: rel L2 at most 3e-7, the worst element at 0.3 % of its bound); a float16 store: rel L2
2e-3, every element within 2e-3 * max|ref| + 4e-3 * |ref| (8 float16 ulps; measured 2.6e-4 and
7 %). A wrong tile offset, stride or edge is off by the size of the data.

lavapipe has 32 KiB of shared memory: tiles that take more (128x128, 256x128, 64x128, K steps of
256, attention of four subgroups or 64 keys at larger heads) do not run here; test_matmul_coopmat.py
and test_attention_coopmat.py validate their modules, the H200 their numbers."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from tests.attention_models import core_attention, window_block
from tests.compiler.lower.test_matmul_coopmat import conv, gemm
from tests.compiler.passes.test_onnx_attention import attention_model, feeds_for
from tests.harness import (assert_close, declared_shared_bytes, random_feeds, run_bundle,
                           run_onnxruntime, spirv_validate)
from tests.models.test_transformers import _feeds

from bundles import read_bundle
from compiler import codegen
from compiler.compile import compile_with_kernels, lower_model
from compiler.errors import CompileError
from compiler.targets import TARGETS, emulating_cooperative_matrix

EMULATED = emulating_cooperative_matrix(TARGETS["nvidia"])
# Other tiles of the template than the smallest, which small problems take on nvidia: each
# subgroup holding 2x2 accumulators; a grid of 2x4 subgroups; 1x2 accumulators a subgroup.
TILE_64X64 = replace(EMULATED, min_workgroups=1, coopmat_tiles=((2, 2, 2, 2),))
GRID_2X4 = replace(EMULATED, min_workgroups=1, coopmat_tiles=((2, 4, 1, 1),))
TILE_32X64 = replace(EMULATED, min_workgroups=1, coopmat_tiles=((2, 2, 1, 2),))
SPLIT_K = replace(EMULATED, min_workgroups=100000, coopmat_short_k=0)
TWO_STAGES = replace(EMULATED, coopmat_stages=2, coopmat_k=32)
IMPLICIT_IM2COL = replace(EMULATED, im2col_max_bytes=0)
# Attention in blocks of 32 keys (a device with less shared memory; nvidia's own choice at head
# size 128), and the same with two subgroups a workgroup (fewer workgroups wanted).
KEYS_32 = replace(EMULATED, max_shared_memory=12288)
KEYS_32_TWO_SUBGROUPS = replace(KEYS_32, min_workgroups=48)
FIXTURES = "tests/models/fixtures"


def float16_value(a: np.ndarray) -> np.ndarray:
    """float32 values rounded to the nearest float16 where float16 holds them (kept float32; a
    mask's finfo.min stays)."""
    if a.dtype != np.float32:
        return a
    with np.errstate(over="ignore"):
        return np.where(np.abs(a) <= np.finfo(np.float16).max, a.astype(np.float16), a).astype(np.float32)


def float16_values(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with every float32 weight a float16 value (float16_value)."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    for init in model.graph.initializer:
        init.CopyFrom(numpy_helper.from_array(float16_value(numpy_helper.to_array(init)), init.name))
    return model


def batched_matmul(batch, M, K, N):
    """[batch, M, K] x [batch, K, N] + a residual: a product per batch (workgroup z)."""
    nodes = [helper.make_node("MatMul", ["a", "b"], ["y0"]), helper.make_node("Add", ["y0", "r"], ["y"])]
    inputs = [helper.make_tensor_value_info(n, 1, s) for n, s in
              (("a", [batch, M, K]), ("b", [batch, K, N]), ("r", [batch, M, N]))]
    graph = helper.make_graph(nodes, "m", inputs, [helper.make_tensor_value_info("y", 1, [batch, M, N])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def check(model, target, templates, *, precision="fp16", io=None, feeds=None, tolerance=None):
    """Compile for `target` (kernels of each of `templates` in it), run on lavapipe (validation
    layer on, every module through spirv-val) and compare with onnxruntime: `tolerance` (rel L2,
    rtol, atol as a fraction of max|ref|), or the module docstring's by what the kernels store."""
    model = float16_values(model)
    feeds = {k: float16_value(v) for k, v in (feeds if feeds is not None else random_feeds(model)).items()}
    ref = run_onnxruntime(model, feeds)
    bundle, kernels = compile_with_kernels(model, target=target, precision=precision, io=io)
    emulated = [k for k in kernels if k.template in templates]
    assert {k.template for k in emulated} == set(templates)
    assert all(k.params["emulate_coopmat"] for k in emulated)
    spirv_validate(bundle)
    req = read_bundle(bundle).manifest["requirements"]
    assert "VK_KHR_cooperative_matrix" not in req["extensions"]
    assert "cooperativeMatrix" not in req["features"]
    for k in emulated:
        assert k.shared_memory_bytes == declared_shared_bytes(codegen.render(k))
    fp16_io = io == "fp16"
    got, _ = run_bundle(bundle, {k: v.astype(np.float16) if fp16_io and v.dtype == np.float32 else v
                                 for k, v in feeds.items()})
    if tolerance is None:
        float16_store = any(k.params[out].name == "float16" for k in emulated
                            for out in ("T", "TO") if out in k.params)
        tolerance = (2e-3, 4e-3, 2e-3) if float16_store else (1e-5, 1e-3, 1e-4)
    rtol_l2, rtol, atol = tolerance
    for name, want in ref.items():
        have = got[name].astype(np.float32)
        empty = np.isnan(want)   # rows that see no key (attention's -inf masks)
        assert np.array_equal(np.isnan(have), empty), f"{name}: NaN at {np.argwhere(np.isnan(have) != empty)[0]}"
        have, want = np.where(empty, 0, have), np.where(empty, 0, want)
        assert_close(name, have, want, rtol_l2=rtol_l2, rtol=rtol, atol=atol * float(np.abs(want).max()))


# (model, target, precision, io): row- and column-major A and B, loads of 8, 4 and 1 elements,
# whole and ragged tiles, float16 and float32 stores (the vector and the element-wise epilogue),
# fused bias, activation and residual, batches, split-K, one and two shared buffers, two K
# steps in flight (an odd number of them), deeper K steps, implicit-GEMM and im2col convolutions.
MATMULS = {
    "aligned_float16_store_odd_steps": (gemm(64, 64, 320), EMULATED, "fp16", "fp16"),
    "ragged_tanh": (gemm(100, 70, 33, act="Tanh"), EMULATED, "fp16-matmul", None),
    "b_column_major_ragged": (gemm(129, 131, 130, trans_b=1, const_b=False), EMULATED, "fp16", "fp16"),
    "both_column_major": (gemm(96, 80, 64, trans_a=1, trans_b=1, const_b=False, bias=False, act=None),
                          TILE_64X64, "fp16-matmul", None),
    "vec4_loads_grid_2x4": (gemm(64, 132, 36, act="Sigmoid"), GRID_2X4, "fp16", "fp16"),
    "batched_residual": (batched_matmul(3, 40, 64, 48), TILE_32X64, "fp16-matmul", None),
    "split_k": (gemm(64, 64, 1024), SPLIT_K, "fp16-matmul", None),
    "two_stages": (gemm(128, 96, 200), TWO_STAGES, "fp16", "fp16"),
    "deeper_k_steps": (gemm(192, 192, 384), EMULATED, "fp16-matmul", None),
    "conv_implicit_im2col": (conv(1, 16, 20, 48, 3, pad=1), IMPLICIT_IM2COL, "fp16", "fp16"),
    "conv_images_side_by_side": (conv(3, 16, 7, 48, 3, pad=1), EMULATED, "fp16", "fp16"),
}


@pytest.mark.parametrize("name", MATMULS)
def test_matmul(name):
    model, target, precision, io = MATMULS[name]
    check(model, target, ["matmul_coopmat"], precision=precision, io=io)


def test_matmuls_cover_the_template():
    seen = set()
    for model, target, precision, io in MATMULS.values():
        for k in lower_model(model, target=target, precision=precision, io=io)[3]:
            if k.template == "matmul_coopmat":
                p = k.params
                seen |= {("A", p["A_MAJOR"], p["A_VEC"]), ("B", p["B_MAJOR"], p["B_VEC"]),
                         ("aligned", p["aligned"]), ("split", p["split_k"]), ("b_mode", p["b_mode"]),
                         ("grid", p["WM"], p["WN"]), ("accumulators", p["SM"], p["SN"]),
                         ("epilogue", p["n_epilogue"] > 0), ("stages", p["STAGES"]), ("BK", p["BK"]),
                         ("coords", p["coords"]), ("deep", p["DEEP_PREFETCH"]), ("T", p["T"].name)}
    for want in [("A", "row", 8), ("A", "row", 4), ("A", "row", 1), ("A", "col", 8),
                 ("B", "row", 8), ("B", "row", 4), ("B", "row", 1), ("B", "col", 8), ("B", "col", 1),
                 ("aligned", True), ("aligned", False), ("split", True), ("split", False),
                 ("b_mode", "im2col"), ("grid", 2, 4), ("accumulators", 2, 2), ("accumulators", 1, 2),
                 ("epilogue", True), ("stages", 1), ("stages", 2), ("BK", 128),
                 ("coords", "conv"), ("coords", "conv_cols"), ("coords", "matmul"),
                 ("deep", True), ("deep", False), ("T", "float16"), ("T", "float32")]:
        assert want in seen, want


# (model, target, how the feeds differ from random ones): additive masks, key-padding (boolean)
# masks, causal, grouped-query heads, per-batch key counts; rows and keys not multiples of the
# tiles (a partial key block after a whole one), unequal head sizes, rows that see no key (NaN
# after a softmax; 0 in ONNX Attention); one and two subgroups, the next key block fetched ahead or
# not; Swin's shifted windows (a relative position bias beside the window mask, Q, K, V and the
# output each window and token at two strides).
GQA = dict(b=2, hq=4, hkv=2, sq=40, skv=70, d=16)
ATTENTIONS = {
    "additive_mask_ragged_empty_row": (
        core_attention(2, 2, 40, 32, sk=70, dv=48, k_transposed=False, mask_shape=[2, 1, 40, 70]),
        KEYS_32, "-inf row"),
    "gqa_key_padding_empty_row": (attention_model(mask="bool", **GQA), KEYS_32, "empty row"),
    "gqa_causal_key_counts_two_subgroups": (attention_model(causal=1, lengths=True, **GQA),
                                            KEYS_32_TWO_SUBGROUPS, [45, 70]),
    "swin_shifted_windows_in_place": (window_block(2, 2, 7, 3, 32, shift=3), EMULATED, None),
}


def _attention_feeds(model, how):
    if how is None:
        return random_feeds(model)
    if how == "-inf row":
        feeds = random_feeds(model)
        feeds["mask"][1, 0, 7] = -np.inf
        return feeds
    if how == "empty row":
        feeds = feeds_for(model)
        feeds["mask"][0, 0, 3] = False
        return feeds
    return feeds_for(model, lengths=how)


@pytest.mark.parametrize("name", ATTENTIONS)
def test_attention(name):
    model, target, how = ATTENTIONS[name]
    check(model, target, ["attention_coopmat"], io="fp16", feeds=_attention_feeds(model, how))


def test_attentions_cover_the_template():
    seen = set()
    for model, target, _ in ATTENTIONS.values():
        for k in lower_model(model, target=target, precision="fp16", io="fp16")[3]:
            if k.template == "attention_coopmat":
                p = k.params
                seen |= {("WQ", p["WQ"]), ("prefetch", p["PREFETCH"]), ("mask", p["mask_kind"]),
                         ("causal", p["causal"]), ("gqa", p["KV_GROUP"] > 1), ("lengths", p["lengths"]),
                         ("empty_rows_zero", p["empty_rows_zero"]), ("dv", p["D"] == p["DV"]),
                         ("bias", p["bias"]), ("two-part rows", "Q" in p["parts"]["row"])}
    for want in [("WQ", 1), ("WQ", 2), ("prefetch", True), ("prefetch", False), ("mask", "none"),
                 ("mask", "add"), ("mask", "keep"), ("causal", True), ("causal", False), ("gqa", True),
                 ("lengths", True), ("empty_rows_zero", True), ("empty_rows_zero", False), ("dv", False),
                 ("bias", True), ("two-part rows", True)]:
        assert want in seen, want


def test_bert_end_to_end(rng):
    """A BERT compiled for nvidia at float16: its products and attention on the emulated tensor
    cores, with the padding mask, LayerNorms and GELU between them; tests/models/test_fp16.py's
    tolerance for a whole float16 network."""
    model = onnx.load(f"{FIXTURES}/bert_tiny_sdpa.onnx")
    check(model, EMULATED, ["matmul_coopmat", "attention_coopmat"], feeds=_feeds("bert_tiny_sdpa", model, rng),
          tolerance=(1e-2, 2e-2, 2e-2))


def test_emulation_swaps_only_the_primitives():
    """The nvidia profile's kernels keep their cooperative matrices; the emulated ones hold none,
    and are the same kernels otherwise (same tiles)."""
    model = gemm(64, 64, 128)
    (gpu,) = [k for k in compile_with_kernels(model, target=TARGETS["nvidia"], precision="fp16")[1]
              if k.template == "matmul_coopmat"]
    (emu,) = [k for k in compile_with_kernels(model, target=EMULATED, precision="fp16")[1]
              if k.template == "matmul_coopmat"]
    assert {**gpu.params, "emulate_coopmat": True} == emu.params
    assert "coopmat<float16_t, gl_ScopeSubgroup" in codegen.render(gpu) and "cm_mul_add" not in codegen.render(gpu)
    assert "coopmat<" not in codegen.render(emu) and "#extension GL_KHR_cooperative_matrix" not in codegen.render(emu)


def test_coopmat2_has_no_emulation():
    with pytest.raises(CompileError, match="no emulation"):
        compile_with_kernels(gemm(256, 256, 256), target=replace(EMULATED, coopmat2_tile=(128, 128, 32, 256, 8)),
                             precision="fp16")
