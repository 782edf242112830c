"""`vkc serve`: starts a local Ray instance, serves, and on SIGINT drains and stops (nothing left
running). Runs as a subprocess, as a user runs it."""
import os
import signal
import subprocess
import sys
import time

import pytest
import requests

from benchmarks.serving.client import free_port


@pytest.mark.timeout(120)
def test_vkc_serve_serves_until_interrupted(bundle):
    port = free_port()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [os.getcwd(), os.environ.get("PYTHONPATH")])))
    proc = subprocess.Popen([sys.executable, "-m", "compiler.cli", "serve", str(bundle), "--port", str(port),
                             "--max-batch", "2"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env)
    try:
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("serving "):
                break
        assert lines and lines[-1].startswith(f"serving {bundle} at http://127.0.0.1:{port}/"), "".join(lines)
        health = requests.get(f"http://127.0.0.1:{port}/health", timeout=30).json()
        assert health["max_batch"] == 2 and health["device"].startswith("llvmpipe")
        r = requests.post(f"http://127.0.0.1:{port}/", json={"inputs": {"x": [[0.5] * 16]}}, timeout=30)
        assert r.status_code == 200 and len(r.json()["outputs"]["y"][0]) == 8
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0 and "draining" in out, out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_vkc_serve_refuses_a_missing_bundle(tmp_path):
    r = subprocess.run([sys.executable, "-m", "compiler.cli", "serve", str(tmp_path / "none.vkb")],
                       capture_output=True, text=True)
    assert r.returncode != 0 and "does not exist" in r.stderr and r.stderr.count("\n") == 1, r.stderr
