"""Smoke test of benchmarks/bench_models.py: the MLP, 2 timed runs, in a subprocess."""

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_bench_models_mlp(tmp_path):
    out = tmp_path / "bench.json"
    env = {**os.environ, "COLUMNS": "200"}
    env.pop("VKC_VALIDATION", None)
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "bench_models.py"), "--models", "mlp", "--repeat", "2",
         "--warmup", "1", "--json", str(out)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    log = f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
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
