#!/usr/bin/env python3
"""On the GPU machine: the peer of benchmarks/gpu/decode.py: llama.cpp's Vulkan backend
(llama-bench) on the same Llama-3.2-1B-shaped model with random weights, as F16 and as llama.cpp's
own Q8_0 and Q4_0 quantizations, batch 1.

    source benchmarks/gpu/setup.sh
    python3 -m benchmarks.gpu.llama_cpp                                   # the full model; F16, Q8_0, Q4_0
    python3 -m benchmarks.gpu.llama_cpp --shape qwen2.5-0.5b              # Qwen2.5-0.5B's widths
    python3 -m benchmarks.gpu.llama_cpp --layers 2 --vocab 4096 --types Q4_0   # a quick check of the script

Needs .llama/llama-vulkan.tar.xz (git-ignored, carried): llama-bench and llama-quantize built with
GGML_VULKAN (cooperative-matrix shaders included) and llama.cpp's convert_hf_to_gguf.py with its
gguf-py, made on the developer machine by benchmarks/gpu/build_llama_cpp.sh; torch and transformers.
Steps, in a temporary folder (removed at the end unless --keep):
  model: LlamaForCausalLM as decode.py's torch side configures it (--shape; default Llama-3.2-1B's widths:
      hidden 2048, 16 layers, 32 heads, 8 KV heads, FFN 8192, vocab 128256, tied embeddings, rope
      theta 10000), transformers' default init after torch.manual_seed(--seed), save_pretrained in
      fp16 (safetensors) with a byte-fallback tokenizer of as many tokens
      (benchmarks/lavapipe/decode_hf.make_tokenizer; the converter needs one);
  convert_hf_to_gguf.py --outtype f16, then `llama-quantize F16.gguf OUT.gguf TYPE` for Q8_0 and
      Q4_0: llama.cpp's default mix for the type (the tied embedding, which is also the LM head,
      goes to Q6_K for Q4_0 as llama.cpp does it for any model without an output.weight); the
      file's tensor types are read back with gguf-py and listed per tensor name (blk.N -> blk.*);
  llama-bench -m FILE -ngl 99 -p 512 -n 32 -d 0,128,2048 -r 5 -fa auto -o json: all layers on the
      GPU, flash attention llama.cpp's default (auto), its default batch sizes and f16 KV cache; each
      test repeated 5 times after a warm-up, llama-bench's mean tokens/s:
    prefill tokens/s: pp512 at depth 0 (a 512-token prompt into an empty cache);
    decode tokens/s at C: tg32 at depth C: 32 single-token steps after a C-token context (the
      cache filled first, not timed), so attention reads C+1 .. C+32 cache rows; the mean over
      the 32 steps, each a llama_decode of one token that waits for its full logits (the vocabulary's
      floats back on the host; vkc's decode.py copies back the argmax only), the next token random;
    every test llama-bench ran (pp512 and tg32 at each depth) is kept under "tests"; a llama-bench
      killed by a signal is run once more (--retries; on lavapipe, Mesa 22.3's queue thread at times
      segfaults under it), the crash noted in "crashed_runs".
ggml-vulkan leaves out devices of CPU type (lavapipe) unless GGML_VK_VISIBLE_DEVICES=0 is set.
Prints one JSON object per line (flushed): the setup (times to build, convert; the Vulkan device),
then one per type; the whole also to --json (default $OUT/llama_cpp.json when $OUT is set).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from benchmarks.cli import REPO, exit_on_help, vkc_commit
from benchmarks.gpu.llama_widths import add_width_arguments, parse_widths

if __name__ == "__main__":
    exit_on_help(__doc__)

ARCHIVE = REPO / ".llama" / "llama-vulkan.tar.xz"
BUILD_HINT = ("build it on the developer machine with `bash benchmarks/gpu/build_llama_cpp.sh` and carry .llama "
              "to the GPU machine")


def fail(message: str) -> None:
    print(f"error: {message}", file=sys.stderr, flush=True)
    sys.exit(1)


def emit(record: dict) -> None:
    print(json.dumps(record), flush=True)


def tail(text: str, lines: int = 3) -> str:
    """The last lines of a tool's output, less ggml_vulkan's device report (printed by every run)."""
    kept = [line.strip() for line in text.strip().splitlines() if line.strip() and not line.startswith("ggml_vulkan:")]
    return " | ".join(kept[-lines:])


def run(cmd: list, what: str, timeout: float, retries: int = 0, crashes: list | None = None) -> subprocess.CompletedProcess:
    """Run a tool; one killed by a signal is run again up to `retries` times, each crash noted in `crashes`."""
    while True:
        try:
            r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            fail(f"{what} ran past {timeout:.0f} s: `{' '.join(map(str, cmd))}`")
        if r.returncode >= 0 or retries <= 0:
            break
        retries -= 1
        if crashes is not None:
            crashes.append(f"signal {-r.returncode}: {tail(r.stderr, 1)}")
        print(f"{what}: killed by signal {-r.returncode} ({tail(r.stderr, 1)}); running it again", file=sys.stderr,
              flush=True)
    if r.returncode != 0:
        hint = ""
        if "libvulkan.so.1" in r.stderr:
            hint = " (no Vulkan loader: `source benchmarks/gpu/setup.sh` first)"
        status = f"signal {-r.returncode}" if r.returncode < 0 else f"exit {r.returncode}"
        fail(f"{what} failed ({status}){hint}: {tail(r.stderr or r.stdout)}")
    return r


def unpack(folder: Path) -> Path:
    if not ARCHIVE.is_file():
        fail(f"{ARCHIVE.relative_to(REPO)} missing: {BUILD_HINT}")
    root = folder / "llama"
    with tarfile.open(ARCHIVE) as tar:
        tar.extractall(root, filter="data")
    for part in ("bin/llama-bench", "bin/llama-quantize", "convert_hf_to_gguf.py", "gguf-py"):
        if not (root / part).exists():
            fail(f"{ARCHIVE.relative_to(REPO)} lacks {part}: {BUILD_HINT}")
    return root


def vulkan_devices(root: Path) -> list[str]:
    """llama-bench --list-devices: the Vulkan devices ggml found (a CPU-only run would time the CPU)."""
    r = run([root / "bin" / "llama-bench", "--list-devices"], "llama-bench --list-devices", 300)
    # "Vulkan0: NAME (MiB, MiB free)", and ggml_vulkan's own line per device: fp16, warp size, int dot and
    # which matrix cores (KHR_coopmat, NV_coopmat2 or none) its kernels use
    devices = [line.strip() for line in r.stdout.splitlines() if re.match(r"\s*Vulkan\d+:", line)]
    devices += [line.strip() for line in (r.stdout + r.stderr).splitlines() if re.match(r"ggml_vulkan: \d+ = ", line)]
    if not any(d.startswith("Vulkan") for d in devices):
        fail("llama.cpp found no Vulkan device (`llama-bench --list-devices` lists none): "
             f"`source benchmarks/gpu/setup.sh` first, or check VK_DRIVER_FILES; it said: {tail(r.stdout + r.stderr)}")
    return devices


def build_model(args, hf: Path) -> int:
    try:
        import torch
        from transformers import LlamaConfig, LlamaForCausalLM
    except ImportError as e:
        fail(f"torch and transformers are needed to build the model ({e}): run on the GPU machine's Python")
    from benchmarks.lavapipe.decode_hf import make_tokenizer
    torch.manual_seed(args.seed)
    config = LlamaConfig(vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.ffn,
                         num_hidden_layers=args.layers, num_attention_heads=args.heads,
                         num_key_value_heads=args.kv_heads, max_position_embeddings=args.context,
                         tie_word_embeddings=True)
    model = LlamaForCausalLM(config).to(torch.float16).eval()
    params = sum(t.numel() for t in model.parameters())
    model.save_pretrained(hf)
    make_tokenizer(args.vocab, hf)
    return params


def tensor_types(root: Path, path: Path) -> dict:
    """The GGUF's tensors: per name (blk.N -> blk.*), the types they have; per type, count and bytes."""
    sys.path.insert(0, str(root / "gguf-py"))
    from gguf import GGUFReader
    names: dict[str, set] = {}
    totals: dict[str, list] = {}
    for t in GGUFReader(path).tensors:
        kind = t.tensor_type.name
        names.setdefault(re.sub(r"^blk\.\d+\.", "blk.*.", t.name), set()).add(kind)
        row = totals.setdefault(kind, [0, 0])
        row[0] += 1
        row[1] += int(t.n_bytes)
    return {"by_name": {k: "/".join(sorted(v)) for k, v in names.items()},
            "by_type": {k: {"tensors": n, "bytes": b} for k, (n, b) in totals.items()}}


