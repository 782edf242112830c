#!/usr/bin/env python3
"""The vkc demo (what `make demo` runs), on a real model shipped in the onnx wheel.

1. The CLI on light_<model>.onnx as shipped: `vkc compile`, `vkc inspect` (kernels, schedule,
   memory plan), `vkc verify` (against onnxruntime on the default Vulkan device).
2. The shipped model has every weight = 0.02, so its output is nearly uniform and any agreement is
   trivially exact. So: write a random-weights copy to out/light_<model>_random.onnx, compile it
   with the Python API (target host: the profile matching the local device), run it, and print a short summary: top-5 next to onnxruntime's, relative
   L2 error, latency (vkc and onnxruntime, medians) and the memory plan.

Exit status 1 when any step fails or the random-weights copy disagrees with onnxruntime.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

import numpy as np  # noqa: E402
import onnx  # noqa: E402

from benchmarks.light_models import light_model, light_model_path, rel_l2  # noqa: E402

TOLERANCE = 1e-4


def vkc_cmd() -> list[str]:
    exe = Path(sys.executable).parent / "vkc"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "compiler.cli"]


def cli(*args: str) -> None:
    shown = " ".join(["vkc", *(os.path.relpath(a, REPO) if a.startswith(str(REPO) + os.sep) else a
                               for a in args)])
    print(f"\n$ {shown}", flush=True)
    subprocess.run(vkc_cmd() + list(args), check=True, cwd=REPO)


def top5(a: np.ndarray) -> list[tuple[int, float]]:
    flat = a.reshape(-1)
    return [(int(i), float(flat[i])) for i in np.argsort(flat)[::-1][:5]]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="vkc demo on an onnx-wheel light model")
    ap.add_argument("--model", default="squeezenet", choices=["squeezenet", "resnet50"])
    ap.add_argument("--out", type=Path, default=REPO / "out", help="where to write the models and bundles")
    ap.add_argument("--repeat", type=int, default=5, help="timed runs for the latency (default 5)")
    ap.add_argument("--skip-cli", action="store_true", help="skip step 1 (the CLI on the shipped model)")
    args = ap.parse_args(argv)
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    shipped = light_model_path(args.model)
    if not os.path.exists(shipped):
        print(f"error: {shipped} is not in this onnx wheel (onnx {onnx.__version__})", file=sys.stderr)
        return 1

    if not args.skip_cli:
        print(f"== 1. the vkc CLI on {shipped} (as shipped: every weight 0.02)")
        bundle_path = os.path.relpath(out / f"light_{args.model}.vkb", REPO)
        try:
            cli("devices")
            cli("compile", shipped, "-o", bundle_path)
            cli("inspect", bundle_path)
            cli("verify", shipped)
        except subprocess.CalledProcessError as exc:
            print(f"error: `{' '.join(map(str, exc.cmd))}` exited with {exc.returncode}", file=sys.stderr)
            return 1

    # -- 2. random weights ---------------------------------------------------------------------
    import onnxruntime as ort

    from bundles import read_bundle
    from compiler import compile_model
    from runtime_min import load

    print(f"\n== 2. light_{args.model} with random weights (Python API)", flush=True)
    random_path = out / f"light_{args.model}_random.onnx"
    onnx.save(light_model(args.model, seed=0), str(random_path))
    t0 = time.perf_counter()
    bundle = compile_model(random_path, target="host")  # the profile matching the local device
    compile_s = time.perf_counter() - t0
    (out / f"light_{args.model}_random.vkb").write_bytes(bundle)
    m = read_bundle(bundle).manifest

    sess = ort.InferenceSession(str(random_path), providers=["CPUExecutionProvider"])
    inp = sess.get_inputs()[0]
    x = np.random.default_rng(0).standard_normal([int(d) for d in inp.shape]).astype(np.float32)
    feeds = {inp.name: x}
    out_name = sess.get_outputs()[0].name
    ref = sess.run([out_name], feeds)[0]
    ort_times = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        sess.run([out_name], feeds)
        ort_times.append(time.perf_counter() - t0)

    with load(bundle) as model:
        got = model.run(feeds)[out_name]
        vkc_times = model.bench(feeds, warmup=1, repeat=args.repeat)
        device = model.device_name
    err = rel_l2(got, ref)
    mem = m["memory"]
    mib = lambda n: f"{n / 2**20:.2f} MiB"  # noqa: E731

    print(f"model      {os.path.relpath(random_path)} -> {os.path.relpath(out)}/light_{args.model}_random.vkb "
          f"({mib(len(bundle))}), compiled in {compile_s:.2f} s: {len(m['dispatches'])} dispatches, "
          f"{len(m['modules'])} SPIR-V modules, {len(m['kernels'])} pipelines, target {m['target']['name']}")
    print(f"device     {device}")
    print(f"input      {inp.name} float32{list(x.shape)}, seeded standard normal")
    print("top-5 vkc  " + "  ".join(f"{i}:{p:.4f}" for i, p in top5(got)))
    print("top-5 ort  " + "  ".join(f"{i}:{p:.4f}" for i, p in top5(ref)))
    same = [i for i, _ in top5(got)] == [i for i, _ in top5(ref)]
    print(f"accuracy   relative L2 error vs onnxruntime {err:.2e} (tolerance {TOLERANCE:g}); "
          f"top-5 {'identical' if same else 'DIFFERENT'}")
    print(f"latency    vkc {statistics.median(vkc_times) * 1e3:.1f} ms, onnxruntime CPU "
          f"{statistics.median(ort_times) * 1e3:.1f} ms (medians of {args.repeat}; vkc includes copy in/out)")
    print(f"memory     arena {mib(mem['arena_bytes'])} vs sum of intermediates {mib(mem['intermediates_sum_bytes'])}"
          f" vs lower bound {mib(mem['lower_bound_bytes'])} (arena/bound "
          f"{mem['arena_bytes'] / max(mem['lower_bound_bytes'], 1):.2f}); weights {mib(mem['weights_bytes'])}")
    if not err <= TOLERANCE:
        print(f"FAIL: vkc disagrees with onnxruntime ({err:.2e} > {TOLERANCE:g})")
        return 1
    print(f"OK: vkc agrees with onnxruntime on light_{args.model} with random weights")
    return 0


if __name__ == "__main__":
    sys.exit(main())
