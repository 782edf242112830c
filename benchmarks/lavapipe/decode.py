#!/usr/bin/env python3
"""Greedy decoding of tiny Llama models on lavapipe against llama.cpp's CPU backend on the same
cores, one set of weights for both, in one run.

    python -m benchmarks.lavapipe.decode                       # sizes tiny and small, 5 rounds
    python -m benchmarks.lavapipe.decode --sizes tiny --rounds 1 --repeat 1 --new-tokens 16   # a quick check

Per size (--sizes; SIZES below): a transformers LlamaForCausalLM with random weights (its own init,
untied LM head) is saved with save_pretrained, then (benchmarks/lavapipe/decode_hf.py, in the
--hf-python venv) exported by `optimum-cli export onnx --task text-generation-with-past` for vkc and
converted by llama.cpp's convert_hf_to_gguf.py to an F32 GGUF; its transformers greedy tokens from
a random prompt of --prompt tokens are the reference (onnxruntime's greedy tokens on the export
too). Rows, vkc and llama.cpp paired: fp32 / F32, fp16 / F16, int8 / Q8_0, int4 / Q4_0.
  vkc: the export compiled here with `--max-context P+N --variant input_ids=1xP --variant
      input_ids=1x1 --argmax-output logits --target host` and `--precision fp16` or `--weights
      int8|int4` (block 32; int4 asymmetric with a zero point, Q4_0 symmetric), loaded with every
      pipeline built, one warm-up; a figure is Model.generate's wall time, as `vkc generate`
      reports it: prefill tokens/s = P / (time to the first token), decode tokens/s = (N - 1) /
      (time from the first token to the last). Then one decode step alone: its wall time and, from
      Model.profile, its dispatches and each kernel's time (in the JSON).
  llama.cpp: llama-cpp-python built from its sdist with the default CPU backend, in the
      --llamacpp-python venv (benchmarks/lavapipe/decode_llamacpp.py: each type quantized from the
      F32 file by llama.cpp, n_threads 2, the prompt in one batch, greedy sampler); figures are
      its own timings (llama_perf_context: prompt eval and eval), which leave out Python's loop.
Each of --rounds runs llama.cpp (all types) and then vkc (all rows), --repeat generations each,
each system after waiting for a quiet machine (--quiet, --quiet-wait); a figure is the median over
all of them, so that load from other processes hits both alike, and the best is kept beside it.
The share of the CPU other processes took while each system ran is in the JSON.
Agreement: how many leading greedy tokens equal transformers' (of the first 16 and of all N); on
random weights the top two logits are often close (the JSON keeps each step's margin), so the
lower precisions may part from the reference at a near-tie.

Set up once (the model's side needs torch and transformers < 5; llama-cpp-python compiles for
about 30 minutes on 2 cores):

    python3.11 -m venv /work/venvs/optimum
    /work/venvs/optimum/bin/pip install optimum-onnx "transformers<5" torch onnxruntime sentencepiece
    python3.11 -m venv /work/venvs/llamacpp
    cd /work/venvs && llamacpp/bin/pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36 -d llamacpp-src
    tar xzf llamacpp-src/llama_cpp_python-0.3.36.tar.gz -C llamacpp-src
    CMAKE_BUILD_PARALLEL_LEVEL=2 llamacpp/bin/pip install llamacpp-src/llama_cpp_python-0.3.36.tar.gz

Prints the table (benchmarks/report.py renders it) and writes everything to --json.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.cli import command_line, exit_on_help, vkc_commit

if __name__ == "__main__":
    exit_on_help(__doc__)

import numpy as np

REPO = Path(__file__).resolve().parents[2]
VENVS = Path("/work/venvs")
# hidden, layers, heads, KV heads, FFN, vocabulary
SIZES = {"tiny": dict(hidden=256, layers=4, heads=4, kv_heads=2, ffn=768, vocab=4096),
         "small": dict(hidden=512, layers=8, heads=8, kv_heads=2, ffn=1536, vocab=8192)}
# vkc (precision, weights) and the llama.cpp type of the same row
ROWS = {"fp32": ("fp32", None, "F32"), "fp16": ("fp16", None, "F16"), "int8": ("fp32", "int8", "Q8_0"),
        "int4": ("fp32", "int4", "Q4_0")}
CHECKED = 16  # leading tokens the agreement column counts


def log(*a) -> None:
    print(*a, file=sys.stderr, flush=True)


def leading_equal(tokens: list[int], reference: list[int]) -> int:
    """How many leading tokens equal the reference's: after the first difference the two
    sequences continue from different contexts, so later tokens say nothing more."""
    n = 0
    for a, b in zip(tokens, reference):
        if a != b:
            break
        n += 1
    return n


def agreement(tokens: list[int], reference: list[int], margins: list[float]) -> dict:
    """Leading tokens equal to the reference, of the first CHECKED and of all, and the reference's
    top-1 minus top-2 logit margin where they part (a near-tie there explains a flip)."""
    n = leading_equal(tokens, reference)
    out = {"leading_equal": n, "checked": CHECKED, "equal_in_checked": min(n, CHECKED),
           "compared": min(len(tokens), len(reference))}
    if n < out["compared"]:
        out["reference_margin_at_split"] = margins[n]
    return out


def summarize(samples: list[tuple[float, float]], prompt: int, new_tokens: int) -> dict:
    """Median and best prefill and decode tokens/s over (prefill seconds, decode seconds) samples."""
    out = {}
    for key, count, times in [("prefill", prompt, [p for p, _ in samples]),
                              ("decode", new_tokens - 1, [d for _, d in samples])]:
        out[f"{key}_tokens_per_s_runs"] = [count / t for t in times]
        out.update(figures_of(key, out[f"{key}_tokens_per_s_runs"]))
    return out


def figures_of(key: str, rates: list[float]) -> dict:
    """The median and the best of one figure's runs: on a shared machine the runs are bimodal
    (preempted or not), the best is the machine's own speed."""
    return {f"{key}_tokens_per_s": statistics.median(rates), f"{key}_tokens_per_s_best": max(rates)}


