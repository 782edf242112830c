"""Transformers and modern CNNs as exporters write them (tests/models/fixtures: BERT, DistilBERT,
GPT-2, Whisper's encoder, ViT, ConvNeXt, a 3-D CNN with random weights; the text models, Whisper's
encoder and Llama also with their default SDPA attention and library init), against onnxruntime
on fresh random inputs, on the generic and lavapipe profiles. Also counts kernels: the fusion
passes must leave no reduce kernel where a LayerNorm was, no softmax (attention fused), and the
SDPA exports no more kernels than the eager ones."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from tests.harness import check_against_onnxruntime

FIXTURES = Path(__file__).resolve().parent / "fixtures"
VOCAB = 1000
TEXT = ("bert_tiny", "distilbert_tiny", "gpt2_tiny")
# The classes as users export them: default (SDPA) attention, the library's own init.
SDPA = ("bert_tiny_sdpa", "distilbert_tiny_sdpa", "gpt2_tiny_sdpa", "whisper_enc_tiny_sdpa",
        "llama_tiny_sdpa", "bert_tiny_dynamo", "llama_tiny_dynamo")  # the last two: dynamo=True
MODELS = (*TEXT, "whisper_enc_tiny", "vit_tiny", "vit_tiny_b2", "convnext_tiny", "r3d_tiny", *SDPA)


def _feeds(name: str, model: onnx.ModelProto, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Token ids in the vocabulary and a padding mask (1 = token, 0 = padding: a random tail
    padded) for text models; standard normal tensors for the others."""
    feeds = {}
    for vi in model.graph.input:
        shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        if vi.name == "input_ids":
            feeds[vi.name] = rng.integers(0, VOCAB, shape).astype(np.int64)
        elif vi.name == "attention_mask":
            mask = np.ones(shape, np.int64)
            mask[..., shape[-1] - int(rng.integers(1, shape[-1] // 2)):] = 0
            feeds[vi.name] = mask
        else:
            feeds[vi.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


@pytest.mark.parametrize("target", ["generic", "lavapipe"])
@pytest.mark.parametrize("name", MODELS)
def test_fixture_matches_onnxruntime(name, target, rng):
    model = onnx.load(str(FIXTURES / f"{name}.onnx"))
    result = check_against_onnxruntime(model, feeds=_feeds(name, model, rng), target=target)
    layernorms = {n.name for n in model.graph.node if n.op_type == "LayerNormalization"}
    reducing = [d["nodes"] for d in result["manifest"]["dispatches"]
                if result["manifest"]["kernels"][d["kernel"]]["name"].startswith("reduce")]
    assert not any(layernorms & set(nodes) for nodes in reducing), reducing
    kernel_names = [k["name"] for k in result["manifest"]["kernels"]]
    assert not [k for k in kernel_names if k.startswith("softmax")], kernel_names


def _dispatches(name: str, precision: str) -> list[tuple[str, list[str]]]:
    """(kernel, ONNX nodes) of every dispatch."""
    from bundles import read_bundle
    from compiler import compile_model
    m = read_bundle(compile_model(FIXTURES / f"{name}.onnx", target="nvidia",
                                  precision=precision)).manifest
    return [(m["kernels"][d["kernel"]]["name"], d.get("nodes", [])) for d in m["dispatches"]]


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("name", SDPA)
def test_sdpa_export_fuses_as_eager(name, precision):
    """The TorchScript export of SDPA (split scale, boolean mask through Where, the IsNaN guard,
    GQA's repeated K/V heads, rotate_half's rotary embedding, RMSNorm through rsqrt) compiles to
    one attention kernel per layer, no softmax or reduction kernel, no copy kernel inside
    attention (head splits, rotary halves, repeated K/V heads), and no more kernels than the
    eager export of the same class where there is one."""
    sdpa = _dispatches(name, precision)
    kernels = [k for k, _ in sdpa]
    assert sum(k.startswith("attention") for k in kernels) == 2
    assert not [k for k in kernels if k.startswith(("softmax", "reduce"))], kernels
    copies = [nodes for k, nodes in sdpa if k.startswith(("strided_copy", "copy_slice"))]
    assert not [n for nodes in copies for n in nodes if "attn" in n or "attention" in n], copies
    eager_export = name.rsplit("_", 1)[0]
    if eager_export in MODELS:
        eager = _dispatches(eager_export, precision)
        assert len(sdpa) <= len(eager), (sdpa, eager)