def bench(args, root: Path, path: Path) -> dict:
    depths = sorted({0, *args.depths})
    cmd = [root / "bin" / "llama-bench", "-m", path, "-ngl", "99", "-p", str(args.prompt), "-n", str(args.gen),
           "-d", ",".join(map(str, depths)), "-r", str(args.repeat), "-fa", args.flash_attn, "-o", "json"]
    t0 = time.perf_counter()
    crashes: list[str] = []
    r = run(cmd, f"llama-bench on {path.name}", args.timeout, retries=args.retries, crashes=crashes)
    seconds = time.perf_counter() - t0
    try:
        tests = json.loads(r.stdout)
    except json.JSONDecodeError:
        fail(f"llama-bench on {path.name} printed no JSON: {tail(r.stdout + r.stderr)}")
    if not tests:
        fail(f"llama-bench on {path.name} ran no test: {tail(r.stderr)}")
    # ggml_vulkan's own line: device, fp16, warp size, int dot, and which matrix cores it uses
    vk_line = next((m.group(1).strip() for m in map(re.compile(r"ggml_vulkan: 0 = (.*)").match, r.stderr.splitlines())
                    if m), None)
    first = tests[0]
    out = {"device": first.get("gpu_info"), "ggml_vulkan": vk_line, "backends": first.get("backends"),
           "build_commit": first.get("build_commit"), "build_number": first.get("build_number"),
           "flash_attn": args.flash_attn, "n_batch": first.get("n_batch"), "n_ubatch": first.get("n_ubatch"),
           "type_k": first.get("type_k"), "model_size_bytes": first.get("model_size"),
           "model_n_params": first.get("model_n_params"), "llama_bench_s": seconds,
           "command": " ".join(["llama-bench", *map(str, cmd[1:])]), "crashed_runs": crashes}
    if not first.get("gpu_info") or "Vulkan" not in str(first.get("backends")):
        fail(f"llama-bench ran {path.name} without a Vulkan device (backends {first.get('backends')!r}, "
             "gpu_info empty): `source benchmarks/gpu/setup.sh` first")
    for t in tests:
        if t["n_prompt"] == args.prompt and t["n_gen"] == 0 and t["n_depth"] == 0:
            out[f"prefill_tokens_per_s_at_{args.prompt}"] = t["avg_ts"]
        if t["n_prompt"] == 0 and t["n_gen"] == args.gen and t["n_depth"] in args.depths:
            out[f"decode_tokens_per_s_at_{t['n_depth']}"] = t["avg_ts"]
            out[f"decode_ms_at_{t['n_depth']}"] = 1e3 / t["avg_ts"]
    out["tests"] = [{"test": (f"pp{t['n_prompt']}" if t["n_prompt"] else f"tg{t['n_gen']}") + f"@d{t['n_depth']}",
                     "tokens_per_s": t["avg_ts"], "stddev_tokens_per_s": t["stddev_ts"]} for t in tests]
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_width_arguments(p)
    p.add_argument("--context", type=int, default=4096,
                   help="max_position_embeddings: GGUF metadata only (llama-bench sizes each test's context)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--types", default="F16,Q8_0,Q4_0",
                   help="comma-separated: F16 (the converted file) and llama-quantize types (Q8_0, Q4_0, Q4_K_M, ...)")
    p.add_argument("--prompt", type=int, default=512, help="prefill test: llama-bench -p")
    p.add_argument("--gen", type=int, default=32, help="decode test: llama-bench -n, tokens per run")
    p.add_argument("--depths", type=int, nargs="+", default=[128, 2048], help="decode contexts: llama-bench -d")
    p.add_argument("--repeat", type=int, default=5, help="llama-bench -r")
    p.add_argument("--flash-attn", default="auto", choices=["auto", "on", "off"],
                   help="llama-bench -fa (auto, llama.cpp's default: on where the backend supports the shapes)")
    p.add_argument("--timeout", type=float, default=900, help="seconds per llama-bench / llama-quantize / convert run")
    p.add_argument("--retries", type=int, default=1,
                   help="llama-bench runs killed by a signal are run again this often (each noted in crashed_runs)")
    p.add_argument("--keep", action="store_true", help="keep the temporary folder (its path is printed)")
    p.add_argument("--json", default=os.path.join(os.environ["OUT"], "llama_cpp.json") if os.environ.get("OUT") else None)
    args = parse_widths(p)
    types = [t.strip().upper() for t in args.types.split(",") if t.strip()]
    if not types:
        fail("--types names no type: give e.g. --types F16,Q8_0,Q4_0")

    folder = Path(tempfile.mkdtemp(prefix="llama_cpp_"))
    try:
        t0 = time.perf_counter()
        root = unpack(folder)
        setup = {"config": {k: v for k, v in vars(args).items() if k != "json"}, "vkc_commit": vkc_commit(),
                 "llama_cpp": (root / "COMMIT").read_text().strip() if (root / "COMMIT").is_file() else None,
                 "vulkan_devices": vulkan_devices(root), "unpack_s": time.perf_counter() - t0}
        if args.keep:
            setup["folder"] = str(folder)
        hf = folder / "hf"
        t0 = time.perf_counter()
        setup["params"] = build_model(args, hf)
        setup["model_build_s"] = time.perf_counter() - t0
        f16 = folder / "model-F16.gguf"
        t0 = time.perf_counter()
        run([sys.executable, root / "convert_hf_to_gguf.py", hf, "--outtype", "f16", "--outfile", f16],
            "convert_hf_to_gguf.py", args.timeout)
        setup["convert_s"] = time.perf_counter() - t0
        shutil.rmtree(hf)
        emit({"setup": setup})
        result = {"setup": setup, "llama_cpp": {}}
        for kind in types:
            path, row = f16, {}
            if kind != "F16":
                path = folder / f"model-{kind}.gguf"
                t0 = time.perf_counter()
                run([root / "bin" / "llama-quantize", f16, path, kind], f"llama-quantize to {kind}", args.timeout)
                row["quantize_s"] = time.perf_counter() - t0
            row["file_bytes"] = path.stat().st_size
            row["tensor_types"] = tensor_types(root, path)
            row.update(bench(args, root, path))
            if kind != "F16":
                path.unlink()
            result["llama_cpp"][kind] = row
            emit({kind: row})
        if args.json:
            Path(args.json).write_text(json.dumps(result, indent=1))
    finally:
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
