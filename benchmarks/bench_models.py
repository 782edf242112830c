#!/usr/bin/env python3
"""Side-by-side benchmark: vkc on the default Vulkan device against its peers, one table.

    .venv/bin/python -m benchmarks.bench_models                      # every model
    .venv/bin/python -m benchmarks.bench_models --models mlp,small_cnn --repeat 50 --json out/bench.json

For each model: compile with ``compiler.compile_model`` (``--target host`` by default: the profile
matching the local device); run it once on Vulkan and compare every
output with onnxruntime (relative L2 error); then time vkc (``Model.bench``: copy in, submit, wait,
copy out) and each peer in the same process, on the same seeded inputs, and report medians.
The table comes last: model, vkc ms, peer ms, ratio (peer / vkc, > 1 means vkc is faster),
rel L2, and the memory plan (arena vs sum of intermediates vs lower bound, from the manifest).

Slow engines get fewer runs: after the first (untimed, checked) run and one warm-up, repeats are capped at
``--budget-s / run time`` (never below 3, never above ``--repeat``); the table shows the count.
Exit status 1 when a model fails to compile/run or disagrees with onnxruntime beyond --tolerance.

For vkc against ncnn-Vulkan, IREE and onnxruntime on the zoo models, GEMMs and conv layers in one run,
use benchmarks/bench.py (peers in benchmarks/peers.py; figures in benchmarks/RESULTS.md).
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
from typing import Callable

REPO = Path(__file__).resolve().parent.parent

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from benchmarks.light_models import light_model, rel_l2  # noqa: E402
from tests import onnx_builders as ob  # noqa: E402
from tests.harness import random_feeds  # noqa: E402

console = Console(width=None if sys.stdout.isatty() else 160, highlight=False)

# name -> (label, builder). Light models: the onnx wheel's light_*.onnx with random weights.
MODELS: dict[str, tuple[str, Callable[[], onnx.ModelProto]]] = {
    "mlp": ("mlp 784-1024-1024-10 b1", lambda: ob.mlp(784, 1024, 1024, 10)),
    "small_cnn": ("small_cnn 3x32x32", lambda: ob.small_cnn()),
    "mobilenetv2_block": ("mobilenetv2_block 16x14x14", lambda: ob.mobilenetv2_block()),
    "squeezenet": ("light_squeezenet (random w)", lambda: light_model("squeezenet")),
    "resnet50": ("light_resnet50 (random w)", lambda: light_model("resnet50")),
}


# --------------------------------------------------------------------------------------------
# peers: name -> callable(model bytes, feeds, warmup, repeat, budget_s) -> (outputs, seconds list)
# A peer runs the ONNX model its own way and times its own run call. To add one (ncnn, IREE,
# torch), write such a function and register it in PEERS; the table grows a column pair.
# --------------------------------------------------------------------------------------------

def _plan(run: Callable[[], object], warmup: int, repeat: int, budget_s: float) -> tuple[object, int, int]:
    """The first run (untimed; its result is returned and checked) and, when warmup >= 2, a second
    one to estimate the steady run time (a first run may pay for lazy shader compilation). Returns
    (result, warm-up runs left, timed runs) so that the timed runs fit in budget_s (at least 3)."""
    t0 = time.perf_counter()
    result = run()
    estimate = time.perf_counter() - t0
    left = max(0, warmup - 1)
    if left and repeat:
        t0 = time.perf_counter()
        run()
        estimate = min(estimate, time.perf_counter() - t0)
        left -= 1
    if estimate * left > budget_s / 2:
        left = 0
    return result, left, min(repeat, max(3, int(budget_s / max(estimate, 1e-9))))


def _timed(run: Callable[[], object], warmup: int, repeat: int, budget_s: float) -> tuple[object, list[float]]:
    result, left, n = _plan(run, warmup, repeat, budget_s)
    for _ in range(left):
        run()
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    return result, times


def peer_onnxruntime(model: bytes, feeds, warmup: int, repeat: int, budget_s: float):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    outs, times = _timed(lambda: sess.run(names, feeds), warmup, repeat, budget_s)
    return dict(zip(names, outs)), times


PEERS: dict[str, Callable] = {"onnxruntime": peer_onnxruntime}
REFERENCE = "onnxruntime"  # vkc's outputs are checked against this one (always run)


# --------------------------------------------------------------------------------------------

def bench_vkc(bundle: bytes, feeds, warmup: int, repeat: int, budget_s: float, device):
    from runtime_min import load

    with load(bundle, device=device, validation=False) as model:
        outputs, left, n = _plan(lambda: model.run(feeds), warmup, repeat, budget_s)
        times = model.bench(feeds, warmup=left, repeat=n)
        return outputs, times, model.device_name


def bench_one(key: str, args) -> dict:
    from bundles import read_bundle
    from compiler import compile_model

    label, build = MODELS[key]
    row: dict = {"model": key, "label": label}
    proto = build()
    model_bytes = proto.SerializeToString()
    feeds = random_feeds(proto, seed=args.seed)
    t0 = time.perf_counter()
    bundle = compile_model(proto, target=args.target)
    row["compile_s"] = time.perf_counter() - t0
    m = read_bundle(bundle).manifest
    row.update({k: m["memory"][k] for k in ("arena_bytes", "intermediates_sum_bytes", "lower_bound_bytes",
                                             "weights_bytes")})
    row["dispatches"] = len(m["dispatches"])
    row["bundle_bytes"] = len(bundle)

    got, times, row["device"] = bench_vkc(bundle, feeds, args.warmup, args.repeat, args.budget_s, args.device)
    row["vkc_ms"] = statistics.median(times) * 1e3
    row["vkc_runs"] = len(times)

    row["peers"] = {}
    ref = None
    for name in dict.fromkeys([REFERENCE] + args.peers):
        timed = name in args.peers
        outs, ptimes = PEERS[name](model_bytes, feeds, args.warmup if timed else 0, args.repeat if timed else 0,
                                   args.budget_s)
        if name == REFERENCE:
            ref = outs
        if timed:
            ms = statistics.median(ptimes) * 1e3
            row["peers"][name] = {"ms": ms, "runs": len(ptimes), "ratio": ms / row["vkc_ms"]}
    row["rel_l2"] = max(rel_l2(got[n], ref[n]) for n in ref)
    first_out = next(iter(ref))
    if ref[first_out].reshape(-1).size > 1 and ref[first_out].shape[0] == 1:
        row["top1_same"] = bool(np.argmax(got[first_out]) == np.argmax(ref[first_out]))
    return row


def _size(n: int) -> str:
    if n >= 2**20:
        return f"{n / 2**20:.2f} MiB"
    return f"{n / 2**10:.1f} KiB"


def print_table(rows: list[dict], peers: list[str], tolerance: float, device: str) -> None:
    import onnxruntime as ort

    table = Table(title=f"vkc on {device} vs {', '.join(peers) or 'no peer'} "
                        f"(onnxruntime {ort.__version__} CPU, {os.cpu_count()} cores; median ms)")
    table.add_column("model")
    table.add_column("vkc ms", justify="right")
    for p in peers:
        table.add_column(f"{p} ms", justify="right")
        table.add_column(f"{p}/vkc", justify="right")
    for col in ("rel L2", "arena", "sum of tensors", "lower bound", "arena/bound"):
        table.add_column(col, justify="right")
    for r in rows:
        if "error" in r:
            table.add_row(r["label"], "[red]error[/]", *[""] * (2 * len(peers)), "", "", "", "", "")
            continue
        cells = [r["label"], f"{r['vkc_ms']:.3f} ({r['vkc_runs']})"]
        for p in peers:
            pr = r["peers"][p]
            cells += [f"{pr['ms']:.3f} ({pr['runs']})", f"{pr['ratio']:.3g}"]
        err = f"{r['rel_l2']:.1e}"
        cells.append(err if r["rel_l2"] <= tolerance else f"[red]{err}[/]")
        cells += [_size(r["arena_bytes"]), _size(r["intermediates_sum_bytes"]), _size(r["lower_bound_bytes"]),
                  f"{r['arena_bytes'] / max(r['lower_bound_bytes'], 1):.2f}"]
        table.add_row(*cells)
    table.caption = (f"(n) timed runs; peer/vkc > 1: vkc faster; rel L2: worst output vs {REFERENCE} "
                     f"(tolerance {tolerance:g}); memory: the bundle's plan")
    console.print(table)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(MODELS),
                    help=f"comma-separated, from: {', '.join(MODELS)} (default: all)")
    ap.add_argument("--peers", default=",".join(PEERS), help=f"comma-separated, from: {', '.join(PEERS)}; "
                    "'' for none (onnxruntime still runs once as the reference)")
    ap.add_argument("--repeat", type=int, default=20, help="timed runs per engine (default 20)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed runs first, counting the checked run (default 3)")
    ap.add_argument("--budget-s", type=float, default=20.0,
                    help="cap on timed seconds per engine and model: slow engines get fewer runs (min 3)")
    ap.add_argument("--tolerance", type=float, default=1e-4, help="largest relative L2 error accepted")
    ap.add_argument("--target", default="host", help="vkc device profile: host (the profile matching the local device, default), generic, lavapipe, nvidia, mobile")
    ap.add_argument("--device", default=None, help="Vulkan device index or name substring (default: best)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    ap.add_argument("--json", type=Path, default=None, help="also write the results to this JSON file")
    args = ap.parse_args(argv)
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    args.peers = [p.strip() for p in args.peers.split(",") if p.strip()]
    bad = [m for m in models if m not in MODELS] + [p for p in args.peers if p not in PEERS]
    if bad:
        ap.error(f"unknown model or peer: {', '.join(bad)}")
    if args.repeat < 1:
        ap.error("--repeat must be >= 1")
    if args.device is not None and args.device.isdigit():
        args.device = int(args.device)

    rows, failures = [], []
    for key in models:
        console.print(f"[bold]{MODELS[key][0]}[/]: compiling, checking, timing ...")
        try:
            r = bench_one(key, args)
        except Exception as exc:  # noqa: BLE001 - one broken model must not hide the others
            traceback.print_exc()
            r = {"model": key, "label": MODELS[key][0], "error": f"{type(exc).__name__}: {exc}"}
            failures.append(f"{key}: {r['error'].splitlines()[0]}")
        else:
            peers = ", ".join(f"{p} {v['ms']:.3f} ms" for p, v in r["peers"].items())
            top1 = {True: ", same top-1", False: ", [red]different top-1[/]"}.get(r.get("top1_same"), "")
            console.print(f"  compiled in {r['compile_s']:.2f} s ({r['dispatches']} dispatches, "
                          f"{_size(r['bundle_bytes'])}); rel L2 vs {REFERENCE} {r['rel_l2']:.2e}{top1}; "
                          f"vkc {r['vkc_ms']:.3f} ms; {peers}")
            if not r["rel_l2"] <= args.tolerance:
                failures.append(f"{key}: rel L2 {r['rel_l2']:.2e} > {args.tolerance:g}")
        rows.append(r)

    device = next((r["device"] for r in rows if "device" in r), "?")
    if args.json:
        import onnxruntime as ort

        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({
            "device": device, "onnxruntime": ort.__version__, "onnx": onnx.__version__,
            "cpu_count": os.cpu_count(), "machine": platform.platform(),
            "settings": {"target": args.target, "repeat": args.repeat, "warmup": args.warmup, "budget_s": args.budget_s,
                         "seed": args.seed, "tolerance": args.tolerance},
            "results": rows}, indent=1))
        console.print(f"wrote {args.json}")
    if failures:
        console.print("[red]failed:[/]\n  " + "\n  ".join(failures))
    print_table(rows, args.peers, args.tolerance, f"{device} (target {args.target})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
