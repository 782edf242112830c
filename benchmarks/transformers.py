#!/usr/bin/env python3
"""vkc against onnxruntime CPU on the transformer fixtures (tests/models/fixtures/), in one run.

    python -m benchmarks.transformers                                  # every fixture, 5 timed runs each
    python -m benchmarks.transformers --models bert_tiny,vit_tiny --repeat 11 --json out/tf.json

For each fixture: compile with vkc (`--target`, host by default: on lavapipe the lavapipe
profile), run once and check against onnxruntime CPU (worst relative L2 over the outputs), then
time vkc (`runtime_min.load(bundle).run`, inputs copied in and outputs out) and onnxruntime
(`InferenceSession.run`, CPU provider, intra-op threads = the machine's cores) on the same inputs:
--warmup untimed runs each, then --repeat rounds that time each system once, alternating which goes
first, so that load from other processes hits both alike. Reported: median ms, ORT/vkc (> 1: vkc
faster), the fastest run of each (on a shared machine the runs are bimodal: preempted or not), and from `Model.profile` the share of vkc's GPU time in attention (the fused attention kernels), LayerNorm, matmul, conv, elementwise and other kernels
(benchmarks/transformer_profile.py says how dispatches are sorted).

Inputs: input_ids int64 in [0, 1000); attention_mask int64, ones with the last quarter zero
(padding); float inputs standard normal. A fixture that fails to compile or run shows its error
and the run goes on.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

import numpy as np
import onnx

from benchmarks import transformer_profile as tp
from benchmarks.cli import command_line, vkc_commit

FIXTURES = REPO / "tests" / "models" / "fixtures"
MODELS = ["bert_tiny", "distilbert_tiny", "gpt2_tiny", "whisper_enc_tiny", "vit_tiny", "vit_tiny_b2", "convnext_tiny",
          "r3d_tiny"]
_NP = {onnx.TensorProto.FLOAT: np.float32, onnx.TensorProto.INT64: np.int64, onnx.TensorProto.INT32: np.int32}


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def make_feeds(model: onnx.ModelProto, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    init = {i.name for i in model.graph.initializer}
    feeds = {}
    for vi in (v for v in model.graph.input if v.name not in init):
        tt = vi.type.tensor_type
        shape = [d.dim_value for d in tt.shape.dim]
        dtype = _NP[tt.elem_type]
        if vi.name == "attention_mask":
            a = np.ones(shape, dtype)
            a[..., shape[-1] - max(1, shape[-1] // 4):] = 0
        elif np.issubdtype(dtype, np.integer):
            a = rng.integers(0, 1000, shape).astype(dtype)
        else:
            a = rng.standard_normal(shape).astype(dtype)
        feeds[vi.name] = a
    return feeds


def rel_l2(got, ref) -> float:
    got, ref = np.asarray(got, np.float64).ravel(), np.asarray(ref, np.float64).ravel()
    return float(np.linalg.norm(got - ref) / max(np.linalg.norm(ref), 1e-30))


def ort_session(model: onnx.ModelProto, threads: int):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.intra_op_num_threads = threads
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return lambda feeds: dict(zip(names, sess.run(names, feeds)))


def bench_one(name: str, args) -> dict:
    from compiler import compile_model
    from runtime_min import load

    row = {"model": name}
    model = onnx.load(str(FIXTURES / f"{name}.onnx"))
    feeds = make_feeds(model)
    row["inputs"] = {k: [list(v.shape), str(v.dtype)] for k, v in feeds.items()}
    ort_run = ort_session(model, args.threads)
    ref = ort_run(feeds)

    t0 = time.perf_counter()
    bundle = compile_model(model, target=args.target)
    row["compile_s"] = time.perf_counter() - t0
    vk = load(bundle, validation=False)
    row["device"] = vk.device_name
    try:
        outs = {o.name: np.empty(o.shape, o.dtype) for o in vk.outputs}
        got = vk.run(feeds, outs)
        row["rel_l2"] = max(rel_l2(got[k], ref[k]) for k in ref)
        log(f"  {name}: compiled in {row['compile_s']:.1f} s, rel L2 vs onnxruntime {row['rel_l2']:.1e}")

        systems = {"vkc": lambda: vk.run(feeds, outs), "ort": lambda: ort_run(feeds)}
        for f in systems.values():
            for _ in range(args.warmup):
                f()
        times = {k: [] for k in systems}
        order = list(systems)
        for r in range(args.repeat):
            for k in (order if r % 2 == 0 else order[::-1]):
                t = time.perf_counter()
                systems[k]()
                times[k].append(time.perf_counter() - t)
        row["vkc_ms"] = statistics.median(times["vkc"]) * 1e3
        row["ort_ms"] = statistics.median(times["ort"]) * 1e3
        row["runs_ms"] = {k: [t * 1e3 for t in v] for k, v in times.items()}
        row["ort_over_vkc"] = row["ort_ms"] / row["vkc_ms"]
        row["vkc_min_ms"], row["ort_min_ms"] = min(times["vkc"]) * 1e3, min(times["ort"]) * 1e3
        log(f"  {name}: vkc {row['vkc_ms']:.3f} ms, onnxruntime {row['ort_ms']:.3f} ms")

        prof = vk.profile(feeds, repeat=args.profile_repeat)
        row["profile"] = tp.summarize(prof, tp.attention_nodes(model))
    finally:
        vk.close()
    return row


def versions(device: str | None) -> dict:
    import onnxruntime
    v = {"python": platform.python_version(), "onnx": onnx.__version__, "onnxruntime": onnxruntime.__version__,
         "numpy": np.__version__, "machine": platform.machine(), "cpus": os.cpu_count(), "device": device}
    v["vkc_commit"] = vkc_commit()
    return v


def markdown(rows: list) -> str:
    head = ("| model | vkc ms | ORT ms | ORT/vkc | rel L2 | vkc min ms | ORT min ms | vkc GPU ms (dispatches) | "
            + " | ".join(tp.CATEGORIES) + " |")
    lines = [head, "|---|" + "---:|" * (7 + len(tp.CATEGORIES))]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | error: {r['error']} |" + " |" * (6 + len(tp.CATEGORIES)))
            continue
        p = r.get("profile")
        prof = [f"{p['gpu_ms']:.2f} ({p['dispatches']})"] + tp.share_cells(p) if p else [""] * (1 + len(tp.CATEGORIES))
        lines.append(f"| {r['model']} | {r['vkc_ms']:.3f} | {r['ort_ms']:.3f} | {r['ort_over_vkc']:.2f} | "
                     f"{r['rel_l2']:.1e} | {r['vkc_min_ms']:.3f} | {r['ort_min_ms']:.3f} | " + " | ".join(prof) + " |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated fixture names")
    ap.add_argument("--repeat", type=int, default=5, help="timed runs per system (median reported)")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--profile-repeat", type=int, default=3, help="Model.profile repeats (median per dispatch)")
    ap.add_argument("--target", default="host")
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="onnxruntime intra-op threads")
    ap.add_argument("--json", help="write rows and settings here")
    args = ap.parse_args()

    started = time.time()
    rows = []
    for name in [m for m in args.models.split(",") if m]:
        log(f"{name} ...")
        try:
            rows.append(bench_one(name, args))
        except Exception as exc:  # noqa: BLE001  one fixture's failure must not stop the others
            traceback.print_exc()
            rows.append({"model": name, "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"})
    device = next((r["device"] for r in rows if "device" in r), None)
    settings = {"target": args.target, "repeat": args.repeat, "warmup": args.warmup, "threads": args.threads,
                "profile_repeat": args.profile_repeat, "command": command_line(),
                "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(started)),
                "wall_s": time.time() - started}
    print(f"vkc --target {args.target} vs onnxruntime CPU ({args.threads} threads); median of {args.repeat} "
          f"runs after {args.warmup} warm-ups; shares of vkc's GPU time (Model.profile)")
    print(markdown(rows))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"settings": settings, "versions": versions(device), "rows": rows},
                                              indent=1))
    return 0 if all("error" not in r for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
