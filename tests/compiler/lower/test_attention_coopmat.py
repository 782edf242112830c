"""The cooperative-matrix attention kernel (templates/attention_coopmat.comp.j2): which attention
takes it, and every module variant the lowering produces passes spirv-val. lavapipe has no
cooperative matrix: test_coopmat_emulation.py checks its numbers against onnxruntime with the
cooperative matrices emulated, the H200 with them (benchmarks/gpu/coopmat.py check);
test_attention.py runs the other attention kernels here."""
from __future__ import annotations

import functools
from dataclasses import replace

import pytest

from tests.attention_models import causal_mask, core_attention, window_attention, window_block
from tests.harness import declared_shared_bytes, spirv_val

import compiler.lower.attention as attention
from bundles import read_bundle
from compiler import codegen
from compiler.compile import compile_with_kernels
from compiler.dtypes import TYPES
from compiler.targets import TARGETS

NVIDIA = TARGETS["nvidia"]
# AMD RDNA3 in wave64: four lanes share a query row.
WAVE64 = replace(NVIDIA, name="wave64", subgroup_size=64)


def attention_kernel(model, target=NVIDIA, precision="fp16"):
    bundle, kernels = compile_with_kernels(model, target=target, precision=precision)
    [kernel] = [k for k in kernels if k.template.startswith("attention")]
    return bundle, kernel


# (model, target): BERT and ViT shapes at batch 1 and 8 (one subgroup a workgroup, four with
# the next key block prefetched), causal and additive masks, head size 128 and cross attention
# with unequal head sizes, Swin's shifted windows (bias and window mask; Q, K, V and the output
# in image order), wave64.
VARIANTS = {
    "bert-b1-padding": (core_attention(1, 12, 128, 64, k_transposed=False, mask_shape=[1, 1, 1, 128]), NVIDIA),
    "bert-b8-full-mask": (core_attention(8, 12, 128, 64, k_transposed=False, mask_shape=[8, 1, 128, 128]), NVIDIA),
    "vit-b1": (core_attention(1, 12, 197, 64, k_transposed=False), NVIDIA),
    "vit-b8": (core_attention(8, 12, 197, 64, k_transposed=False), NVIDIA),
    "causal-d128": (core_attention(1, 2, 33, 128, mask_const=causal_mask(33, 33), k_transposed=False), NVIDIA),
    "causal-d128-b8": (core_attention(8, 12, 100, 128, mask_const=causal_mask(100, 100), k_transposed=False), NVIDIA),
    "cross-sk70-d32-dv48": (core_attention(2, 2, 40, 32, sk=70, dv=48, k_transposed=False), NVIDIA),
    "swin-shifted-windows": (window_attention(2, 4, 3, 49, 32), NVIDIA),
    "swin-windows-in-place": (window_block(2, 2, 7, 3, 32, shift=3), NVIDIA),
    "wave64": (core_attention(2, 4, 50, 64, k_transposed=False, mask_shape=[2, 1, 1, 50]), WAVE64),
}


@functools.cache
def variant(name):
    """(bundle, attention kernel) of VARIANTS[name], compiled once for the module's tests."""
    model, target = VARIANTS[name]
    return attention_kernel(model, target)


def _validates(bundle):
    r = read_bundle(bundle)
    for module, spirv in zip(r.manifest["modules"], r.spirv):
        assert spirv_val(bytes(spirv)) is None, module["name"]
    return r


@pytest.mark.parametrize("name", VARIANTS)
def test_every_variant_passes_spirv_val(name):
    bundle, kernel = variant(name)
    assert kernel.template == "attention_coopmat", name
    req = _validates(bundle).manifest["requirements"]
    assert "VK_KHR_cooperative_matrix" in req["extensions"]
    assert {"cooperativeMatrix", "shaderFloat16"} <= set(req["features"])


@pytest.mark.parametrize("mask_kind,out", [("keep", "float16"), ("add", "float16"),
                                           ("keep", "float32"), ("none", "float32")])
