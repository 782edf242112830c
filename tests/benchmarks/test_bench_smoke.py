"""Smoke test of benchmarks/bench_models.py: the MLP, 2 timed runs, in a subprocess."""

import json

from tests.benchmarks.bench_run import run_benchmark


def test_bench_models_mlp(tmp_path):
    out = tmp_path / "bench.json"
    proc, log = run_benchmark("bench_models", "--models", "mlp", "--repeat", "2", "--warmup", "1",
                              "--json", str(out))
    assert proc.returncode == 0, log
    lines = proc.stdout.rstrip().splitlines()
    title = next((i for i, line in enumerate(lines) if "vkc on" in line and "median ms" in line), None)
    assert title is not None, log
    table = "\n".join(lines[title:])  # the table is printed last
    for column in ("model", "vkc ms", "onnxruntime ms", "onnxruntime/vkc", "rel L2", "arena", "lower bound"):
        assert column in table, f"column {column!r} missing\n{log}"
    assert "mlp 784-1024-1024-10" in table, log
    assert not any("error" in line for line in lines[title:]), log

    results = json.loads(out.read_text())["results"]
    assert [r["model"] for r in results] == ["mlp"]
    r = results[0]
    assert r["vkc_runs"] == 2 and r["peers"]["onnxruntime"]["runs"] == 2
    assert r["vkc_ms"] > 0 and r["peers"]["onnxruntime"]["ms"] > 0
    assert r["rel_l2"] <= 1e-4
    assert r["lower_bound_bytes"] <= r["arena_bytes"] <= r["intermediates_sum_bytes"]
