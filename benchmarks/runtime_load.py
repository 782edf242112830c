#!/usr/bin/env python3
"""runtime_min for deployment: load time of a MobileNetV2-sized bundle with a cold and a warm pipeline
cache, and a soak of many runs of a small model (RSS, device allocations, identical outputs).

    .venv/bin/python benchmarks/runtime_load.py                         # compile both models, measure
    .venv/bin/python benchmarks/runtime_load.py --save out/             # also keep the two bundles
    python3 benchmarks/runtime_load.py --bundle out/mobilenetv2.vkb --soak-bundle out/mlp.vkb
                                                                        # no compiler needed (a GPU box)

Every load is timed in a fresh process (what an application starting up sees): `cold` with an empty
cache folder, `warm` with the folder the cold process left, `off` with the pipeline cache off. The
driver's own shader caches are turned off (MESA_SHADER_CACHE_DISABLE, __GL_SHADER_DISK_CACHE=0) so
that only runtime_min's VkPipelineCache makes a difference. Times are medians over --trials.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

CHILD = """
import json, sys, time
t0 = time.perf_counter()
import runtime_min
t1 = time.perf_counter()
m = runtime_min.load(sys.argv[1], device=sys.argv[2] or None, pipeline_cache=sys.argv[3] != "off")
t2 = time.perf_counter()
info = dict(m.load_info, device=m.device_name, import_seconds=t1 - t0, wall_seconds=t2 - t1)
m.close()
print(json.dumps(info))
"""


def mobilenetv2(hw: int = 224, num_classes: int = 1000, seed: int = 0):
    """MobileNetV2 (width 1.0): 52 convolutions, 3.5 M parameters, random weights."""
    sys.path.append(str(REPO / "tests"))
    from onnx_builders import GraphBuilder, he_normal, small_normal
    g = GraphBuilder("mobilenetv2", seed)
    x = g.input("input", [1, 3, hw, hw])
    c = 32
    x = g.clip(g.bn(g.conv(x, 3, c, 3, stride=2, bias=False), c), 0.0, 6.0)
    for t, c_out, n, s in [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                           (6, 160, 3, 2), (6, 320, 1, 1)]:
        for i in range(n):
            stride, hidden, y = (s if i == 0 else 1), c * t, x
            if t != 1:
                y = g.clip(g.bn(g.conv(y, c, hidden, 1, bias=False), hidden), 0.0, 6.0)
            y = g.clip(g.bn(g.conv(y, hidden, hidden, 3, stride=stride, group=hidden, bias=False), hidden), 0.0, 6.0)
            y = g.bn(g.conv(y, hidden, c_out, 1, bias=False), c_out, gamma_scale=0.3)
            x = g.node("Add", [y, x]) if stride == 1 and c == c_out else y
            c = c_out
    x = g.clip(g.bn(g.conv(x, c, 1280, 1, bias=False), 1280), 0.0, 6.0)
    x = g.node("Flatten", [g.node("GlobalAveragePool", [x])], axis=1)
    g.node("Gemm", [x, g.const("fc_w", he_normal(g.rng, (num_classes, 1280))),
                    g.const("fc_b", small_normal(g.rng, (num_classes,)))], name="/fc/Gemm", out="logits", transB=1)
    return g.build(["logits"])


def timed_load(bundle: Path, cache_dir: Path, device: str, cache: str) -> dict:
    env = dict(os.environ, VKC_CACHE_DIR=str(cache_dir), MESA_SHADER_CACHE_DISABLE="true",
               __GL_SHADER_DISK_CACHE="0", PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("VKC_VALIDATION", None)
    r = subprocess.run([sys.executable, "-c", CHILD, str(bundle), device, cache], capture_output=True, text=True,
                       env=env)
    if r.returncode:
        raise SystemExit(f"loading {bundle} failed:\n{r.stderr}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def rss_kib() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


def soak(bundle: Path, runs: int, device: str) -> dict:
    import numpy as np

    import runtime_min
    with runtime_min.load(bundle, device=device or None) as m:
        feeds = {t.name: np.random.default_rng(0).standard_normal(t.shape).astype(t.dtype) for t in m.inputs}
        ref = {k: v.tobytes() for k, v in m.run(feeds).items()}
        outs = {o.name: np.empty(o.shape, o.dtype) for o in m.outputs}
        for i in range(min(500, runs)):  # warm up the allocators before the first reading
            m.run(feeds, outs if i % 2 else None)
        rss0, res0, t0 = rss_kib(), runtime_min.resources(), time.perf_counter()
        same = 0
        for i in range(runs):
            got = m.run(feeds, outs) if i % 2 else m.run(feeds)  # caller arrays and fresh ones, alternately
            same += all(got[k].tobytes() == ref[k] for k in ref)
        seconds = time.perf_counter() - t0
        rss1, res1 = rss_kib(), runtime_min.resources()
    return {"runs": runs, "seconds": seconds, "rss_kib": (rss0, rss1), "resources": (res0, res1), "identical": same,
            "device": m.device_name}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bundle", type=Path, help="a MobileNetV2-sized .vkb (default: compile one)")
    ap.add_argument("--soak-bundle", type=Path, help="a small .vkb for the soak (default: compile an MLP)")
    ap.add_argument("--target", default="host", help="compile target (default: host)")
    ap.add_argument("--device", default="", help="device index or name substring")
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--soak", type=int, default=10000, help="runs in the soak (0: skip)")
    ap.add_argument("--save", type=Path, help="keep the compiled bundles in this folder")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="vkc_load_"))
    out = args.save or work
    out.mkdir(parents=True, exist_ok=True)
    if args.bundle is None or (args.soak and args.soak_bundle is None):
        from compiler import compile_model
        sys.path.append(str(REPO / "tests"))
        from onnx_builders import mlp
        if args.bundle is None:
            args.bundle = out / "mobilenetv2.vkb"
            args.bundle.write_bytes(compile_model(mobilenetv2(), target=args.target))
        if args.soak and args.soak_bundle is None:
            args.soak_bundle = out / "mlp_64_128_10.vkb"
            args.soak_bundle.write_bytes(compile_model(mlp(64, 128, 10), target=args.target))

    from bundles import read_bundle
    with read_bundle(args.bundle) as b:
        m = b.manifest
        print(f"bundle {args.bundle.name}: {args.bundle.stat().st_size / 2**20:.1f} MiB, {len(m['modules'])} SPIR-V "
              f"modules, {len(m['kernels'])} pipelines, {len(m['dispatches'])} dispatches, weights "
              f"{m['memory']['weights_bytes'] / 2**20:.1f} MiB, arena {m['memory']['arena_bytes'] / 2**20:.1f} MiB")
    rows = {"cold": [], "warm": [], "off": []}
    for trial in range(args.trials):
        cache = work / f"cache{trial}"
        rows["cold"].append(timed_load(args.bundle, cache, args.device, "on"))
        rows["warm"].append(timed_load(args.bundle, cache, args.device, "on"))
        rows["off"].append(timed_load(args.bundle, cache, args.device, "off"))
    print(f"device: {rows['cold'][0]['device']}; fresh process per load, median of {args.trials}")
    print(f"{'load':6} {'total ms':>9} {'pipelines ms':>13} {'weights ms':>11} {'import ms':>10}  pipeline cache")
    med = lambda rs, k: statistics.median(r[k] for r in rs) * 1e3
    for name, rs in rows.items():
        print(f"{name:6} {med(rs, 'seconds'):9.1f} {med(rs, 'pipelines_seconds'):13.1f} {med(rs, 'upload_seconds'):11.1f} "
              f"{med(rs, 'import_seconds'):10.1f}  {rs[-1]['pipeline_cache']}")
    if args.soak:
        s = soak(args.soak_bundle, args.soak, args.device)
        (r0, r1), (a0, a1) = s["rss_kib"], s["resources"]
        print(f"soak: {s['runs']} runs of {args.soak_bundle.name} on {s['device']} in {s['seconds']:.1f} s "
              f"({s['seconds'] / s['runs'] * 1e3:.3f} ms/run); RSS {r0} -> {r1} KiB ({r1 - r0:+d}); "
              f"device allocations {a0['allocations']} ({a0['allocated_bytes']} B) -> {a1['allocations']} "
              f"({a1['allocated_bytes']} B); live objects {a0['live']} -> {a1['live']}; "
              f"outputs bit-identical {s['identical']}/{s['runs']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
