#!/usr/bin/env python3
"""Per-dispatch GPU time of one model under profile variants, dispatches of one kernel and grid
grouped: where a model's time goes, and which dispatches a variant changed.

    python3 benchmarks/h200/dispatch_table.py bert 1 fp16 default,cs16
    python3 benchmarks/h200/dispatch_table.py resnet50 32 fp16 default,cs16
    python3 benchmarks/h200/dispatch_table.py mobilenet_v2 1 fp32 lavapipe   # a profile name runs too

Models and variants are profile_variants.py's (a name of compiler.targets.TARGETS is taken as that
profile). Each variant is timed host to host first (Model.bench, median of 30 after 10 warm-ups),
which also brings the GPU to its clocks, then profiled (Model.profile, median of --repeat runs
with a barrier between every two dispatches). Profiled cold, one run at a time, a ResNet-50 b32
bundle's dispatches summed to 4x its wall time on an H200 (session 11's run4); profiled after its
timing (profile_variants.py, session 10's run5) the same model's summed to 0.8 of it.
A row: dispatches x median us = total us, then (kernel, workgroups, K step, split-K).
"""
from __future__ import annotations

import argparse
import collections
import statistics

import profile_variants as pv
from compiler.compile import compile_with_kernels
from compiler.targets import TARGETS
from runtime_min import load


def table(name: str, batch: int, precision: str, variant: str, repeat: int) -> list[str]:
    m, feeds = pv.model_and_feeds(name, batch)
    target = TARGETS[variant] if variant in TARGETS else pv.variant_target(variant)
    bundle, kernels = compile_with_kernels(m, target=target, precision=precision)
    with load(bundle) as model:
        wall = statistics.median(model.bench(feeds, warmup=10, repeat=30))
        times = model.profile(feeds, repeat=repeat)
    groups: dict[tuple, list[float]] = collections.OrderedDict()
    for t, k in zip(times, kernels):
        key = (t.kernel, k.groups, k.params.get("BK"), k.params.get("split_k"))
        groups.setdefault(key, []).append(t.seconds)
    lines = [f"== {name} b{batch} {precision} {variant}: wall {wall * 1e3:.3f} ms, GPU "
             f"{sum(t.seconds for t in times) * 1e3:.3f} ms, {len(times)} dispatches"]
    for key, secs in sorted(groups.items(), key=lambda kv: -sum(kv[1])):
        lines.append(f"   {len(secs):3d} x {statistics.median(secs) * 1e6:7.1f} us = "
                     f"{sum(secs) * 1e6:8.1f}  {key}")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("batch", type=int)
    ap.add_argument("precision", choices=["fp32", "fp16", "fp16-matmul"])
    ap.add_argument("variants", help="comma-separated profile_variants.py names or profile names")
    ap.add_argument("--repeat", type=int, default=10)
    args = ap.parse_args()
    for variant in args.variants.split(","):
        print("\n".join(table(args.model, args.batch, args.precision, variant, args.repeat)), flush=True)


if __name__ == "__main__":
    main()
