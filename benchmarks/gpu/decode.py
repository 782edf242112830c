#!/usr/bin/env python3
"""On the GPU machine: decoding with the KV cache as bundle state, batch 1, host to host, against
PyTorch + transformers `generate` (eager, dynamic cache) on the same model shape, in one run.

    source benchmarks/gpu/setup.sh
    python3 -m benchmarks.gpu.decode                                # Llama-3.2-1B shape, fp16
    python3 -m benchmarks.gpu.decode --shape qwen2.5-0.5b           # Qwen2.5-0.5B's widths
    python3 -m benchmarks.gpu.decode --layers 2 --vocab 1024        # a quick check of the script

The model is tests/llm_models.tiny_llama at the given widths (--shape, benchmarks/gpu/llama_widths.py;
default Llama-3.2-1B's: hidden 2048, 16 layers, 32 heads, 8 KV heads, FFN 8192, vocab 128256, tied
embeddings), random weights, ONNX's in-place cache form (TensorScatter + Attention with
nonpad_kv_seqlen), written with external data and compiled by vkc here with variants
input_ids=1xPREFILL and 1x1 (`--precision`, default fp16) and `--argmax-output logits` (a greedy
step copies back one token id), once per --weights format (float:
the precision's; int8, int4 and int4-sym: `vkc compile --weights`, block-wise as MatMulNBits stores
them), and per --kv-caches format (float: the precision's; int8: `vkc compile --kv-cache int8`);
--nbits-staged-groups G ... gives int8/int4 a row per value of compiler/lower/matmul_nbits.py's
STAGED_GROUPS (0: its unstaged GEMV). The bundles compile side by side, a process each; then each runs
alone.
Figures:
  decode tokens/s at context C: one decode run (input_ids [1, 1], position C) repeated, median wall
      time per run, for each --contexts C: attention reads C + 1 cache rows;
  prefill tokens/s: one run of PREFILL tokens at position 0 that copies back the next token's id (as
      generate's last prompt chunk does; the prompt's logits, PREFILL x vocab floats, stay on the GPU);
  generate: Model.generate over --new-tokens greedy tokens from a PREFILL-token prompt (wall time,
      prefill included), as a user sees it;
  decode profile: the decode step's GPU time per kernel (dispatches, us, GB/s), from Model.profile
      (a barrier between dispatches there, so the sum exceeds a run's time);
  decode schedule: the decode step's dispatches, the barriers before them, and each kernel's
      dispatches (--schedule-only: this alone, compiled for --target, no run: any machine);
  memory bound: the bytes of the float weights read once per token (embedding rows excluded, the LM
      head included) over the card's bandwidth (--bandwidth, GB/s); int8 and int4 read about 1/2 and
      1/4 of them (plus their scales).
torch: LlamaForCausalLM of the same config in the same dtype on CUDA, `generate(do_sample=False,
min/max_new_tokens=N)` from the same prompt length, eager with the default dynamic cache: decode
tokens/s = N / (time(N + 1 tokens) - time(1 token)); with --torch-compile also with transformers'
static cache and the forward under torch.compile(mode="reduce-overhead") (a failure is its row).
Absent transformers, the row says so.
JSON to --json (default $OUT/decode.json when $OUT is set).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

from benchmarks.cli import exit_on_help
from benchmarks.gpu.llama_widths import add_width_arguments, parse_widths

if __name__ == "__main__":
    exit_on_help(__doc__)

import numpy as np
import onnx

from bundles import read_bundle
from bundles.manifest import variant_views
from compiler.compile import compile_model
from compiler.lower import matmul_nbits
from compiler.host import warm_up
from runtime_min import load
from tests.llm_models import tiny_llama


def _median_run(model, feeds, repeat: int, fetch=None) -> float:
    for _ in range(3):
        model.run(feeds, fetch=fetch)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        model.run(feeds, fetch=fetch)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def step_schedule(bundle: bytes | Path) -> dict:
    """The decode step's (the input_ids=1x1 variant's) dispatches, the barriers before them, and
    the dispatches of each kernel."""
    with read_bundle(bundle) as b:
        views = variant_views(b.manifest)
        step = next(v for v in views if len(views) == 1 or "input_ids=1x1" in v.get("name", ""))
        names = [step["kernels"][d["kernel"]]["name"] for d in step["dispatches"]]
        return {"dispatches": len(names), "barriers": sum(bool(d["barrier"]) for d in step["dispatches"]),
                "kernels": dict(Counter(names).most_common())}


def compile_bundle(args, path: Path, weights: str, kv_cache: str, staged_groups, folder: Path) -> tuple[Path, float]:
    """One bundle of the model at `path` into `folder` (a worker process's job: the compiles run side
    by side); its path and the compile's seconds."""
    if staged_groups is not None:
        matmul_nbits.STAGED_GROUPS = staged_groups
    t0 = time.perf_counter()
    bundle = compile_model(str(path), variants=[{"input_ids": [1, args.prefill]}, {"input_ids": [1, 1]}],
                           target=args.target, precision=args.precision,
                           weights=None if weights == "float" else weights, argmax_output="logits",
                           kv_cache=None if kv_cache == "float" else kv_cache)
    out = folder / f"{weights}-{kv_cache}-{staged_groups}.vkb"
    out.write_bytes(bundle)
    return out, time.perf_counter() - t0


