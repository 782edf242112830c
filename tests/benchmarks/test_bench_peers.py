"""Smoke test of benchmarks/bench.py (the one benchmark command) and benchmarks/peers.py.

Needs no peer beyond onnxruntime: ncnn / IREE (the `bench` extra) are not installed in CI.
"""

import json
from pathlib import Path

import numpy as np
import pytest

from tests.benchmarks.bench_run import REPO, run_benchmark



@pytest.mark.timeout(1200)  # the benchmark's own limit is 900 s
def test_bench_sections(tmp_path):
    """MLP, one GEMM and two conv layers, vkc (two targets) vs onnxruntime: tables last, JSON figures."""
    out = tmp_path / "bench.json"
    proc, log = run_benchmark(
        "bench", "--models", "mlp", "--peers", "ort", "--targets", "host,generic", "--gemm", "--gemm-sizes",
        "128", "--convs", "--conv-models", "mobilenet_v2", "--conv-limit", "2", "--repeat", "3", "--warmup", "1",
        "--budget-s", "5", "--profile", "--json", str(out), columns=220, timeout=900)
    assert proc.returncode == 0, log
    lines = proc.stdout.rstrip().splitlines()
    first = next((i for i, ln in enumerate(lines) if "Models on" in ln), None)
    assert first is not None, log
    tail = "\n".join(lines[first:])  # every table comes after the per-workload log
    for title in ("Models on", "per-dispatch profile", "GEMM C = A @ B", "Distinct conv layers", "Conv layers per model"):
        assert title in tail, f"{title!r} missing\n{log}"
    for column in ("vkc ms", "vkc:generic ms", "ort ms", "ort/vkc", "GFLOP/s"):
        assert column in tail, f"column {column!r} missing\n{log}"

    res = json.loads(out.read_text())
    assert res["device"] and res["versions"]["onnxruntime"]
    (mlp,) = res["models"]
    for name in ("vkc", "vkc:generic", "ort"):
        r = mlp["systems"][name]
        assert r["status"] == "ok" and r["runs"] == 3 and r["ms"] > 0 and r["rel_l2"] <= 1e-3, (name, r)
    assert mlp["systems"]["ort"]["ratio"] > 0
    assert mlp["profile"]["dispatches"] >= 3 and mlp["profile"]["heavy_ms"] > 0
    (gemm,) = res["gemm"]
    assert gemm["flops"] == 2 * 128 ** 3 and gemm["systems"]["vkc"]["gflops"] > 0
    assert len(res["convs"]) == 2 and all(r["count"] >= 1 and r["systems"]["vkc"]["gflops"] > 0
                                          for r in res["convs"])


def test_failing_peer_is_reported_not_fatal(tmp_path, monkeypatch):
    """A peer that cannot convert shows 'n/a: <reason>'; a wrong one shows 'wrong' and is not timed."""
    from benchmarks import bench
    from tests import onnx_builders as ob
    from benchmarks import peers

    class Broken(peers.Peer):
        name, label = "broken", "broken"

        def prepare(self, model, workdir):
            raise peers.PeerError("pnnx failed (exit 1): unsupported op")

    class Wrong(peers.Peer):
        name, label = "wrong", "wrong"

        def prepare(self, model, workdir):
            names = [o.name for o in model.graph.output]
            return lambda feeds: {n: np.zeros((1, 10), np.float32) for n in names}

    systems = [bench.System("ort", "ort", peers.OnnxRuntimeCPU().prepare),
               bench.System("broken", "broken", Broken().prepare), bench.System("wrong", "wrong", Wrong().prepare)]
    args = bench.build_parser().parse_args(["--repeat", "3", "--budget-s", "2", "--workdir", str(tmp_path)])
    row = bench.bench_workload("mlp", "mlp", ob.mlp(16, 32, 10), systems, args)
    assert row["systems"]["ort"]["status"] == "ok" and row["systems"]["ort"]["runs"] == 3
    assert row["systems"]["broken"]["status"] == "n/a: pnnx failed (exit 1): unsupported op"
    assert row["systems"]["wrong"]["status"].startswith("wrong (rel L2")
    assert "ms" not in row["systems"]["wrong"]


def test_over_budget_is_skipped(tmp_path):
    from benchmarks import bench
    from tests import onnx_builders as ob
    from benchmarks import peers

    systems = [bench.System("ort", "ort", peers.OnnxRuntimeCPU().prepare)]
    args = bench.build_parser().parse_args(["--budget-s", "1", "--workdir", str(tmp_path)])
    row = bench.bench_workload("mlp_b8", "mlp", ob.mlp(16, 32, 10), systems, args, estimates={"ort": 5.0})
    assert row["systems"]["ort"]["status"].startswith("skipped: over budget")


def test_distinct_convs_of_mobilenet_v2():
    from benchmarks import bench
    from tests.models import zoo

    convs = bench.distinct_convs(zoo.mobilenet_v2())
    assert sum(n for _, n in convs) == 52  # torchvision mobilenet_v2 has 52 Conv2d
    assert len(convs) < 52
    first = convs[0][0]
    assert (first.cin, first.cout, first.k, first.stride, first.h) == (3, 32, (3, 3), (2, 2), 224)
    assert first.flops == 2 * 32 * 112 * 112 * 3 * 9


@pytest.mark.parametrize("n", [64])
def test_gemm_model_runs_on_onnxruntime(n):
    from benchmarks import bench
    from benchmarks import peers

    run = peers.OnnxRuntimeCPU().prepare(bench.gemm_model(n), Path("."))
    a, b = np.ones((n, n), np.float32), np.eye(n, dtype=np.float32)
    assert np.allclose(run({"A": a, "B": b})["C"], a)
