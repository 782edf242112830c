"""Swin Transformer as torchvision exports it (fixtures/swin_tiny.onnx: two stages of two blocks,
patch merging between them; fixtures/exports/swin_default.onnx: one stage of two blocks), compiled
for the nvidia profile: one attention kernel per block, the shifted window's included (its
relative position bias and window mask read by the kernel), no softmax kernel, and no more
dispatches than counted when the last fusion landed. Numerics: test_fp16.py (swin_tiny, fp16 on
lavapipe and generic), test_exports.py (swin_default, fp32 and fp16 on lavapipe) and here
(swin_tiny, fp32 on generic: the tiled kernel reading the bias and the mask)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from tests.harness import check_against_onnxruntime

from bundles import read_bundle
from compiler import compile_model

FIXTURES = Path(__file__).resolve().parent / "fixtures"
# fixture -> (blocks, {precision: dispatches on the nvidia profile})
COUNTS = {
    "swin_tiny": (4, {"fp32": 45, "fp16": 46}),
    "exports/swin_default": (2, {"fp32": 28, "fp16": 29}),
}


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("name", COUNTS)
def test_swin_kernels(name, precision):
    blocks, most = COUNTS[name][0], COUNTS[name][1][precision]
    m = read_bundle(compile_model(FIXTURES / f"{name}.onnx", target="nvidia", precision=precision)).manifest
    kernels = [m["kernels"][d["kernel"]]["name"] for d in m["dispatches"]]
    assert sum(k.startswith("attention") for k in kernels) == blocks, kernels
    assert not [k for k in kernels if k.startswith("softmax")], kernels
    assert len(kernels) <= most, kernels


def test_swin_tiny_generic_fp32(rng):
    model = onnx.load(str(FIXTURES / "swin_tiny.onnx"))
    x = rng.standard_normal([1, 3, 16, 16]).astype(np.float32)
    check_against_onnxruntime(model, feeds={model.graph.input[0].name: x}, target="generic")
