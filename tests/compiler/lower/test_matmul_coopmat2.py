"""VK_NV_cooperative_matrix2 kernels (templates/matmul_coopmat2.comp.j2): which matmuls take them,
that every variant the lowering produces compiles (glslang >= 15, VKC_COOPMAT2_GLSLC) and passes
spirv-val, what bundles holding them require, and the clear errors where the compiler or the device
lacks what they need. lavapipe has no cooperative matrix: their numerics are checked on the H200
(benchmarks/gpu/coopmat.py check --coopmat2)."""
from __future__ import annotations

import os
from dataclasses import replace

import numpy as np
import pytest
from onnx import helper

from tests.harness import spirv_validate

from bundles import read_bundle
from compiler import codegen
from compiler.compile import compile_with_kernels, lower_model
from compiler.errors import CompileError
from compiler.lower.matmul import coopmat2_fits
from compiler.targets import TARGETS
from compiler.tune import COOPMAT2_TILES, candidates
from runtime_min import VkcRuntimeError, load

from tests.compiler.lower.test_matmul_coopmat import _model, conv, gemm, matmul_residual

NVIDIA = TARGETS["nvidia"]
TILE = (128, 128, 32, 256, 8)
CM2 = replace(NVIDIA, name="nvidia-coopmat2", coopmat2_tile=TILE)
CM2_FEATURES = {"cooperativeMatrixWorkgroupScope", "cooperativeMatrixFlexibleDimensions",
                "cooperativeMatrixTensorAddressing"}

needs_compiler = pytest.mark.skipif(
    not os.environ.get("VKC_COOPMAT2_GLSLC"),
    reason="VKC_COOPMAT2_GLSLC unset: no glslang >= 15 to compile coopmat2 kernels (.ci/newer_glslc.sh)")


def coopmat2_kernels(model, target=CM2, precision="fp16"):
    bundle, kernels = compile_with_kernels(model, target=target, precision=precision)
    return bundle, [k for k in kernels if k.template == "matmul_coopmat2"]


def lowered(model, target=CM2, precision="fp16"):
    """The matmul kernels' templates, without compiling SPIR-V (no compiler needed)."""
    kernels = lower_model(model, target=target, precision=precision)[3]
    return [k.template for k in kernels if k.template.startswith("matmul")]


