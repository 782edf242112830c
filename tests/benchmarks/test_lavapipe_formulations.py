"""benchmarks/lavapipe/formulations.py still runs: every formulation compiles, the three that read
real operands agree with numpy (a smoke run at 64^3; the figures are in RESULTS.md)."""
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_formulations_smoke():
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks/lavapipe/formulations.py"), "--size", "64",
                          "--rounds", "1", "--tile", "4,1,8"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [line for line in out.stdout.splitlines() if re.search(r"\d+\.\d+\s+\d+\.\d+", line)]
    assert len(rows) == 5, out.stdout
    errors = [float(m) for m in re.findall(r"\s(\d\.\de[-+]\d+)$", out.stdout, re.M)]
    assert len(errors) == 3 and max(errors) < 1e-5, out.stdout