def test_mask_and_store_variants_validate(mask_kind, out):
    """An int32 key-padding mask (onnxruntime's contrib attention) and a float32 store (the
    output's Cast absorbed) on the padded BERT kernel."""
    _, kernel = variant("bert-b1-padding")
    params = dict(kernel.params, mask_kind=mask_kind,
                  TO=kernel.params["T"] if out == "float16" else TYPES[out])
    source = codegen.render(replace(kernel, params=params))
    assert f"writeonly buffer OUT_buffer {{ {'float16_t' if out == 'float16' else 'float'} OUT[]; }}" in source
    assert ("MASK[e] <= 0" in source) == (mask_kind == "keep")
    assert spirv_val(codegen.compile_glsl(source, f"attention_coopmat_{mask_kind}_{out}")) is None


def test_variants_cover_the_template():
    seen = set()
    for name in VARIANTS:
        p = variant(name)[1].params
        seen |= {("WQ", p["WQ"]), ("BK", p["BK"]), ("prefetch", p["PREFETCH"]),
                 ("mask", p["mask_kind"]), ("causal", p["causal"]), ("lanes", p["SUBGROUP"] // 16)}
    for want in [("WQ", 1), ("WQ", 2), ("WQ", 4), ("BK", 64), ("BK", 32), ("prefetch", True),
                 ("prefetch", False), ("mask", "none"), ("mask", "add"), ("causal", True),
                 ("causal", False), ("lanes", 2), ("lanes", 4)]:
        assert want in seen, want


def test_workgroups_and_block_keys():
    """Four subgroups a workgroup where that still gives a quarter of min_workgroups workgroups,
    else fewer; a shorter key block where head size 128 leaves no room for 64 keys."""
    def tiles(name):
        p = variant(name)[1].params
        return p["WQ"], p["BK"], p["PREFETCH"]
    assert tiles("vit-b8") == (4, 64, True)
    assert tiles("bert-b8-full-mask") == (4, 64, True)
    assert tiles("vit-b1") == (2, 64, False)
    assert tiles("bert-b1-padding") == (1, 64, False)
    assert tiles("causal-d128-b8") == (2, 32, False)
    for name, (_, target) in VARIANTS.items():
        kernel = variant(name)[1]
        assert kernel.shared_memory_bytes == declared_shared_bytes(codegen.render(kernel))
        assert kernel.shared_memory_bytes <= target.max_shared_memory


@pytest.mark.parametrize("why,model,target,precision", [
    ("float32 never runs on the tensor cores", core_attention(1, 4, 64, 64, k_transposed=False), NVIDIA, "fp32"),
    ("no cooperative matrix on the profile", core_attention(1, 4, 64, 64, k_transposed=False), TARGETS["generic"], "fp16"),
    ("no cooperative matrix on the profile", core_attention(1, 4, 64, 64, k_transposed=False), TARGETS["mobile"], "fp16"),
    ("head size not a multiple of 16", core_attention(1, 4, 64, 40, k_transposed=False), NVIDIA, "fp16"),
    ("K's rows not contiguous (a [B, H, D, S] input)", core_attention(1, 4, 64, 64), NVIDIA, "fp16"),
    ("head size above 128", core_attention(1, 2, 32, 160, k_transposed=False), NVIDIA, "fp16"),
    ("no 16x16x16 float16 shape", core_attention(1, 4, 64, 64, k_transposed=False),
     replace(NVIDIA, cooperative_matrix=((16, 8, 16, "float16", "float16", "float32", "float32"),)), "fp16"),
])
def test_other_attention_keeps_the_tiled_kernel(why, model, target, precision):
    assert attention_kernel(model, target, precision)[1].template == "attention_tiled", why


def test_rows_not_16_byte_aligned_keep_the_tiled_kernel():
    """Q, K and V are read 16 bytes at a time: a layout whose rows start off an 8-element
    boundary (here a packed tensor at an offset of 4) takes the tiled kernel."""
    layouts = {"q": (0, (0, 64, 64, 1)), "k": (4, (0, 64, 64, 1)), "v": (0, (0, 64, 64, 1))}
    assert attention.coopmat_tiles(4, 64, 64, 64, layouts, NVIDIA, "float16") is None
    layouts["k"] = (8, (0, 64, 64, 1))
    assert attention.coopmat_tiles(4, 64, 64, 64, layouts, NVIDIA, "float16") is not None
