#!/usr/bin/env python3
"""The transformers side of benchmarks/lavapipe/decode.py, run by it in a venv with torch,
transformers < 5 and optimum-onnx (the one of tests/models/fixtures/make_optimum.py): a
LlamaForCausalLM with random weights saved with save_pretrained, what both systems load made from
that one folder, and the reference greedy tokens.

    python -m benchmarks.lavapipe.decode_hf --out DIR --llama-cpp SRC [--hidden 256 --layers 4 ...]

DIR/hf: the model (safetensors) and a Llama tokenizer of as many tokens as the vocabulary (<unk>,
<s>, </s>, the 256 byte tokens, then placeholders; llama.cpp's converter needs one, the token ids
are fed as they are); DIR/onnx/model.onnx: `optimum-cli export onnx --task
text-generation-with-past`; DIR/model-f32.gguf: SRC/convert_hf_to_gguf.py --outtype f32 (SRC is
vendor/llama.cpp of the llama-cpp-python sdist, which carries the matching gguf-py). Prints one
JSON object: the paths, the prompt, transformers' greedy tokens (generate with its cache) with the
top-1 minus top-2 logit margin of each step, onnxruntime's greedy tokens on the export, versions.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from benchmarks.cli import exit_on_help

if __name__ == "__main__":
    exit_on_help(__doc__)

import numpy as np


def make_tokenizer(vocab: int, folder: Path) -> None:
    """A byte-fallback BPE tokenizer as Llama 2's tokenizer.json is laid out, `vocab` tokens."""
    from tokenizers import Tokenizer, decoders, models, normalizers
    from transformers import PreTrainedTokenizerFast
    table = {"<unk>": 0, "<s>": 1, "</s>": 2}
    table.update({f"<0x{b:02X}>": 3 + b for b in range(256)})
    if vocab < len(table) + 1:
        raise SystemExit(f"error: --vocab {vocab} is below the {len(table) + 1} tokens a Llama tokenizer needs here; "
                         "give a larger --vocab.")
    table.update({f"\u2581t{i}": len(table) + i for i in range(vocab - len(table))})
    tok = Tokenizer(models.BPE(vocab=table, merges=[], unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    fast.save_pretrained(folder)


def transformers_greedy(model, prompt: list[int], steps: int) -> tuple[list[int], list[float]]:
    import torch
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), max_new_tokens=steps, min_new_tokens=steps, do_sample=False,
                             attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                             output_scores=True, return_dict_in_generate=True, pad_token_id=0)
    tokens = out.sequences[0, len(prompt):].tolist()
    margins = []
    for scores in out.scores:
        top = torch.topk(scores[0].float(), 2).values
        margins.append(float(top[0] - top[1]))
    return tokens, margins


def onnxruntime_greedy(path: Path, prompt: list[int], steps: int) -> list[int]:
    """The export's own greedy loop under onnxruntime, as the optimum fixtures check theirs."""
    from tests.models.fixtures.make_optimum import onnxruntime_greedy as greedy
    return greedy(path, steps, prompt)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--llama-cpp", required=True, type=Path, help="vendor/llama.cpp of the llama-cpp-python sdist")
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--ffn", type=int, default=768)
    p.add_argument("--vocab", type=int, default=4096)
    p.add_argument("--context", type=int, default=2048)
    p.add_argument("--prompt", type=int, default=32)
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--init-std", type=float, default=0.02, help="the weights' normal std (transformers' default 0.02)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    convert = args.llama_cpp / "convert_hf_to_gguf.py"
    if not convert.is_file():
        raise SystemExit(f"error: {convert} does not exist; --llama-cpp names the vendor/llama.cpp folder of the "
                         "unpacked llama-cpp-python sdist.")

    import optimum.exporters.onnx  # noqa: F401  (fail here, before any work, where it is missing)
    import onnxruntime
    import torch
    import transformers

    hf, onnx_dir, gguf = args.out / "hf", args.out / "onnx", args.out / "model-f32.gguf"
    torch.manual_seed(args.seed)
    config = transformers.LlamaConfig(vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.ffn,
                                      num_hidden_layers=args.layers, num_attention_heads=args.heads,
                                      num_key_value_heads=args.kv_heads, max_position_embeddings=args.context,
                                      initializer_range=args.init_std)
    model = transformers.LlamaForCausalLM(config).eval()
    model.save_pretrained(hf)
    make_tokenizer(args.vocab, hf)
    cli = Path(sys.executable).with_name("optimum-cli")
    subprocess.run([str(cli), "export", "onnx", "--model", str(hf), "--task", "text-generation-with-past",
                    str(onnx_dir)], check=True, stdout=sys.stderr)
    subprocess.run([sys.executable, str(convert), str(hf), "--outtype", "f32", "--outfile", str(gguf)],
                   check=True, stdout=sys.stderr)
    prompt = np.random.default_rng(args.seed).integers(3, args.vocab, args.prompt).tolist()
    tokens, margins = transformers_greedy(model, prompt, args.new_tokens)
    print(json.dumps({
        "hf": str(hf), "onnx": str(onnx_dir / "model.onnx"), "gguf_f32": str(gguf), "prompt": prompt,
        "params": sum(t.numel() for t in model.parameters()),
        "transformers_tokens": tokens, "transformers_margins": margins,
        "onnxruntime_tokens": onnxruntime_greedy(onnx_dir / "model.onnx", prompt, args.new_tokens),
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "onnxruntime": onnxruntime.__version__}}))


if __name__ == "__main__":
    main()
