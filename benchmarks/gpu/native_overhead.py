"""Host overhead of the native runtime: vkc_run wall time minus its GPU time (timestamps around the
command buffer), next to runtime_min's Model.run wall time, per model. Meant for the H200 machine
(see /work/shared/VULKAN_NOTES.md for its loader setup); runs anywhere with a Vulkan device.

    make -C native && python -m benchmarks.gpu.native_overhead [--runs 200] [--models mlp,small_cnn]
        [--bundles a.vkb b.vkb]   # precompiled bundles (the H200 has no shaderc: compile here first)

Prints a table: model, native wall/GPU/overhead medians (ms), the overhead with inputs written in place
(vkc_input_data, vkcrun --in-place: vkc_run copies nothing), runtime_min wall median (ms)."""
import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]


def bundles_from_models(names, folder):
    from compiler import compile_model
    from tests.onnx_builders import mlp, small_cnn
    makers = {"mlp": lambda: mlp(784, 1024, 1024, 10), "small_cnn": lambda: small_cnn(hw=32)}
    out = []
    for n in names:
        path = folder / f"{n}.vkb"
        path.write_bytes(bytes(compile_model(makers[n](), target="host")))
        out.append(path)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--models", default="mlp,small_cnn")
    ap.add_argument("--bundles", nargs="*")
    args = ap.parse_args()
    vkcrun = ROOT / "native" / "build" / "vkcrun"
    if not vkcrun.exists():
        subprocess.run(["make", "-C", str(ROOT / "native")], check=True)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        paths = [Path(p) for p in args.bundles] if args.bundles else bundles_from_models(args.models.split(","), tmp)
        print(f"{'bundle':24s} {'native wall':>12s} {'native GPU':>11s} {'overhead':>9s} {'in-place overhead':>18s} "
              f"{'runtime_min wall':>17s}")
        for path in paths:
            from runtime_min import load
            with load(str(path)) as model:
                rng = np.random.default_rng(0)
                feeds = {i.name: rng.standard_normal(i.shape).astype(i.dtype) for i in model.inputs}
                times = model.bench(feeds, warmup=3, repeat=args.runs)
            cmd = [str(vkcrun), str(path), "--bench", str(args.runs)]
            for name, arr in feeds.items():
                f = tmp / f"{path.stem}_{len(cmd)}.npy"
                np.save(f, arr)
                cmd += ["--input", f"{name}={f}"]
            stats = [dict(line.split(": ", 1) for line in subprocess.run(
                cmd + extra, capture_output=True, text=True, check=True).stdout.strip().splitlines())
                for extra in ([], ["--in-place"])]
            s, inplace = stats
            print(f"{path.stem:24s} {float(s['median_wall_ms']):12.4f} {float(s['median_gpu_ms']):11.4f} "
                  f"{float(s['median_overhead_ms']):9.4f} {float(inplace['median_overhead_ms']):18.4f} "
                  f"{np.median(times) * 1e3:17.4f}   ({s['device']})")


if __name__ == "__main__":
    main()
