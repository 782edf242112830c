"""Make the committed export fixtures (tests/models/fixtures/exports/): small models exported as
the zoo exports them (tools/zoo/export.py: library classes, default init unless named random,
`torch.onnx.export(opset_version=17, dynamo=False)`, the graph untouched), each under 300 KB,
with the forms real exports hold: Identity nodes between equal initializers, tied weights,
shifted windows, a static declared output compiled with batch variants.

    /work/venvs/torch/bin/python tools/zoo/make_fixtures.py [NAME ...]

Writes NAME.onnx and recipes.json (each fixture's input recipe, batch sizes and precisions, what
it covers), which tests/models/test_exports.py reads; CI needs no torch.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from export import Positional, build_hf, export
from recipe import float_input

OUT = Path(__file__).resolve().parents[2] / "tests" / "models" / "fixtures" / "exports"
MAX_BYTES = 300_000


def hf(model_type: str, class_name: str, weights: str = "default"):
    def build():
        (make,) = build_hf(model_type, class_name, weights)()
        return make()
    return build


def swin():
    """torchvision's SwinTransformer (swin_t's blocks: shifted windows, relative position bias,
    at embed 16, one stage of two blocks (the second shifted), window 2, on
    32x32 (a size over 300 KB otherwise: the exporter writes ~1,000 nodes a block): library-default init."""
    from torchvision.models.swin_transformer import SwinTransformer
    model = SwinTransformer(patch_size=[4, 4], embed_dim=16, depths=[2], num_heads=[2],
                            window_size=[2, 2], num_classes=10)
    return model, [float_input("input", [1, 3, 32, 32])], {"class": "SwinTransformer"}


def hf_swin():
    """transformers' SwinModel, the same shape as swin() (one stage of two blocks, the second
    shifted, window 2, 32x32): its own export of the windows (separate Q, K and V projections, the
    windows viewed twice, the relative position bias and window mask folded into one constant);
    library-default init. (The zoo's shrunk config does not build: docs/ZOO.md.)"""
    from transformers import SwinConfig, SwinModel
    config = SwinConfig(image_size=32, patch_size=4, embed_dim=16, depths=[2], num_heads=[2], window_size=2)
    return Positional(SwinModel(config), ["pixel_values"]), [float_input("pixel_values", [1, 3, 32, 32])], \
        {"class": "SwinModel"}


def mobilenet():
    from torchvision.models import mobilenet_v3_small
    model = mobilenet_v3_small(weights=None, width_mult=0.1, num_classes=10)
    return model, [float_input("input", [1, 3, 32, 32])], {"class": "MobileNetV3 (small, width 0.1)"}


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.Sequential(torch.nn.Linear(784, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))

    def forward(self, x):
        return self.layers(x)


def mlp():
    return MLP(), [float_input("input", [1, 784])], {"class": "MLP 784-64-10"}


class SeqFirstAttention(torch.nn.Module):
    """torch.nn.MultiheadAttention in its default sequence-first layout inside a batch-first block,
    as WavLM and other audio encoders call it: the out projection is a Gemm over [S * B, E]
    rows, viewed [S, B, E] and transposed back."""

    def __init__(self, embed: int = 32, heads: int = 2):
        super().__init__()
        self.attention = torch.nn.MultiheadAttention(embed, heads)
        self.norm = torch.nn.LayerNorm(embed)

    def forward(self, x):
        seq_first = x.transpose(0, 1)
        y, _ = self.attention(seq_first, seq_first, seq_first)   # need_weights: the bmm path
        return self.norm(x + y.transpose(0, 1))


def seq_first_attention():
    return SeqFirstAttention(), [float_input("input", [1, 6, 32])], {"class": "MultiheadAttention (seq-first)"}


# name -> (build, what it covers, None (a dynamic batch axis) or the batch variants compiled from a
# static batch-1 export)
FIXTURES = {
    "distilbert_default": (hf("distilbert", "DistilBertModel"), "Identity between equal LayerNorm "
                           "initializers (library-default init)", None),
    "gpt2_lm_tied": (hf("gpt2", "GPT2LMHeadModel"), "tied input and output embeddings; Identity of "
                     "initializers", None),
    "llama_default": (hf("llama", "LlamaModel"), "RMSNorm, rotary embedding, grouped-query attention, "
                      "causal mask; Identity of RMSNorm weights", None),
    "t5_encoder_default": (hf("t5", "T5Model"), "T5's encoder: relative position bias, RMS LayerNorm", None),
    "whisper_encoder_default": (hf("whisper", "WhisperModel"), "audio encoder: Conv1d stem, "
                                "sinusoidal positions; Identity of initializers", None),
    "vit_random": (hf("vit", "ViTModel", "random"), "ViT encoder, random weights normal(0, 0.5)", None),
    "bert_random": (hf("bert", "BertModel", "random"), "BERT, random weights normal(0, 0.5)", None),
    "swin_default": (swin, "shifted windows (Roll), relative position bias; Identity of "
                     "initializers; exported at batch 1", [1]),
    "swin_hf_default": (hf_swin, "transformers' Swin: windows viewed twice, separate Q, K and V "
                        "projections, bias and window mask one constant", None),
    "mobilenet_v3_default": (mobilenet, "depthwise convolutions, hardswish, squeeze-excitation", None),
    "mha_seq_first_default": (seq_first_attention, "nn.MultiheadAttention sequence-first in a batch-first "
                              "block (WavLM's form): the out projection's Gemm over [S * B, E] rows "
                              "between transposes", None),
    "mlp_static_out": (mlp, "a graph exported at batch 1 (declared output [1, 10]) compiled with batch "
                       "variants 1 and 4", [1, 4]),
}


def make(name: str) -> dict:
    build, covers, static = FIXTURES[name]
    torch.manual_seed(0)
    module, specs, extra = build()
    module.eval()
    path = OUT / f"{name}.onnx"
    if static:  # every shape static, the declared output [1, ...]
        torch.onnx.export(module, tuple(torch.zeros(s["shape"]) for s in specs), str(path), opset_version=17,
                          dynamo=False, input_names=[s["name"] for s in specs], output_names=["output"])
        facts = {"outputs": ["output"], "variants": static}
    else:
        facts = export(module, specs, path)
        facts["variants"] = [1, 2] if facts["dynamic_batch"] else [1]
    size = path.stat().st_size
    assert size < MAX_BYTES, f"{name}: {size} bytes, over {MAX_BYTES}"
    return {"covers": covers, "class": extra.get("class"), "inputs": specs, "bytes": size,
            "variants": facts["variants"], "outputs": facts["outputs"]}


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    recipes_path = OUT / "recipes.json"
    recipes = json.loads(recipes_path.read_text()) if recipes_path.exists() else {}
    for name in sys.argv[1:] or FIXTURES:
        recipes[name] = make(name)
        print(f"{name}: {recipes[name]['bytes']} bytes, batches {recipes[name]['variants']}")
    recipes_path.write_text(json.dumps(dict(sorted(recipes.items())), indent=1) + "\n")


if __name__ == "__main__":
    main()