def vkc_figures(args, bundle_path: Path, compiled: float) -> dict:
    out = {"compile_s": compiled, "bundle_bytes": bundle_path.stat().st_size,
           "decode_schedule": step_schedule(bundle_path)}
    with load(bundle_path) as model:
        out["device"] = model.device_name
        prompt = np.random.default_rng(0).integers(0, args.vocab, (1, args.prefill))
        token = np.array([[1]], np.int64)
        # the GPU idled while the model compiled: at its working clocks before anything is timed
        warm_up(model, {"input_ids": prompt, "position": np.array([0])})
        # as generate's prefill runs: the next token's id comes back, not the prompt's logits
        t = _median_run(model, {"input_ids": prompt, "position": np.array([0])}, max(3, args.repeat // 10),
                        fetch=["logits_argmax"])
        out["prefill_tokens_per_s"] = args.prefill / t
        for c in args.contexts:
            # as a greedy generate step runs: the token id comes back, not the logits
            t = _median_run(model, {"input_ids": token, "position": np.array([c])}, args.repeat,
                            fetch=["logits_argmax"])
            out[f"decode_ms_at_{c}"] = 1e3 * t
            out[f"decode_tokens_per_s_at_{c}"] = 1 / t
        # Where a decode step's GPU time goes: per kernel, summed over its dispatches.
        by_kernel: dict[str, list] = {}
        step = {"input_ids": token, "position": np.array([args.contexts[0]])}
        for d in model.profile(step, repeat=10):
            row = by_kernel.setdefault(d.kernel, [0, 0.0, 0])
            row[0] += 1
            row[1] += d.seconds
            row[2] += d.bytes
        out["decode_profile"] = sorted(([k, n, 1e6 * t, b / t / 1e9 if t else 0.0] for k, (n, t, b) in by_kernel.items()),
                                       key=lambda r: -r[2])
        out["decode_gpu_us"] = sum(r[2] for r in out["decode_profile"])
        t0 = time.perf_counter()
        tokens = list(model.generate(prompt[0], args.new_tokens))
        out["generate_tokens_per_s"] = len(tokens) / (time.perf_counter() - t0)
    return out


def torch_figures(args) -> dict:
    try:
        import torch
        from transformers import LlamaConfig, LlamaForCausalLM
    except ImportError as e:
        return {"error": f"not available here ({e})"}
    dtype = torch.float16 if args.precision == "fp16" else torch.float32
    config = LlamaConfig(vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.ffn,
                         num_hidden_layers=args.layers, num_attention_heads=args.heads,
                         num_key_value_heads=args.kv_heads, max_position_embeddings=args.context,
                         tie_word_embeddings=True)
    model = LlamaForCausalLM(config).to("cuda", dtype).eval()
    prompt = torch.randint(0, args.vocab, (1, args.prefill), device="cuda")

    def timed(n: int) -> float:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.no_grad():
            model.generate(prompt, do_sample=False, min_new_tokens=n, max_new_tokens=n, pad_token_id=0)
        torch.cuda.synchronize()
        return time.perf_counter() - t0

    def figures() -> dict:
        timed(4)
        one, many = min(timed(1) for _ in range(3)), min(timed(args.new_tokens + 1) for _ in range(3))
        return {"decode_tokens_per_s": args.new_tokens / (many - one),
                "generate_tokens_per_s": (args.new_tokens + 1) / many}

    out = {"torch": torch.__version__, "eager": figures()}
    if args.torch_compile:
        # transformers' static cache with the forward compiled (CUDA graphs: mode reduce-overhead)
        try:
            model.generation_config.cache_implementation = "static"
            model.forward = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)
            out["static_compile"] = figures()
        except Exception as e:   # noqa: BLE001 (the peer's failure is a row of the table)
            out["static_compile"] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_width_arguments(p)
    p.add_argument("--context", type=int, default=2304)
    p.add_argument("--prefill", type=int, default=512)
    p.add_argument("--contexts", type=int, nargs="+", default=[128, 2048])
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--repeat", type=int, default=50)
    p.add_argument("--precision", default="fp16")
    p.add_argument("--weights", nargs="+", default=["float", "int8", "int4"],
                   help="vkc's weight formats, each compiled and timed: float (--precision's), int8, int4")
    p.add_argument("--kv-caches", nargs="+", default=["float"],
                   help="vkc's KV cache formats, each compiled and timed with every --weights: float (the "
                        "precision's), int8 (`vkc compile --kv-cache int8`)")
    p.add_argument("--nbits-staged-groups", type=int, nargs="+", default=[matmul_nbits.STAGED_GROUPS],
                   help="--weights int8/int4: matmul_nbits' STAGED_GROUPS (0: its unstaged kernel), each its own row")
    p.add_argument("--torch-compile", action="store_true",
                   help="also time torch with transformers' static cache and torch.compile (reduce-overhead)")
    p.add_argument("--target", default="host")
    p.add_argument("--bandwidth", type=float, default=3350.0, help="GB/s of the card (H100 SXM: 3350)")
    p.add_argument("--skip-torch", action="store_true")
    p.add_argument("--json", default=os.path.join(os.environ["OUT"], "decode.json") if os.environ.get("OUT") else None)
    p.add_argument("--schedule-only", action="store_true",
                   help="compile the decode step alone (for --target; any machine) and print its schedule: no run")
    args = parse_widths(p)
    t0 = time.perf_counter()
    model = tiny_llama(vocab=args.vocab, hidden=args.hidden, layers=args.layers, heads=args.heads,
                       kv_heads=args.kv_heads, ffn=args.ffn, context=args.context, tied=True)
    folder = Path(tempfile.mkdtemp())
    path = folder / "llama.onnx"
    onnx.save(model, path, save_as_external_data=True, location="llama.data")
    print(f"model built in {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    if args.schedule_only:
        for w in args.weights:
            bundle = compile_model(str(path), variants=[{"input_ids": [1, 1]}], target=args.target,
                                   precision=args.precision, weights=None if w == "float" else w,
                                   argmax_output="logits")
            print(json.dumps({w: step_schedule(bundle)}), flush=True)
        return
    head = args.hidden // args.heads
    per_layer = args.hidden * (2 * args.hidden + 2 * args.kv_heads * head) + 3 * args.hidden * args.ffn
    weights = args.layers * per_layer + args.vocab * args.hidden
    itemsize = 2 if args.precision == "fp16" else 4
    result = {"config": {k: v for k, v in vars(args).items() if k != "json"},
              "weights_read_per_token_bytes": weights * itemsize,
              "memory_bound_tokens_per_s": args.bandwidth * 1e9 / (weights * itemsize)}
    result["vkc"] = {}
    rows = {}
    for w in args.weights:
        for cache in args.kv_caches:
            for groups in args.nbits_staged_groups if w != "float" else [None]:
                key = w if cache == "float" else f"{w}, {cache} cache"
                if groups is not None and len(args.nbits_staged_groups) > 1:
                    key += f", staged groups {groups}"
                rows[key] = (w, cache, groups)
    # the compiles side by side (each single-threaded), then the runs one after another
    with ProcessPoolExecutor(max(1, min(len(rows), os.cpu_count() or 1)), mp_context=get_context("fork")) as pool:
        jobs = {key: pool.submit(compile_bundle, args, path, *row, folder) for key, row in rows.items()}
        compiled = {key: job.result() for key, job in jobs.items()}
    print(f"compiled in {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    for key, (bundle_path, seconds) in compiled.items():
        result["vkc"][key] = vkc_figures(args, bundle_path, seconds)
        bundle_path.unlink()
        print(json.dumps({key: result["vkc"][key]}), file=sys.stderr, flush=True)
    result["torch"] = {"skipped": True} if args.skip_torch else torch_figures(args)
    print(json.dumps(result, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