def cpu_seconds() -> tuple[float, float]:
    """CPU seconds so far: the machine's busy time (/proc/stat: every process, steal included) and
    this process's own with its finished children's."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    t = os.times()
    return ((sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK"),
            t.user + t.system + t.children_user + t.children_system)


class OthersShare:
    """The share of the machine's CPU that other processes took while the block ran."""

    def __enter__(self):
        self.start = (time.perf_counter(), *cpu_seconds())
        return self

    def __exit__(self, *exc):
        (t0, busy0, own0), t1, (busy1, own1) = self.start, time.perf_counter(), cpu_seconds()
        self.share = max(0.0, (busy1 - busy0 - (own1 - own0)) / (max(t1 - t0, 1e-3) * (os.cpu_count() or 1)))


def wait_for_quiet(limit: float, wait_s: float) -> dict:
    """Wait (up to wait_s) until other processes take at most `limit` of the CPU over 1 s: a block
    starts on a quiet machine where one comes, and says how busy it was where none did."""
    start = time.perf_counter()
    while True:
        with OthersShare() as others:
            time.sleep(1)
        waited = time.perf_counter() - start
        if others.share <= limit or waited >= wait_s:
            return {"busy_before": others.share, "waited_s": waited}
        time.sleep(4)


def run_json(cmd: list[str]) -> dict:
    """A side script's one JSON object (its last stdout line); its log goes to our stderr."""
    done = subprocess.run(cmd, cwd=REPO, stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    if done.returncode != 0:
        raise SystemExit(f"error: {' '.join(cmd[:3])} failed (exit {done.returncode}); its messages are above.")
    return json.loads(done.stdout.strip().splitlines()[-1])


def vkc_generation(model, prompt: list[int], new_tokens: int) -> tuple[list[int], float, float]:
    """Model.generate timed as `vkc generate` times it: (tokens, prefill s, decode s)."""
    start, tokens, first = time.perf_counter(), [], None
    for token in model.generate(prompt, new_tokens):
        first = first or time.perf_counter()
        tokens.append(token)
    return tokens, first - start, time.perf_counter() - first


def decode_step(model, token: int, position: int, repeat: int = 20) -> dict:
    """One decode step alone: its wall time (median, the token id fetched as generate fetches it)
    and, from Model.profile, its dispatches and the time of each kernel (barriers between them)."""
    feeds = {"input_ids": np.array([[token]], np.int64), "position": np.array([position], np.int64)}
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        model.run(feeds, fetch=["logits_argmax"])
        times.append(time.perf_counter() - t0)
    kernels: dict[str, list] = {}
    for d in model.profile(feeds, repeat=10):
        row = kernels.setdefault(d.kernel, [0, 0.0])
        row[0] += 1
        row[1] += 1e3 * d.seconds
    return {"run_ms": 1e3 * statistics.median(times), "dispatches": sum(n for n, _ in kernels.values()),
            "profile_ms": sum(ms for _, ms in kernels.values()),
            "kernels": dict(sorted(kernels.items(), key=lambda kv: -kv[1][1]))}


def measure_size(name: str, args, folder: Path) -> tuple[list[dict], dict, list[dict]]:
    from compiler.compile import compile_model
    from runtime_min import load
    shape = SIZES[name]
    log(f"[{name}] model, ONNX export and F32 GGUF ({args.hf_python})")
    made = run_json([args.hf_python, "-m", "benchmarks.lavapipe.decode_hf", "--out", str(folder), "--llama-cpp",
                     str(args.llama_cpp), "--prompt", str(args.prompt), "--new-tokens", str(args.new_tokens),
                     *[a for k, v in shape.items() for a in (f"--{k.replace('_', '-')}", str(v))]])
    prompt, reference, margins = made["prompt"], made["transformers_tokens"], made["transformers_margins"]
    models, rows = {}, []
    for label in args.rows:
        precision, weights, _ = ROWS[label]
        log(f"[{name}] vkc compile {label}")
        t0 = time.perf_counter()
        bundle = compile_model(made["onnx"], variants=[{"input_ids": [1, args.prompt]}, {"input_ids": [1, 1]}],
                               max_context=args.prompt + args.new_tokens, target="host", precision=precision,
                               weights=weights, argmax_output="logits")
        compile_s = time.perf_counter() - t0
        model = load(bundle, build_all=True)
        tokens, _, _ = vkc_generation(model, prompt, args.new_tokens)  # warm-up
        models[label] = (model, tokens, compile_s, len(bundle))
    samples: dict[str, list] = {label: [] for label in args.rows}
    llama_runs, rounds = [], []
    try:
        for r in range(args.rounds):
            rounds.append({})
            for system in ("llama_cpp", "vkc"):
                rounds[-1][system] = wait_for_quiet(args.quiet, args.quiet_wait)
                log(f"[{name}] round {r + 1}/{args.rounds}, {system}: the CPU "
                    f"{100 * rounds[-1][system]['busy_before']:.0f}% busy before it, after "
                    f"{rounds[-1][system]['waited_s']:.0f} s")
                with OthersShare() as others:
                    if system == "llama_cpp":
                        llama_runs.append(run_json([
                            args.llamacpp_python, "-m", "benchmarks.lavapipe.decode_llamacpp", "--gguf",
                            made["gguf_f32"], "--prompt", ",".join(map(str, prompt)), "--new-tokens",
                            str(args.new_tokens), "--threads", str(args.threads), "--repeat", str(args.repeat),
                            "--types", ",".join(ROWS[lb][2] for lb in args.rows)]))
                    else:
                        for label, (model, tokens, _, _) in models.items():
                            for _ in range(args.repeat):
                                got, pre, dec = vkc_generation(model, prompt, args.new_tokens)
                                if got != tokens:
                                    raise SystemExit(f"error: vkc {label} gave other tokens on a later run: {got} "
                                                     f"after {tokens}")
                                samples[label].append((pre, dec))
                rounds[-1][system]["others_during"] = others.share
        steps = {label: decode_step(model, tokens[-1], args.prompt + args.new_tokens // 2)
                 for label, (model, tokens, _, _) in models.items()}
        device = next(iter(models.values()))[0].device_name
    finally:
        for model, *_ in models.values():
            model.close()
    for label in args.rows:
        _, _, kind = ROWS[label]
        model, tokens, compile_s, size = models[label]
        vkc = {"device": device, "compile_s": compile_s, "bundle_bytes": size, "tokens": tokens,
               "decode_step": steps[label],
               "agreement": agreement(tokens, reference, margins), **summarize(samples[label], args.prompt,
                                                                               args.new_tokens)}
        runs = [lr["types"][kind] for lr in llama_runs]
        llama = {k: runs[0][k] for k in ("file", "file_bytes", "tokens", "kv_cache")}
        llama["tokens_stable"] = all(r["tokens"] == runs[0]["tokens"] and r["tokens_stable"] for r in runs)
        for key in ("prefill", "decode"):
            llama[f"{key}_tokens_per_s_runs"] = [x for r in runs for x in r[f"{key}_tokens_per_s_runs"]]
            llama.update(figures_of(key, llama[f"{key}_tokens_per_s_runs"]))
            llama[f"wall_{key}_tokens_per_s"] = statistics.median(r[f"wall_{key}_tokens_per_s"] for r in runs)
        llama["agreement"] = agreement(llama["tokens"], reference, margins)
        rows.append({"model": name, **shape, "params": made["params"], "precision": label, "llama_cpp_type": kind,
                     "vkc": vkc, "llama_cpp": llama})
    for row in rows:
        row["reference"] = {"transformers_tokens": reference, "transformers_margins": margins,
                            "onnxruntime_agreement": agreement(made["onnxruntime_tokens"], reference, margins)}
    versions = {**made["versions"], "llama_cpp_python": llama_runs[0]["llama_cpp_python"],
                "llama_cpp_system_info": llama_runs[0]["system_info"]}
    return rows, versions, rounds


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="tiny,small", help=f"comma-separated, of {','.join(SIZES)}")
    p.add_argument("--rows", default=",".join(ROWS), help=f"comma-separated, of {','.join(ROWS)}")
    p.add_argument("--prompt", type=int, default=32, help="prompt tokens (P)")
    p.add_argument("--new-tokens", type=int, default=64, help="new tokens (N)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--repeat", type=int, default=3, help="generations per system and row in each round")
    p.add_argument("--threads", type=int, default=2, help="llama.cpp's threads")
    p.add_argument("--quiet", type=float, default=0.25,
                   help="each system's turn in a round waits until others take at most this share of the CPU ...")
    p.add_argument("--quiet-wait", type=float, default=300, help="... or this many seconds have passed")
    p.add_argument("--hf-python", default=str(VENVS / "optimum/bin/python"),
                   help="a python with torch, transformers < 5, optimum-onnx, onnxruntime and sentencepiece")
    p.add_argument("--llamacpp-python", default=str(VENVS / "llamacpp/bin/python"),
                   help="a python with llama-cpp-python")
    p.add_argument("--llama-cpp", type=Path, default=VENVS / "llamacpp-src/llama_cpp_python-0.3.36/vendor/llama.cpp",
                   help="vendor/llama.cpp of the unpacked llama-cpp-python sdist (convert_hf_to_gguf.py)")
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    sizes, args.rows = args.sizes.split(","), args.rows.split(",")
    for what, given, known in [("--sizes", sizes, SIZES), ("--rows", args.rows, ROWS)]:
        if unknown := [g for g in given if g not in known]:
            raise SystemExit(f"error: {what} {','.join(unknown)} unknown; choose from {','.join(known)}.")
    if args.new_tokens < CHECKED:
        raise SystemExit(f"error: --new-tokens {args.new_tokens} is below the {CHECKED} tokens the agreement checks.")
    for flag, python in [("--hf-python", args.hf_python), ("--llamacpp-python", args.llamacpp_python)]:
        if not Path(python).is_file():
            raise SystemExit(f"error: {flag} {python} does not exist; set it up as this script's --help says.")

    from benchmarks import report
    meta = {"command": command_line(), "vkc_commit": vkc_commit(), "cpu": f"{cpu_name()} x {os.cpu_count()}",
            "prompt": args.prompt, "new_tokens": args.new_tokens, "rounds": args.rounds, "repeat": args.repeat,
            "threads": args.threads, "quiet": args.quiet, "quiet_wait_s": args.quiet_wait,
            "load_average_start": os.getloadavg()[0], "turns": {}}
    rows = []
    for name in sizes:
        with tempfile.TemporaryDirectory() as tmp:
            got, meta["versions"], meta["turns"][name] = measure_size(name, args, Path(tmp))
            rows += got
    meta["load_average_end"] = os.getloadavg()[0]
    meta["device"] = rows[0]["vkc"]["device"]
    result = {"meta": meta, "rows": rows}
    print(report.render(result), end="")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