def chained(M, K, N):
    """Two products, the first's result the second's A: the first stores float16."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("MatMul", ["a", "b1"], ["h"]), helper.make_node("MatMul", ["h", "b2"], ["y"])]
    inits = [("b1", (rng.standard_normal((K, N)) / np.sqrt(K)).astype(np.float32)),
             ("b2", (rng.standard_normal((N, N)) / np.sqrt(N)).astype(np.float32))]
    return _model(nodes, [("a", [M, K])], "y", [M, N], inits)


# Row- and column-major B, whole and ragged tiles, the fused epilogue with an operand (a float16
# residual read into a float32 store), batches, every tile `vkc tune` tries, float32 and float16 stores.
VARIANTS = {
    "aligned": (gemm(256, 256, 256), CM2),
    "float16_store": (chained(128, 64, 128), CM2),
    "ragged_tanh": (gemm(200, 72, 40, act="Tanh"), CM2),
    "b_column_major": (gemm(96, 80, 64, trans_b=1, const_b=False, bias=False, act=None), CM2),
    "batched_residual": (matmul_residual(3, 100, 64, 72), CM2),
    **{f"tile_{'x'.join(map(str, t))}": (gemm(300, 520, 96), replace(NVIDIA, coopmat2_tile=t))
       for t in COOPMAT2_TILES},
}


@needs_compiler
@pytest.mark.parametrize("name", VARIANTS)
def test_every_variant_passes_spirv_val(name):
    model, target = VARIANTS[name]
    bundle, kernels = coopmat2_kernels(model, target)
    assert kernels, f"{name}: no coopmat2 kernel"
    spirv_validate(bundle)
    req = read_bundle(bundle).manifest["requirements"]
    assert req["vulkan_api"] == [1, 3, 0]
    assert {"VK_NV_cooperative_matrix2", "VK_KHR_cooperative_matrix"} <= set(req["extensions"])
    assert CM2_FEATURES | {"cooperativeMatrix", "shaderFloat16"} <= set(req["features"])


@needs_compiler
def test_variants_cover_the_template():
    seen = set()
    for model, target in VARIANTS.values():
        for k in coopmat2_kernels(model, target)[1]:
            p = k.params
            seen |= {("B", p["B_MAJOR"]), ("epilogue", p["n_epilogue"] > 0), ("T", p["T"].name),
                     ("tile", p["BM"], p["BN"], p["THREADS"])}
    want = {("B", "row"), ("B", "col"), ("epilogue", True), ("epilogue", False), ("T", "float16")}
    want |= {("tile", t[0], t[1], t[3]) for t in COOPMAT2_TILES}
    assert want <= seen, want - seen


@needs_compiler
def test_float32_store_validates():
    """--precision fp16-matmul: float16 products stored as float32 with the residual Add fused."""
    bundle, kernels = coopmat2_kernels(matmul_residual(2, 64, 64, 64), CM2, "fp16-matmul")
    assert len(kernels) == 1 and kernels[0].params["T"].name == "float32"
    spirv_validate(bundle)


def test_taken_only_where_tuned_and_allowed():
    """The profile never picks coopmat2 by itself (tuning asks for it per problem); convolutions,
    float32 models, rows not 16-byte aligned and tiles off the device's granularity keep the
    subgroup-scope kernel."""
    assert lowered(gemm(256, 256, 256), NVIDIA) == ["matmul_coopmat"]
    assert lowered(gemm(256, 256, 256)) == ["matmul_coopmat2"]
    assert "matmul_coopmat2" not in lowered(conv(2, 16, 20, 48, 3, pad=1))
    assert "matmul_coopmat2" not in lowered(gemm(256, 256, 256), precision="fp32")
    assert lowered(gemm(64, 64, 36)) == ["matmul_coopmat"]           # rows of 36 float16: 72 bytes
    off_grid = replace(NVIDIA, coopmat2_tile=(48, 64, 32, 256, 8))    # 48 rows: 256 invocations take 32s
    assert not coopmat2_fits(off_grid, off_grid.coopmat2_tile)
    assert lowered(gemm(256, 256, 256), off_grid) == ["matmul_coopmat"]
    no_cm2 = replace(CM2, coopmat2=())
    assert lowered(gemm(256, 256, 256), no_cm2) == ["matmul_coopmat"]


def test_without_the_compiler_the_error_says_what_to_install(monkeypatch):
    monkeypatch.delenv("VKC_COOPMAT2_GLSLC", raising=False)
    codegen.newer_toolchain.cache_clear()
    codegen.compile_glsl.cache_clear()
    monkeypatch.setattr(codegen, "_spirv_cache", lambda: None)
    try:
        with pytest.raises(CompileError) as e:
            coopmat2_kernels(gemm(128, 128, 128))
        assert "glslang >= 15" in str(e.value) and "VKC_COOPMAT2_GLSLC" in str(e.value)
        monkeypatch.setenv("VKC_COOPMAT2_GLSLC", "/bin/true")
        codegen.newer_toolchain.cache_clear()
        with pytest.raises(CompileError, match="is not a glslc with glslang >= 15"):
            coopmat2_kernels(gemm(128, 128, 128))
    finally:
        codegen.newer_toolchain.cache_clear()
        codegen.compile_glsl.cache_clear()


def test_tune_tries_coopmat2_tiles_only_with_the_compiler(monkeypatch):
    logs = []
    monkeypatch.delenv("VKC_COOPMAT2_GLSLC", raising=False)
    codegen.newer_toolchain.cache_clear()
    try:
        assert not [c for c in candidates(NVIDIA, "fp16", logs.append) if "coopmat2_tile" in c]
        assert any("VK_NV_cooperative_matrix2" in line and "VKC_COOPMAT2_GLSLC" in line for line in logs)
        monkeypatch.setattr("compiler.tune.newer_toolchain", lambda: object())
        tiles = [c["coopmat2_tile"] for c in candidates(NVIDIA, "fp16", logs.append) if "coopmat2_tile" in c]
        assert tiles == list(COOPMAT2_TILES)
        assert not [c for c in candidates(replace(NVIDIA, coopmat2=()), "fp16") if "coopmat2_tile" in c]
        assert not [c for c in candidates(NVIDIA, "fp32") if "coopmat2_tile" in c]
    finally:
        codegen.newer_toolchain.cache_clear()


@needs_compiler
def test_lavapipe_refuses_a_coopmat2_bundle_by_name():
    bundle, _ = coopmat2_kernels(gemm(128, 128, 128))
    with pytest.raises(VkcRuntimeError) as e:
        load(bundle)
    msg = str(e.value)
    assert "extension VK_NV_cooperative_matrix2" in msg
    assert "feature cooperativeMatrixWorkgroupScope (workgroup-scope cooperative matrices" in msg
    assert "feature cooperativeMatrixTensorAddressing (SPIR-V capability TensorAddressingNV" in msg
    assert "Traceback" not in msg and "cffi" not in msg
