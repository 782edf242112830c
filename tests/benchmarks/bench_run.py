"""Run a benchmark of benchmarks/ the way a user does (`python -m benchmarks.NAME`), in a subprocess."""
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def run_benchmark(module: str, *args: str, columns: int = 200, timeout: int = 600):
    """(the finished process, a log of its exit status and output for assertion messages).
    Without VKC_VALIDATION: benchmarks time the runtime as deployed, not under the layer."""
    env = {**os.environ, "COLUMNS": str(columns)}
    env.pop("VKC_VALIDATION", None)
    proc = subprocess.run([sys.executable, "-m", f"benchmarks.{module}", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    return proc, f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
