#!/usr/bin/env python3
"""The llama.cpp side of benchmarks/lavapipe/decode.py, run by it in a venv with llama-cpp-python
built from its sdist (the default CPU backend): the F32 GGUF quantized to each type asked, then
greedy decoding timed on the CPU.

    python -m benchmarks.lavapipe.decode_llamacpp --gguf DIR/model-f32.gguf --prompt 5,17,... \\
        [--new-tokens 64] [--types F32,F16,Q8_0,Q4_0] [--threads 2] [--repeat 5]

Each type comes from the F32 file through llama.cpp's own quantizer (llama_model_quantize,
`pure`: every 2-D weight the type asked, the LM head and the token embedding included; norms stay
F32). Context: n_batch and n_ubatch hold the whole prompt (one prefill pass), the KV cache F32 for
F32 and llama.cpp's default F16 otherwise. Each repeat: cache cleared, llama_perf reset, the prompt
evaluated, then new-tokens - 1 single-token evaluations, each token picked by llama.cpp's greedy
sampler. Figures are llama.cpp's own (llama_perf_context: prompt eval time and count, eval time
and count), the median over repeats; the wall times of the same calls from Python are kept beside
them. Prints one JSON object: per type the file size, tokens and figures, plus llama.cpp's system
info.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from benchmarks.cli import exit_on_help

if __name__ == "__main__":
    exit_on_help(__doc__)

FTYPES = {"F32": "LLAMA_FTYPE_ALL_F32", "F16": "LLAMA_FTYPE_MOSTLY_F16", "Q8_0": "LLAMA_FTYPE_MOSTLY_Q8_0",
          "Q4_0": "LLAMA_FTYPE_MOSTLY_Q4_0"}


def quantize(llama_cpp, source: Path, kind: str, threads: int) -> Path:
    if kind == "F32":
        return source
    out = source.with_name(f"model-{kind.lower()}.gguf")
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, FTYPES[kind])
    params.nthread = threads
    params.pure = True
    if llama_cpp.llama_model_quantize(str(source).encode(), str(out).encode(), params) != 0:
        raise SystemExit(f"error: llama_model_quantize to {kind} failed for {source}")
    return out


def timed(llama_cpp, llm, prompt: list[int], new_tokens: int) -> dict:
    """One greedy generation from a cleared cache: llama.cpp's own times and the wall times."""
    sampler = llama_cpp.llama_sampler_init_greedy()
    try:
        llm.reset()
        llama_cpp.llama_perf_context_reset(llm.ctx)
        t0 = time.perf_counter()
        llm.eval(prompt)
        tokens = [llama_cpp.llama_sampler_sample(sampler, llm.ctx, -1)]
        t1 = time.perf_counter()
        for _ in range(new_tokens - 1):
            llm.eval([tokens[-1]])
            tokens.append(llama_cpp.llama_sampler_sample(sampler, llm.ctx, -1))
        t2 = time.perf_counter()
        perf = llama_cpp.llama_perf_context(llm.ctx)
    finally:
        llama_cpp.llama_sampler_free(sampler)
    if perf.n_p_eval != len(prompt) or perf.n_eval != new_tokens - 1:
        raise SystemExit(f"error: llama_perf counted {perf.n_p_eval} prompt and {perf.n_eval} eval tokens, not "
                         f"{len(prompt)} and {new_tokens - 1}: the figures would not be of this run.")
    return {"tokens": tokens, "prefill_ms": perf.t_p_eval_ms, "decode_ms": perf.t_eval_ms,
            "wall_prefill_ms": 1e3 * (t1 - t0), "wall_decode_ms": 1e3 * (t2 - t1)}


def figures(llama_cpp, path: Path, kind: str, args, prompt: list[int]) -> dict:
    from llama_cpp import Llama
    kv = {"type_k": 0, "type_v": 0} if kind == "F32" else {}  # GGML_TYPE_F32; else llama.cpp's default
    llm = Llama(model_path=str(path), n_ctx=len(prompt) + args.new_tokens + 16, n_batch=len(prompt),
                n_ubatch=len(prompt), n_threads=args.threads, n_threads_batch=args.threads, verbose=False, **kv)
    try:
        timed(llama_cpp, llm, prompt, args.new_tokens)  # warm-up
        runs = [timed(llama_cpp, llm, prompt, args.new_tokens) for _ in range(args.repeat)]
    finally:
        llm.close()
    n = len(prompt)
    out = {"file": path.name, "file_bytes": path.stat().st_size, "tokens": runs[0]["tokens"],
           "tokens_stable": all(r["tokens"] == runs[0]["tokens"] for r in runs), "repeat": args.repeat,
           "kv_cache": "F32" if kv else "F16"}
    for key, count in [("prefill", n), ("decode", args.new_tokens - 1)]:
        ms = [r[f"{key}_ms"] for r in runs]
        wall = [r[f"wall_{key}_ms"] for r in runs]
        out[f"{key}_tokens_per_s"] = 1e3 * count / statistics.median(ms)
        out[f"{key}_tokens_per_s_runs"] = [1e3 * count / t for t in ms]
        out[f"wall_{key}_tokens_per_s"] = 1e3 * count / statistics.median(wall)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gguf", required=True, type=Path, help="the F32 GGUF (convert_hf_to_gguf.py --outtype f32)")
    p.add_argument("--prompt", required=True, help="the prompt's token ids: ID,ID,...")
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--types", default="F32,F16,Q8_0,Q4_0")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args()
    kinds = args.types.split(",")
    if unknown := [k for k in kinds if k not in FTYPES]:
        raise SystemExit(f"error: --types {','.join(unknown)} unknown; choose from {','.join(FTYPES)}.")
    if args.new_tokens < 2:
        raise SystemExit("error: --new-tokens must be at least 2 (one from the prefill, one decode step or more).")
    prompt = [int(t) for t in args.prompt.split(",")]

    import llama_cpp
    llama_cpp.llama_backend_init()
    result = {"llama_cpp_python": llama_cpp.__version__,
              "system_info": llama_cpp.llama_print_system_info().decode().strip(), "types": {}}
    for kind in kinds:
        result["types"][kind] = figures(llama_cpp, quantize(llama_cpp, args.gguf, kind, args.threads), kind, args,
                                        prompt)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
