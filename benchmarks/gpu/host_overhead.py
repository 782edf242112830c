"""Host overhead of `Model.run`: wall time minus the GPU time of the work it submits, per bundle.

    python3 -m benchmarks.gpu.host_overhead                                   # zoo models, target nvidia
    python3 -m benchmarks.gpu.host_overhead --target lavapipe --models mobilenet_v2 --batches 1
    python3 -m benchmarks.gpu.host_overhead a.vkb b.vkb                       # pre-compiled bundles
    VKC_IO_MEMORY=host python3 -m benchmarks.gpu.host_overhead ...            # inputs staged in system memory

Compiling needs the compiler and its pip shader toolchain (tests/models/zoo.py builds the models, random weights); a
.vkb path needs only runtime_min. Columns (microseconds, medians over --repeat runs of
run(feeds, outputs) into preallocated outputs):
  wall       host to host: feeds checked and written, submit, wait, outputs read (timing off)
  timed wall the same with timing=True (timestamps recorded), in a second load
  GPU        that load's command buffer on the GPU (timestamps: copy-in, dispatches, copy-out);
             kernels: the dispatches alone
  wall-GPU   timed wall minus GPU, per run, then the median: what the host adds
  in place   the same with each run's inputs written beforehand into Model.input_arrays() (untimed)
  async      wall per run with two runs in flight (run_async, one wait behind)
  in GB/s    the input written into the runtime's mapped input memory by the host (np.copyto)
Against an older runtime (no Model.gpu_time, no run_async) the GPU columns print '-': run this
script from the new tree at the old commit's runtime (PYTHONPATH) for its wall times.
"""
import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]


def compiled(names, batches, target, out: Path):
    from tests.models import zoo

    from compiler.compile import compile_model
    out.mkdir(parents=True, exist_ok=True)
    for name in names:
        for batch in batches:
            path = out / f"{name}_b{batch}_{target}.vkb"
            if not path.exists():
                path.write_bytes(compile_model(getattr(zoo, name)(batch=batch), target=target))
            yield path


def timed_runs(model, feeds, repeat: int, in_place: bool = False):
    """Wall seconds of `repeat` run() calls into preallocated outputs, and GPU times where the model has
    them. in_place: each run's inputs written beforehand (untimed) into Model.input_arrays()."""
    outs = {o.name: np.empty(o.shape, o.dtype) for o in model.outputs}
    for _ in range(3):
        model.run(feeds, outs)
    walls, gpus = [], []
    for _ in range(repeat):
        if in_place:
            run_feeds = model.input_arrays()
            for name, a in run_feeds.items():
                np.copyto(a, feeds[name])
        else:
            run_feeds = feeds
        t = time.perf_counter()
        model.run(run_feeds, outs)
        walls.append(time.perf_counter() - t)
        if getattr(model, "gpu_time", None) is not None:
            gpus.append(model.gpu_time)
    return walls, gpus


def measure(path, repeat: int):
    from runtime_min import load
    with load(path) as model:  # timing off, as deployed
        rng = np.random.default_rng(0)
        feeds = {i.name: rng.standard_normal(i.shape).astype(i.dtype) for i in model.inputs}
        walls, _ = timed_runs(model, feeds, repeat)
        pipelined = None
        if hasattr(model, "run_async"):
            h = model.run_async(feeds)
            t = time.perf_counter()
            for _ in range(repeat):
                nxt = model.run_async(feeds)
                h.wait()
                h = nxt
            h.wait()
            pipelined = (time.perf_counter() - t) / repeat
        # Host write speed into the runtime's mapped input memory (where run() puts the first input).
        view = model._variants[0].runs[0][0][0] if hasattr(model, "_variants") else model._in_views[0]
        x = feeds[model.inputs[0].name]
        copies = []
        for _ in range(10):
            t = time.perf_counter()
            np.copyto(view, x)
            copies.append(time.perf_counter() - t)
        gbps = x.nbytes / statistics.median(copies) / 1e9
        device = model.device_name
    gpus, timed_walls, place = [], [], []
    try:
        with load(path, timing=True) as timed:  # GPU times from timestamps, in a second load
            timed_walls, gpus = timed_runs(timed, feeds, repeat)
            if hasattr(timed, "input_arrays"):
                walls_in_place, gpus_in_place = timed_runs(timed, feeds, repeat, in_place=True)
                place = [w - g.total for w, g in zip(walls_in_place, gpus_in_place)]
    except TypeError:  # an older runtime: no timing
        pass
    us = lambda v: f"{statistics.median(v) * 1e6:.0f}" if v else "-"
    gpu = [g.total for g in gpus]
    return (Path(path).name, f"{x.nbytes / 1e6:.2f}", us(walls), us(timed_walls), us(gpu),
            us([g.kernels for g in gpus]), us([w - g for w, g in zip(timed_walls, gpu)]), us(place), f"{pipelined * 1e6:.0f}" if pipelined else "-", f"{gbps:.1f}", device)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("bundles", nargs="*", help="pre-compiled .vkb files (else the zoo models are compiled)")
    p.add_argument("--models", default="mobilenet_v2,resnet18")
    p.add_argument("--batches", default="1,32")
    p.add_argument("--target", default="nvidia")
    p.add_argument("--out", default="/tmp/vkc_host_overhead", help="where compiled bundles go")
    p.add_argument("--repeat", type=int, default=50)
    a = p.parse_args()
    paths = a.bundles or compiled(a.models.split(","), [int(b) for b in a.batches.split(",")], a.target,
                                  Path(a.out))
    head = ("bundle", "in MB", "wall us", "timed wall us", "GPU us", "kernels us", "wall-GPU us", "in place us", "async us",
            "in GB/s", "device")
    rows = [head]
    for path in paths:
        rows.append(measure(path, a.repeat))
        print("  ".join(rows[-1]), file=sys.stderr, flush=True)
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    for r in rows:
        print("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))))


if __name__ == "__main__":
    main()
