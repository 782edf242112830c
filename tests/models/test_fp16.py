"""`--precision fp16` on every model of the zoo (tests/models/zoo.py, small resolutions) and the
transformer fixtures (tests/models/fixtures), on lavapipe (shaderFloat16 and 16-bit storage),
against onnxruntime in float32; a few also with the generic profile's (GPU) kernels, and with
`--precision fp16-matmul` (float16 operands in the matrix products only).

Tolerance: rel L2 < 1e-2 per output, and every element within 2e-2 * max|ref| + 2e-2 * |ref|.
float16 rounds each stored activation and weight by up to 2^-11 relative; over ~20-50 layers
these add up to ~1e-3 rel L2 (measured: see the report in the fp16 commit message), so 1e-2
leaves an order of magnitude. The per-element bound is looser than the harness's float16 default
(1e-3 * max|ref| absolute), which is meant for one op rounding, not a whole network's.
Bundles must need the 16-bit storage feature and hold about half the float32 bundle's weights.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import pytest

from tests.models import zoo  # noqa: E402
from tests.models.test_transformers import _feeds  # noqa: E402

from tests.harness import check_against_onnxruntime, compile_cached  # noqa: E402
from bundles import read_bundle  # noqa: E402

FIXTURES = Path(__file__).resolve().parent / "fixtures"
RTOL_L2, RTOL, ATOL = 1e-2, 2e-2, 2e-2

ZOO = {
    "mobilenet_v2": lambda: zoo.mobilenet_v2(resolution=64),
    "mobilenet_v3_small": lambda: zoo.mobilenet_v3_small(resolution=64, opset=14),
    "resnet18": lambda: zoo.resnet18(resolution=64),
    "efficientnet_b0": lambda: zoo.efficientnet_b0(resolution=64),
    "shufflenet_v2": lambda: zoo.shufflenet_v2(resolution=64),
    "unet_small": lambda: zoo.unet_small(resolution=64),
}
FIXTURE_MODELS = ("bert_tiny", "distilbert_tiny", "gpt2_tiny", "whisper_enc_tiny", "vit_tiny",
                  "vit_tiny_b2", "convnext_tiny", "r3d_tiny")


def _check(model, feeds=None, target="lavapipe", precision="fp16"):
    result = check_against_onnxruntime(model, feeds=feeds, target=target, precision=precision,
                                       rtol_l2=RTOL_L2, rtol=RTOL, atol=ATOL)
    m = result["manifest"]
    assert {"storageBuffer16BitAccess"} <= set(m["requirements"]["features"])
    fp32 = read_bundle(compile_cached(model, target=target)).manifest
    ratio = m["memory"]["weights_bytes"] / fp32["memory"]["weights_bytes"]
    worst = max(float(np.max(np.abs(result["outputs"][n].astype(np.float64) - ref)))
                / max(float(np.max(np.abs(ref))), 1e-30)
                for n, ref in result["reference"].items() if np.issubdtype(ref.dtype, np.floating))
    print(f"{precision} rel L2 {max(result['errors'].values()):.2e}, max |err| / max|ref| {worst:.2e}, "
          f"weights {m['memory']['weights_bytes']} vs {fp32['memory']['weights_bytes']} B, "
          f"arena {m['memory']['arena_bytes']} vs {fp32['memory']['arena_bytes']} B")
    # fp16: weights halve; a few float32 tensors (a fallback node's, padding to 256 bytes) remain.
    # fp16-matmul: the matmul and conv weights halve (an embedding table, say, stays float32).
    assert ratio < (0.6 if precision == "fp16" else 0.9), ratio


@pytest.mark.parametrize("name", list(ZOO))
def test_zoo_fp16(name):
    _check(ZOO[name]())


@pytest.mark.parametrize("name", FIXTURE_MODELS)
def test_fixture_fp16(name, rng):
    model = onnx.load(str(FIXTURES / f"{name}.onnx"))
    _check(model, _feeds(name, model, rng))


def test_swin_fp16(rng):
    """torchvision's SwinTransformer, small, library init, as exported (fixtures/make_swin.py): its
    last MLP's residual sum goes into PatchMerging's float32 Pad. Its product once stored float32
    while reading its float16 epilogue operands as float32 bytes (rel L2 1.5 here, 1.2 on swin_t)."""
    model = onnx.load(str(FIXTURES / "swin_tiny.onnx"))
    _check(model, _feeds("swin_tiny", model, rng))
    _check(model, _feeds("swin_tiny", model, rng), target="generic")


# The generic (GPU) profile's kernels, run on lavapipe too: shared-memory tiled matmul with
# f16vec4 loads, split-K, implicit-GEMM conv, depthwise conv.
@pytest.mark.parametrize("name", ["mobilenet_v2", "resnet18", "bert_tiny", "convnext_tiny"])
def test_generic_profile_fp16(name, rng):
    _check_named(name, rng, target="generic")


def _check_named(name, rng, **options):
    """A zoo model or a fixture by name, as _check does."""
    if name in ZOO:
        _check(ZOO[name](), **options)
    else:
        model = onnx.load(str(FIXTURES / f"{name}.onnx"))
        _check(model, _feeds(name, model, rng), **options)


# --precision fp16-matmul: float16 operands in the matrix products only (the tensor cores' opt-in
# for float32 models); the same tolerance, the matmul and conv weights (nearly all) halved.
@pytest.mark.parametrize("name", ["resnet18", "bert_tiny", "vit_tiny", "gpt2_tiny"])
def test_fp16_matmul(name, rng):
    _check_named(name, rng, precision="fp16-matmul")
