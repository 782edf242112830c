"""benchmarks/lavapipe/formulations.py still runs: every formulation compiles, the three that read
real operands agree with numpy (a smoke run at 64^3; the figures are in RESULTS.md)."""
import re

from tests.benchmarks.bench_run import run_benchmark


def test_formulations_smoke():
    out, log = run_benchmark("lavapipe.formulations", "--size", "64", "--rounds", "1", "--tile", "4,1,8",
                             timeout=300)
    assert out.returncode == 0, log
    rows = [line for line in out.stdout.splitlines() if re.search(r"\d+\.\d+\s+\d+\.\d+", line)]
    assert len(rows) == 5, out.stdout
    errors = [float(m) for m in re.findall(r"\s(\d\.\de[-+]\d+)$", out.stdout, re.M)]
    assert len(errors) == 3 and max(errors) < 1e-5, out.stdout
