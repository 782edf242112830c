"""Swin Transformer as torchvision exports it (fixtures/swin_tiny.onnx: two stages of two blocks,
patch merging between them; fixtures/exports/swin_default.onnx: one stage of two blocks) and as
transformers does (fixtures/exports/swin_hf_default.onnx), compiled for the nvidia profile at
batch 1: one attention kernel per block, the shifted window's included (its relative position
bias and window mask read by the kernel), no softmax kernel, and no more dispatches than counted
when the last fusion landed. Numerics: test_fp16.py (swin_tiny, fp16 on lavapipe and generic),
test_exports.py (the exports, fp32 and, swin_default, fp16 on lavapipe) and here (swin_tiny, fp32
on generic: the tiled kernel reading the bias and the mask)."""
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
    "swin_tiny": (4, {"fp32": 41, "fp16": 42}),
    "exports/swin_default": (2, {"fp32": 24, "fp16": 25}),
    "exports/swin_hf_default": (2, {"fp32": 23, "fp16": 26}),
}


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("name", COUNTS)
def test_swin_kernels(name, precision):
    blocks, most = COUNTS[name][0], COUNTS[name][1][precision]
    model = onnx.load(str(FIXTURES / f"{name}.onnx"))
    x = model.graph.input[0]   # (the HF export's batch is dynamic)
    shape = [d.dim_value or 1 for d in x.type.tensor_type.shape.dim]
    m = read_bundle(compile_model(model, target="nvidia", precision=precision,
                                  input_shapes={x.name: shape})).manifest
    kernels = [m["kernels"][d["kernel"]]["name"] for d in m["dispatches"]]
    assert sum(k.startswith("attention") for k in kernels) == blocks, kernels
    assert not [k for k in kernels if k.startswith("softmax")], kernels
    assert len(kernels) <= most, kernels


def test_swin_tiny_generic_fp32(rng):
    model = onnx.load(str(FIXTURES / "swin_tiny.onnx"))
    x = rng.standard_normal([1, 3, 16, 16]).astype(np.float32)
    check_against_onnxruntime(model, feeds={model.graph.input[0].name: x}, target="generic")
