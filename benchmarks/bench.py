#!/usr/bin/env python3
"""vkc against its peers on one device, in one run: models, GEMMs and conv layers; tables last.

    python -m benchmarks.bench                                   # models, vkc vs onnxruntime
    python -m benchmarks.bench --peers ncnn,iree,ort --gemm --convs --profile --json out/bench.json

Sections (each prints one table at the end, in this order):
  models   (default on; --models '' turns it off) the MLP 784-1024-1024-10, MobileNetV2, ResNet-18,
           ResNet-50, SqueezeNet (the onnx wheel's light_squeezenet), EfficientNet-B0 at batch 1 and
           224x224, and ResNet-50 at batch 8 and 32: tests/models/zoo.py builders, random weights.
  --gemm   C = A @ B, both operands inputs, square sizes --gemm-sizes: ms, GFLOP/s, % of peak.
  --convs  every distinct Conv layer of ResNet-50 and MobileNetV2 (batch 1, 224), one model each,
           weights constant: ms and GFLOP/s; a per-model total weighted by how often each occurs.
  --profile  vkc's per-dispatch GPU times (Model.profile) for each model: time in matmul/conv
           kernels and their GFLOP/s, other kernels, and what the wall time adds (dispatch overhead).

Systems: vkc compiled for each of --targets (the first, `host` by default, is the one every ratio
divides by: on lavapipe host is the lavapipe profile), then --peers from benchmarks/peers.py: ncnn
(Vulkan), iree (vulkan-spirv), ort (onnxruntime CPU). Every system's first run is checked against
onnxruntime (worst relative L2 over the outputs): a system above --tolerance shows 'wrong' and is not
timed; one that cannot convert/compile a workload shows 'n/a: <reason>'; the run goes on.

Timing: each system's own blocking Python call (vkc: Model.run, inputs copied in and outputs out),
--warmup untimed runs, then rounds in which every system still running is timed once, in rotating
order, so that load from other processes on the machine hits every system alike. A system stops at
--repeat runs, or once its timed seconds would pass --budget-s (after at least 3 runs). A system
whose one run (or the estimate from ResNet-50 batch 1 x batch) leaves no room for 3 runs in the
budget shows 'skipped: over budget'. Reported: median ms, (runs), and peer/vkc (> 1: vkc faster).
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parent.parent

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from benchmarks import peers as peers_mod  # noqa: E402
from benchmarks.cli import command_line, vkc_commit  # noqa: E402
from tests import onnx_builders as ob  # noqa: E402
from tests.harness import random_feeds  # noqa: E402

console = Console(width=None if sys.stdout.isatty() else 220, highlight=False)


def _zoo():
    from tests.models import zoo
    return zoo


# key -> (label, builder, (base key, batch factor) for the over-budget estimate)
MODELS: dict[str, tuple[str, Callable[[], onnx.ModelProto], tuple | None]] = {
    "mlp": ("MLP 784-1024-1024-10", lambda: ob.mlp(784, 1024, 1024, 10), None),
    "mobilenet_v2": ("MobileNetV2", lambda: _zoo().mobilenet_v2(), None),
    "resnet18": ("ResNet-18", lambda: _zoo().resnet18(), None),
    "resnet50": ("ResNet-50", lambda: _zoo().resnet50(), None),
    "squeezenet": ("SqueezeNet (light)", lambda: ob.light_model("squeezenet"), None),
    "efficientnet_b0": ("EfficientNet-B0", lambda: _zoo().efficientnet_b0(), None),
    "resnet50_b8": ("ResNet-50 batch 8", lambda: _zoo().resnet50(batch=8), ("resnet50", 8)),
    "resnet50_b32": ("ResNet-50 batch 32", lambda: _zoo().resnet50(batch=32), ("resnet50", 32)),
}
GEMM_SIZES = [256, 512, 1024, 2048, 4096]
CONV_MODELS = {"resnet50": lambda: _zoo().resnet50(), "mobilenet_v2": lambda: _zoo().mobilenet_v2()}
MIN_RUNS = 3


# ---------------------------------------------------------------------------------------------
# systems
# ---------------------------------------------------------------------------------------------

@dataclass
class System:
    name: str                 # column name: "vkc", "vkc:generic", "ncnn", ...
    label: str
    prepare: Callable         # (proto, workdir) -> runner; runner.close() if it has one
    is_vkc: bool = False
    info: dict = field(default_factory=dict)


def vkc_system(target: str, primary: bool, device) -> System:
    from compiler import compile_model
    from compiler.host import resolve_target

    resolved = resolve_target(target).name
    sysinfo = {"target": target, "resolved": resolved}

    def prepare(proto, workdir):
        from bundles import read_bundle
        from runtime_min import load

        t0 = time.perf_counter()
        bundle = compile_model(proto, target=target)
        compile_s = time.perf_counter() - t0
        model = load(bundle, device=device, validation=False)
        outs = {o.name: np.empty(o.shape, o.dtype) for o in model.outputs}

        def run(feeds):
            return dict(model.run(feeds, outs))

        run.model = model
        run.close = model.close
        run.meta = {"compile_s": compile_s, "dispatches": len(read_bundle(bundle).manifest["dispatches"]),
                    "bundle_bytes": len(bundle)}
        sysinfo.setdefault("device", model.device_name)
        return run

    name = "vkc" if primary else f"vkc:{target}"
    return System(name, f"vkc --target {target} ({resolved})", prepare, is_vkc=True, info=sysinfo)


def peer_system(name: str, args) -> System:
    kw = {}
    if name == "iree" and args.iree_vulkan_target != "auto":
        kw["vulkan_target"] = args.iree_vulkan_target or None
    peer = peers_mod.make_peer(name, **kw)
    return System(name, peer.label, peer.prepare, info={"version": peer.version(), "kw": kw, "probe": peer.probe})


# ---------------------------------------------------------------------------------------------
# probe: a peer whose single call may take minutes (IREE on lavapipe) first runs in a child process
# that is stopped once it is over budget; the in-process runs reuse its compiled artifacts.
# ---------------------------------------------------------------------------------------------

def _probe_child(spec_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    status = Path(spec["status"])

    def note(**kv):
        with status.open("a") as f:
            f.write(json.dumps(kv) + "\n")

    peer = peers_mod.make_peer(spec["peer"], **spec["kw"])
    model = onnx.load(spec["model"])
    with np.load(spec["feeds"]) as z:
        feeds = {k: z[k] for k in z.files}
    try:
        runner = peer.prepare(model, Path(spec["workdir"]))
    except Exception as exc:  # noqa: BLE001
        note(error=_reason(exc))
        return 0
    note(prepared=time.time())
    for i in (1, 2):
        t0 = time.perf_counter()
        try:
            out = runner(feeds)
        except Exception as exc:  # noqa: BLE001
            note(error=f"run failed: {_reason(exc)}")
            return 0
        dt = time.perf_counter() - t0
        if i == 1:
            np.savez(spec["outputs"], **{f"o{j}": np.asarray(v) for j, v in enumerate(out.values())})
        note(**{f"run{i}": dt, "at": time.time()})
    return 0


def probe_peer(s: System, proto, feeds, reference, workdir: Path, budget: float, args,
               min_runs: int = MIN_RUNS) -> dict:
    """Run the peer twice in a child process. Returns {"status": ..., "est": s/run, "rel_l2": ...}."""
    workdir.mkdir(parents=True, exist_ok=True)
    pdir = workdir / "probe"
    pdir.mkdir(exist_ok=True)
    onnx.save(proto, pdir / "model.onnx")
    np.savez(pdir / "feeds.npz", **feeds)
    status = pdir / "status.jsonl"
    status.unlink(missing_ok=True)
    spec = {"peer": s.name, "kw": s.info.get("kw", {}), "model": str(pdir / "model.onnx"),
            "feeds": str(pdir / "feeds.npz"), "status": str(status), "outputs": str(pdir / "outputs.npz"),
            "workdir": str(workdir)}
    (pdir / "spec.json").write_text(json.dumps(spec))
    proc = subprocess.Popen([sys.executable, "-m", "benchmarks.bench", "--probe-child", str(pdir / "spec.json")],
                            cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=(pdir / "stderr.log").open("w"))
    t_start, result, notes = time.time(), None, {}
    try:
        while result is None:
            time.sleep(0.5)
            if status.exists():
                for line in status.read_text().splitlines():
                    notes.update(json.loads(line))
            now = time.time()
            if "error" in notes:
                result = {"status": f"n/a: {notes['error']}"}
            elif "run2" in notes:
                result = {"status": "ok", "est": notes["run2"]}
            elif "run1" in notes and now - notes["at"] > budget / min_runs:
                result = {"status": f"skipped: over budget (a run > {budget / min_runs:.0f} s; first run "
                                    f"{notes['run1']:.0f} s)", "one_run_s": notes["run1"]}
            elif "prepared" in notes and "run1" not in notes and now - notes["prepared"] > budget:
                result = {"status": f"skipped: over budget (first run > {budget:.0f} s)"}
            elif "prepared" not in notes and now - t_start > args.prepare_timeout_s:
                result = {"status": f"n/a: prepare took over {args.prepare_timeout_s:.0f} s"}
            elif proc.poll() is not None:
                for line in (status.read_text().splitlines() if status.exists() else []):
                    notes.update(json.loads(line))
                if "error" in notes:
                    result = {"status": f"n/a: {notes['error']}"}
                elif "run2" in notes:
                    result = {"status": "ok", "est": notes["run2"]}
                else:
                    err = [ln for ln in (pdir / "stderr.log").read_text().splitlines() if ln.strip()]
                    result = {"status": f"n/a: crashed (exit {proc.returncode}): {(err or [''])[-1][:120]}"}
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    if (pdir / "outputs.npz").exists() and "run1" in notes:
        with np.load(pdir / "outputs.npz") as z:
            got = {name: z[f"o{j}"] for j, name in enumerate(reference)}
        result["rel_l2"] = peers_mod.worst_rel_l2(got, reference)
    result["probe_s"] = time.time() - t_start
    return result


# ---------------------------------------------------------------------------------------------
# one workload: check every system against onnxruntime, then time them interleaved
# ---------------------------------------------------------------------------------------------

def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    first = text[0] if text else type(exc).__name__
    return first if isinstance(exc, peers_mod.PeerError) else f"{type(exc).__name__}: {first}"


def _release(runner) -> None:
    close = getattr(runner, "close", None)
    if close:
        try:
            close()
        except Exception:  # noqa: BLE001
            pass


def bench_workload(key: str, label: str, proto: onnx.ModelProto, systems: list[System], args,
                   estimates: dict[str, float] | None = None, flops: int = 0, budget_s: float | None = None,
                   repeat: int | None = None, profile: bool = False, min_runs: int = MIN_RUNS,
                   warmup: int | None = None) -> dict:
    budget = args.budget_s if budget_s is None else budget_s
    warmup = args.warmup if warmup is None else warmup
    repeat = args.repeat if repeat is None else repeat
    row: dict = {"key": key, "label": label, "flops": flops, "systems": {}}
    feeds = random_feeds(proto, seed=args.seed)
    ref_runner = peers_mod.OnnxRuntimeCPU().prepare(proto, Path(args.workdir))
    reference = ref_runner(feeds)
    del ref_runner

    live: dict[str, dict] = {}
    for s in systems:
        res = row["systems"][s.name] = {"status": "ok"}
        est = (estimates or {}).get(s.name)
        if estimates is not None and est is None:
            res["status"] = "skipped: no figure at the smaller size (over budget or n/a there)"
            continue
        if est is not None and est * min_runs > budget:
            res["status"] = (f"skipped: over budget (est. {est:.0f} s/run)" if est < 1e8
                             else "skipped: over budget (at a smaller size already)")
            continue
        workdir = Path(args.workdir) / key / s.name.replace(":", "_")
        if s.info.get("probe") and args.probe:
            pr = probe_peer(s, proto, feeds, reference, workdir, budget, args, min_runs)
            res.update({k: v for k, v in pr.items() if k != "status"})
            if pr["status"] == "ok" and not pr.get("rel_l2", 0.0) <= args.tolerance:
                pr["status"] = f"wrong (rel L2 {pr['rel_l2']:.1e})"
            elif pr["status"] == "ok" and pr["est"] * min_runs > budget:
                pr["status"] = f"skipped: over budget ({pr['est']:.1f} s/run)"
                res["one_run_s"] = pr["est"]
            if pr["status"] != "ok":
                res["status"] = pr["status"]
                continue
        t0 = time.perf_counter()
        try:
            runner = s.prepare(proto, workdir)
        except Exception as exc:  # noqa: BLE001 - a peer that cannot convert must not end the run
            if args.verbose:
                traceback.print_exc()
            res["status"] = f"n/a: {_reason(exc)}"
            continue
        res["prepare_s"] = time.perf_counter() - t0
        res.update(getattr(runner, "meta", {}))
        try:
            t0 = time.perf_counter()
            out = runner(feeds)
            res["first_run_s"] = time.perf_counter() - t0
        except Exception as exc:  # noqa: BLE001
            if args.verbose:
                traceback.print_exc()
            res["status"] = f"n/a: run failed: {_reason(exc)}"
            _release(runner)
            continue
        err = peers_mod.worst_rel_l2(out, reference)
        res["rel_l2"] = err
        if not err <= args.tolerance:
            res["status"] = f"wrong (rel L2 {err:.1e})"
            _release(runner)
            continue
        live[s.name] = {"runner": runner, "times": [], "spent": 0.0, "est": res["first_run_s"]}
    if warmup < 1:  # no warm-up: budget from the checked run
        for name, st in list(live.items()):
            if st["est"] * min_runs > budget:
                row["systems"][name]["status"] = f"skipped: over budget ({st['est']:.1f} s/run)"
                _release(st["runner"])
                del live[name]

    # warm-up (also measures the steady run time: a first run may compile pipelines)
    for name, st in list(live.items()):
        for _ in range(warmup):
            t0 = time.perf_counter()
            st["runner"](feeds)
            st["est"] = time.perf_counter() - t0
            if st["est"] * min_runs > budget:
                break
        if st["est"] * min_runs > budget:
            row["systems"][name]["status"] = f"skipped: over budget ({st['est']:.1f} s/run)"
            row["systems"][name]["one_run_s"] = st["est"]
            _release(st["runner"])
            del live[name]

    # interleaved rounds
    order = list(live)
    rnd = 0
    while order:
        active = []
        rot = order[rnd % len(order):] + order[:rnd % len(order)]
        for name in rot:
            st = live[name]
            n = len(st["times"])
            if n >= repeat or (n >= min_runs and st["spent"] + st["est"] > budget):
                continue
            runner = st["runner"]
            t0 = time.perf_counter()
            runner(feeds)
            dt = time.perf_counter() - t0
            st["times"].append(dt)
            st["spent"] += dt
            st["est"] = statistics.median(st["times"])
            active.append(name)
        order = [n for n in order if n in active]
        rnd += 1

    for name, st in live.items():
        res = row["systems"][name]
        t = st["times"]
        res.update({"ms": statistics.median(t) * 1e3, "runs": len(t), "min_ms": min(t) * 1e3,
                    "times_ms": [round(x * 1e3, 4) for x in t]})
        if len(t) >= 4:
            q = np.percentile(t, [25, 75])
            res["iqr_rel"] = float((q[1] - q[0]) / statistics.median(t))
        if flops:
            res["gflops"] = flops / (res["ms"] * 1e-3) / 1e9
    # vkc profile of the primary target, while its model is still loaded
    prim = systems[0]
    if profile and prim.is_vkc and prim.name in live:
        try:
            row["profile"] = profile_summary(live[prim.name]["runner"].model, feeds,
                                             row["systems"][prim.name]["ms"])
        except Exception as exc:  # noqa: BLE001
            row["profile"] = {"error": _reason(exc)}
    for st in live.values():
        _release(st["runner"])
    live.clear()
    gc.collect()
    vk = row["systems"].get(prim.name, {})
    for name, res in row["systems"].items():
        if name != prim.name and "ms" in res and "ms" in vk:
            res["ratio"] = res["ms"] / vk["ms"]
    return row


HEAVY = re.compile(r"matmul|conv|gemm|im2col|splitk|winograd", re.I)


def profile_summary(model, feeds, wall_ms: float) -> dict:
    """Sum the per-dispatch GPU times: matmul/conv kernels (and their GFLOP/s) vs the rest."""
    d = model.profile(feeds, repeat=5 if wall_ms < 5000 else 1)
    heavy = [x for x in d if HEAVY.search(x.kernel)]
    other = [x for x in d if not HEAVY.search(x.kernel)]
    hs, os_ = sum(x.seconds for x in heavy), sum(x.seconds for x in other)
    flops = sum(x.flops for x in d)
    by_kernel: dict[str, list] = {}
    for x in d:
        k = re.sub(r"_\d+x\d+(x\d+)*", "", x.kernel)
        e = by_kernel.setdefault(k, [0, 0.0, 0])
        e[0] += 1
        e[1] += x.seconds
        e[2] += x.flops
    top = sorted(by_kernel.items(), key=lambda kv: -kv[1][1])[:6]
    return {"dispatches": len(d), "sum_ms": (hs + os_) * 1e3, "wall_ms": wall_ms,
            "heavy_ms": hs * 1e3, "heavy_n": len(heavy),
            "heavy_gflops": sum(x.flops for x in heavy) / hs / 1e9 if hs else 0.0,
            "other_ms": os_ * 1e3, "other_n": len(other), "flops": flops,
            "overhead_ms": wall_ms - (hs + os_) * 1e3,
            "top": [{"kernel": k, "n": v[0], "ms": v[1] * 1e3, "gflops": v[2] / v[1] / 1e9 if v[1] else 0.0}
                    for k, v in top]}


# ---------------------------------------------------------------------------------------------
# workloads: GEMMs and conv layers
# ---------------------------------------------------------------------------------------------

def gemm_model(n: int) -> onnx.ModelProto:
    g = helper.make_graph([helper.make_node("MatMul", ["A", "B"], ["C"])], f"gemm{n}",
                          [helper.make_tensor_value_info("A", TensorProto.FLOAT, [n, n]),
                           helper.make_tensor_value_info("B", TensorProto.FLOAT, [n, n])],
                          [helper.make_tensor_value_info("C", TensorProto.FLOAT, [n, n])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], producer_name="vkc-bench")
    m.ir_version = 8
    return m


@dataclass(frozen=True)
class ConvSpec:
    cin: int
    h: int
    w: int
    cout: int
    k: tuple
    stride: tuple
    pads: tuple
    dilations: tuple
    group: int
    bias: bool

    @property
    def out_hw(self) -> tuple:
        oh = (self.h + self.pads[0] + self.pads[2] - self.dilations[0] * (self.k[0] - 1) - 1) // self.stride[0] + 1
        ow = (self.w + self.pads[1] + self.pads[3] - self.dilations[1] * (self.k[1] - 1) - 1) // self.stride[1] + 1
        return oh, ow

    @property
    def flops(self) -> int:
        oh, ow = self.out_hw
        return 2 * self.cout * oh * ow * (self.cin // self.group) * self.k[0] * self.k[1]

    def describe(self) -> str:
        kind = "dw" if self.group == self.cin and self.group > 1 else (f"g{self.group}" if self.group > 1 else "")
        return (f"{self.cin}->{self.cout} {self.k[0]}x{self.k[1]}{kind} s{self.stride[0]} "
                f"@{self.h}x{self.w}")


def distinct_convs(proto: onnx.ModelProto) -> list[tuple[ConvSpec, int]]:
    """Every distinct Conv of a model (with its input shape) and how many times it occurs."""
    inferred = onnx.shape_inference.infer_shapes(proto)
    shapes = {}
    for vi in list(inferred.graph.input) + list(inferred.graph.value_info):
        shapes[vi.name] = [d.dim_value for d in vi.type.tensor_type.shape.dim]
    inits = {t.name: t for t in proto.graph.initializer}
    counts: dict[ConvSpec, int] = {}
    for node in proto.graph.node:
        if node.op_type != "Conv":
            continue
        a = {x.name: helper.get_attribute_value(x) for x in node.attribute}
        wshape = list(inits[node.input[1]].dims)
        _, cin, h, w = shapes[node.input[0]]
        k = tuple(wshape[2:])
        spec = ConvSpec(cin, h, w, wshape[0], k, tuple(a.get("strides", [1, 1])),
                        tuple(a.get("pads", [0, 0, 0, 0])), tuple(a.get("dilations", [1, 1])),
                        int(a.get("group", 1)), len(node.input) > 2 and bool(node.input[2]))
        counts[spec] = counts.get(spec, 0) + 1
    return list(counts.items())


def conv_model(spec: ConvSpec, seed: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    cpg = spec.cin // spec.group
    wt = (rng.standard_normal((spec.cout, cpg, *spec.k)) * np.sqrt(2.0 / (cpg * spec.k[0] * spec.k[1])))
    inits = [numpy_helper.from_array(wt.astype(np.float32), "W")]
    ins = ["X", "W"]
    if spec.bias:
        inits.append(numpy_helper.from_array((0.1 * rng.standard_normal(spec.cout)).astype(np.float32), "b"))
        ins.append("b")
    node = helper.make_node("Conv", ins, ["Y"], kernel_shape=list(spec.k), strides=list(spec.stride),
                            pads=list(spec.pads), dilations=list(spec.dilations), group=spec.group)
    oh, ow = spec.out_hw
    g = helper.make_graph([node], "conv",
                          [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, spec.cin, spec.h, spec.w])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, spec.cout, oh, ow])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], producer_name="vkc-bench")
    m.ir_version = 8
    return m


# ---------------------------------------------------------------------------------------------
# device facts
# ---------------------------------------------------------------------------------------------

def cpu_facts() -> dict:
    facts = {"cores": os.cpu_count(), "model": platform.processor() or "?", "mhz": None}
    try:
        text = Path("/proc/cpuinfo").read_text()
        m = re.search(r"model name\s*:\s*(.*)", text)
        facts["model"] = m.group(1).strip() if m else facts["model"]
        m = re.search(r"cpu MHz\s*:\s*([\d.]+)", text)
        facts["mhz"] = float(m.group(1)) if m else None
        flags = set(re.search(r"flags\s*:\s*(.*)", text).group(1).split())
        facts["simd"] = "avx512f" if "avx512f" in flags else "avx2" if "avx2" in flags else "sse"
        facts["fma"] = "fma" in flags
    except (OSError, AttributeError):
        pass
    return facts


def device_peak_gflops(device_name: str, override: float | None) -> tuple[float | None, str]:
    """The device's fp32 peak. lavapipe (llvmpipe): its JIT's vector width from the device name
    ('256 bits') x 2 flops per FMA x 2 FMA pipes x cores x clock; else --peak-gflops."""
    if override:
        return override, f"{override:g} GFLOP/s (--peak-gflops)"
    m = re.search(r"llvmpipe.*?(\d+) bits", device_name or "")
    f = cpu_facts()
    if m and f.get("mhz"):
        lanes = int(m.group(1)) // 32
        per_cycle = lanes * 2 * (2 if f.get("fma") else 1)
        peak = per_cycle * f["cores"] * f["mhz"] / 1e3
        return peak, (f"{peak:.0f} GFLOP/s = {f['cores']} cores x {f['mhz'] / 1e3:.2f} GHz x {per_cycle} "
                      f"flop/cycle ({lanes}-lane fp32 FMA x 2 pipes; llvmpipe's {m.group(1)}-bit vectors) at the "
                      f"clock /proc/cpuinfo reports (a boost clock can exceed it)")
    return None, "unknown (pass --peak-gflops)"


def versions(systems: list[System]) -> dict:
    v = {"python": platform.python_version(), "onnx": onnx.__version__}
    try:
        import onnxruntime
        v["onnxruntime"] = onnxruntime.__version__
    except ImportError:
        pass
    for s in systems:
        if not s.is_vkc and s.name != "ort":
            v[s.name] = s.info.get("version")
    v["vkc_commit"] = vkc_commit()
    return v


# ---------------------------------------------------------------------------------------------
# tables
# ---------------------------------------------------------------------------------------------

def _cell(res: dict, gflops: bool = False) -> str:
    if "ms" not in res:
        st = res.get("status", "?")
        return f"[yellow]{st}[/]" if st.startswith(("n/a", "skipped")) else f"[red]{st}[/]"
    s = f"{res['ms']:,.3f} ({res['runs']})" if res["ms"] < 100 else f"{res['ms']:,.1f} ({res['runs']})"
    return s


def _ratio(res: dict) -> str:
    r = res.get("ratio")
    if r is None:
        return ""
    return f"[green]{r:.2f}[/]" if r >= 1 else f"[red]{r:.2f}[/]"


def table_models(rows, systems, title) -> Table:
    t = Table(title=title)
    t.add_column("model")
    prim = systems[0].name
    for s in systems:
        t.add_column(f"{s.name} ms", justify="right")
        if s.name != prim:
            t.add_column(f"{s.name}/vkc", justify="right")
    t.add_column("rel L2 (worst timed)", justify="right")
    for r in rows:
        if "error" in r:
            t.add_row(r["label"], f"[red]error: {r['error'][:80]}[/]", *[""] * (2 * len(systems) - 1))
            continue
        cells = [r["label"]]
        for s in systems:
            res = r["systems"].get(s.name, {})
            cells.append(_cell(res))
            if s.name != prim:
                cells.append(_ratio(res))
        errs = [res["rel_l2"] for res in r["systems"].values() if "rel_l2" in res and "ms" in res]
        cells.append(f"{max(errs):.1e}" if errs else "")
        t.add_row(*cells)
    return t


def table_flops(rows, systems, title, peak, first_col="workload", count_col=False) -> Table:
    t = Table(title=title)
    t.add_column(first_col)
    if count_col:
        t.add_column("x", justify="right")
    t.add_column("GFLOP", justify="right")
    prim = systems[0].name
    for s in systems:
        t.add_column(f"{s.name} ms", justify="right")
        t.add_column(f"{s.name} GFLOP/s" + (" (%peak)" if peak and s.name == prim else ""), justify="right")
        if s.name != prim:
            t.add_column(f"{s.name}/vkc", justify="right")
    for r in rows:
        if "error" in r:
            t.add_row(r["label"], f"[red]error: {r['error'][:80]}[/]")
            continue
        cells = [r["label"]] + ([str(r.get("count", ""))] if count_col else []) + [f"{r['flops'] / 1e9:.3g}"]
        for s in systems:
            res = r["systems"].get(s.name, {})
            cells.append(_cell(res))
            gf = res.get("gflops")
            g = "" if gf is None else f"{gf:.1f}"
            if gf is not None and peak and s.name == prim:
                g += f" ({100 * gf / peak:.0f}%)"
            cells.append(g)
            if s.name != prim:
                cells.append(_ratio(res))
        t.add_row(*cells)
    return t


def table_profile(rows) -> Table:
    t = Table(title="vkc per-dispatch profile (Model.profile, median of 5 runs, 1 past 5 s; dispatches separated "
                    "by barriers)")
    for c in ("model", "wall ms", "dispatches", "matmul/conv ms (n)", "matmul/conv GFLOP/s", "other ms (n)",
              "wall - sum ms", "top kernels (ms, GFLOP/s)"):
        t.add_column(c, justify="left" if c in ("model", "top kernels (ms, GFLOP/s)") else "right")
    for r in rows:
        p = r.get("profile")
        if not p:
            continue
        if "error" in p:
            t.add_row(r["label"], f"[red]{p['error']}[/]")
            continue
        top = "; ".join(f"{k['kernel']} x{k['n']} {k['ms']:.1f} ms {k['gflops']:.1f}" for k in p["top"][:3])
        t.add_row(r["label"], f"{p['wall_ms']:.1f}", str(p["dispatches"]),
                  f"{p['heavy_ms']:.1f} ({p['heavy_n']})", f"{p['heavy_gflops']:.1f}",
                  f"{p['other_ms']:.1f} ({p['other_n']})", f"{p['overhead_ms']:.1f}", top)
    return t


# ---------------------------------------------------------------------------------------------

def _partial_dump(args, results: dict, section: str, rows: list) -> None:
    """Every finished row goes to --json at once (with "partial": true), so a stopped run keeps them."""
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"partial": True, **results, section: rows}, indent=1, default=str))


def _run_section(items, systems, args, scale_estimates: bool = False, results: dict | None = None,
                 section: str = "") -> list[dict]:
    """scale_estimates: a system's time for a workload is estimated from the previous one scaled by
    the flop ratio, so a system too slow for the next GEMM size is skipped without running it."""
    rows = []
    for key, label, build, extra in items:
        console.print(f"[bold]{label}[/] ...")
        t0 = time.perf_counter()
        try:
            proto = build()
            kw = dict(extra)
            prev = rows[-1] if rows and "systems" in rows[-1] else None
            if scale_estimates and prev:
                f = extra["flops"] / prev["flops"]
                kw["estimates"] = {n: (res["ms"] * 1e-3 if "ms" in res else res.get("one_run_s", 1e9)) * f
                                   for n, res in prev["systems"].items() if "ms" in res or "one_run_s" in res
                                   or res.get("status", "").startswith("skipped")}
                kw["estimates"] = {n: v for n, v in kw["estimates"].items() if v < 1e8} | {
                    n: 1e9 for n, res in prev["systems"].items() if res.get("status", "").startswith("skipped")}
                for n in [s.name for s in systems if s.name not in kw["estimates"]]:
                    kw["estimates"][n] = 0.0  # n/a or wrong before: try again
            row = bench_workload(key, label, proto, systems, args, **kw)
        except Exception as exc:  # noqa: BLE001 - one broken workload must not hide the others
            traceback.print_exc()
            row = {"key": key, "label": label, "error": _reason(exc)}
        row["wall_s"] = time.perf_counter() - t0
        _log_row(row)
        rows.append(row)
        _partial_dump(args, results or {}, section, rows)
    return rows


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--models", default=",".join(MODELS), help=f"comma-separated from {', '.join(MODELS)}; '' none")
    ap.add_argument("--peers", default="ort", help=f"comma-separated from {', '.join(peers_mod.PEERS)}; '' none "
                    "(onnxruntime still runs once per workload as the reference)")
    ap.add_argument("--targets", default="host,generic",
                    help="vkc profiles, comma-separated; ratios divide by the first (default host,generic)")
    ap.add_argument("--gemm", action="store_true", help="the GEMM section")
    ap.add_argument("--gemm-sizes", default=",".join(map(str, GEMM_SIZES)))
    ap.add_argument("--gemm-peers", default=None, help="peers for GEMMs (default: --peers)")
    ap.add_argument("--convs", action="store_true", help="the conv-layer section (vkc vs --conv-peers)")
    ap.add_argument("--conv-models", default=",".join(CONV_MODELS))
    ap.add_argument("--conv-peers", default="ort", help="peers for conv layers (default ort)")
    ap.add_argument("--conv-targets", default=None, help="vkc targets for conv layers (default: the first)")
    ap.add_argument("--conv-limit", type=int, default=0, help="at most this many layers per model (0: all)")
    ap.add_argument("--conv-budget-s", type=float, default=4.0, help="--budget-s for each conv layer")
    ap.add_argument("--profile", action="store_true", help="vkc per-dispatch profile of every model")
    ap.add_argument("--repeat", type=int, default=20, help="most timed runs per system and workload")
    ap.add_argument("--warmup", type=int, default=1, help="untimed runs after the checked one (default 1)")
    ap.add_argument("--budget-s", type=float, default=60.0,
                    help="timed seconds per system and workload (default 60); at least 3 runs or skipped")
    ap.add_argument("--batch-budget-s", type=float, default=150.0,
                    help="budget of the batch-8/32 rows, where 1 run is enough (default 150); systems whose "
                         "batch-1 time x batch is over it are skipped")
    ap.add_argument("--tolerance", type=float, default=1e-3, help="largest rel L2 error vs onnxruntime (1e-3)")
    ap.add_argument("--iree-vulkan-target", default="auto",
                    help="IREE --iree-vulkan-target (auto: llvmpipe on lavapipe, else IREE's default; '' none)")
    ap.add_argument("--no-probe", dest="probe", action="store_false",
                    help="run IREE's first calls in-process too (default: in a child process stopped past the budget)")
    ap.add_argument("--prepare-timeout-s", type=float, default=900.0, help="limit on a peer's conversion")
    ap.add_argument("--peak-gflops", type=float, default=None, help="device fp32 peak (default: derived on lavapipe)")
    ap.add_argument("--device", default=None, help="vkc's Vulkan device index or name substring")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workdir", default=None, help="peer conversions go here (default: a temporary folder)")
    ap.add_argument("--json", type=Path, default=None, help="also write every figure to this JSON file")
    ap.add_argument("--verbose", action="store_true", help="print tracebacks of peers that fail")
    return ap


def main(argv=None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)

    split = lambda s: [x.strip() for x in (s or "").split(",") if x.strip()]  # noqa: E731
    models, peer_names, targets = split(args.models), split(args.peers), split(args.targets)
    gemm_peers = split(args.gemm_peers) if args.gemm_peers is not None else peer_names
    conv_peers, conv_targets = split(args.conv_peers), split(args.conv_targets) or targets[:1]
    bad = [m for m in models if m not in MODELS] + [p for p in peer_names + gemm_peers + conv_peers
                                                    if p not in peers_mod.PEERS]
    bad += [m for m in split(args.conv_models) if m not in CONV_MODELS]
    if bad:
        ap.error(f"unknown model or peer: {', '.join(bad)}")
    if not targets:
        ap.error("--targets needs at least one vkc target")
    if args.device is not None and args.device.isdigit():
        args.device = int(args.device)
    tmp = None
    if args.workdir is None:
        tmp = tempfile.TemporaryDirectory(prefix="vkc-bench-")
        args.workdir = tmp.name

    started = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    commit_at_start = versions([]).get("vkc_commit")
    t_start = time.perf_counter()
    cache = {}

    def systems_for(tgts, peer_list):
        out = []
        for i, t in enumerate(tgts):
            k = ("vkc", t, i == 0)
            cache.setdefault(k, vkc_system(t, i == 0, args.device))
            out.append(cache[k])
        for p in peer_list:
            cache.setdefault(("peer", p), peer_system(p, args))
            out.append(cache[("peer", p)])
        return out

    msys = systems_for(targets, peer_names)
    results: dict = {"models": [], "gemm": [], "convs": []}

    if models:
        rows = []
        for key in models:  # in order: a batch row estimates from its batch-1 row
            label, build, base = MODELS[key]
            console.print(f"[bold]{label}[/] ...")
            t0 = time.perf_counter()
            try:
                kw = {}
                if base:  # a batch row: budget from the batch-1 row, fewer runs accepted
                    b = next((r for r in rows if r.get("key") == base[0] and "systems" in r), None)
                    kw["estimates"] = {n: res["ms"] * 1e-3 * base[1] for n, res in b["systems"].items()
                                       if "ms" in res} if b else None
                    kw.update(budget_s=args.batch_budget_s, min_runs=1, warmup=0)  # the checked run warms up
                row = bench_workload(key, label, build(), msys, args, profile=args.profile and not base, **kw)
            except Exception as exc:  # noqa: BLE001 - one broken model must not hide the others
                traceback.print_exc()
                row = {"key": key, "label": label, "error": _reason(exc)}
            row["wall_s"] = time.perf_counter() - t0
            _log_row(row)
            rows.append(row)
            _partial_dump(args, results, "models", rows)
        results["models"] = rows

    if args.gemm:
        gsys = systems_for(targets, gemm_peers)
        items = [(f"gemm{n}", f"{n}x{n}x{n}", (lambda n=n: gemm_model(n)), {"flops": 2 * n ** 3})
                 for n in map(int, split(args.gemm_sizes))]
        results["gemm"] = _run_section(items, gsys, args, scale_estimates=True, results=results, section="gemm")

    if args.convs:
        csys = systems_for(conv_targets, conv_peers)
        items, counts = [], []
        for mname in split(args.conv_models):
            specs = distinct_convs(CONV_MODELS[mname]())[:args.conv_limit or None]
            for i, (spec, count) in enumerate(specs):
                items.append((f"{mname}.conv{i}", f"{mname} {spec.describe()}", (lambda s=spec: conv_model(s)),
                              {"flops": spec.flops, "budget_s": args.conv_budget_s}))
                counts.append((mname, count, spec))
        crow = _run_section(items, csys, args, results=results, section="convs")
        for r, (mname, count, spec) in zip(crow, counts):
            r.update(model=mname, count=count, spec=vars(spec) if hasattr(spec, "__dict__") else str(spec))
        results["convs"] = crow

    # ---- summary and tables (last) ----
    device = next((s.info.get("device") for s in cache.values() if s.is_vkc and s.info.get("device")), "?")
    peak, peak_note = device_peak_gflops(device, args.peak_gflops)
    allsys = list(cache.values())
    vers = versions(allsys)
    if vers.get("vkc_commit") != commit_at_start:
        vers["vkc_commit"] = f"{commit_at_start} at the start, {vers.get('vkc_commit')} at the end"
    meta = {"date": started, "command": command_line(), "device": device,
            "cpu": cpu_facts(), "peak_gflops": peak, "peak_note": peak_note, "versions": vers,
            "targets": {s.name: s.info for s in allsys if s.is_vkc},
            "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
            "wall_s": time.perf_counter() - t_start}
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({**meta, **results}, indent=1, default=str))
        console.print(f"wrote {args.json}")

    failures = []
    for sec in results.values():
        for r in sec:
            if "error" in r:
                failures.append(f"{r['label']}: {r['error']}")
            for n, res in r.get("systems", {}).items():
                if n.startswith("vkc") and res.get("status", "ok") != "ok" and not res["status"].startswith("skipped"):
                    failures.append(f"{r['label']} {n}: {res['status']}")
    console.print(f"\n[bold]device[/] {device}; peak {peak_note}")
    console.print("[bold]versions[/] " + ", ".join(f"{k} {v}" for k, v in meta["versions"].items()))
    console.print("[bold]vkc targets[/] " + ", ".join(f"{s.name} = {s.label}" for s in allsys if s.is_vkc))
    console.print(f"[bold]settings[/] repeat <= {args.repeat}, warm-up {args.warmup}, budget {args.budget_s:g} s "
                  f"per system and workload, tolerance {args.tolerance:g}; {meta['wall_s']:.0f} s in all; "
                  f"started {started}")
    caption = "median ms (timed runs); peer/vkc > 1: vkc faster; every system checked vs onnxruntime first"
    if results["models"]:
        t = table_models(results["models"], msys, f"Models on {device} (batch 1 unless said)")
        t.caption = caption
        console.print(t)
    if any(r.get("profile") for r in results["models"]):
        console.print(table_profile(results["models"]))
    if results["gemm"]:
        t = table_flops(results["gemm"], systems_for(targets, gemm_peers), f"GEMM C = A @ B (both inputs), fp32, "
                        f"on {device}", peak, "M x N x K")
        t.caption = caption + f"; peak {peak_note}"
        console.print(t)
    if results["convs"]:
        csys = systems_for(conv_targets, conv_peers)
        t = table_flops(results["convs"], csys, f"Distinct conv layers (batch 1, 224) on {device}", peak,
                        "layer", count_col=True)
        t.caption = caption + "; x: occurrences in the model"
        console.print(t)
        console.print(table_conv_totals(results["convs"], csys, peak))
    if failures:
        console.print("[red]vkc failures:[/]\n  " + "\n  ".join(failures))
    if tmp is not None:
        tmp.cleanup()
    return 1 if failures else 0


def _log_row(row):
    if "systems" in row:
        parts = [f"{n} {res['ms']:.3f} ms ({res['runs']})" if "ms" in res else f"{n} {res['status']}"
                 for n, res in row["systems"].items()]
        console.print("  " + "; ".join(parts) + f"  [{row['wall_s']:.0f} s]")


def table_conv_totals(rows, systems, peak) -> Table:
    t = Table(title="Conv layers per model: sum over every occurrence (x count)")
    t.add_column("model")
    t.add_column("GFLOP", justify="right")
    prim = systems[0].name
    for s in systems:
        t.add_column(f"{s.name} ms", justify="right")
        t.add_column(f"{s.name} GFLOP/s", justify="right")
        if s.name != prim:
            t.add_column(f"{s.name}/vkc", justify="right")
    for model in dict.fromkeys(r.get("model") for r in rows):
        rs = [r for r in rows if r.get("model") == model and "systems" in r]
        fl = sum(r["flops"] * r["count"] for r in rs)
        cells = [model, f"{fl / 1e9:.2f}"]
        base = None
        for s in systems:
            ok = all("ms" in r["systems"].get(s.name, {}) for r in rs)
            if not ok:
                cells += ["incomplete", ""] + ([""] if s.name != prim else [])
                continue
            ms = sum(r["systems"][s.name]["ms"] * r["count"] for r in rs)
            cells += [f"{ms:.1f}", f"{fl / ms / 1e6:.1f}"]
            if s.name == prim:
                base = ms
            else:
                cells.append(f"{ms / base:.2f}" if base else "")
        t.add_row(*cells)
    return t


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--probe-child":
        sys.exit(_probe_child(sys.argv[2]))
    sys.exit(main())
