"""The lifetime rules of input_arrays() (README, "Python API"): the arrays never point at unmapped
memory (they keep it alive after close()), are read-only while a run reads them, and belong to one
thread until its run; runs from several threads are serialized."""
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from compiler import compile_model
    from tests.bundles import test_fuzz
    path = tmp_path_factory.mktemp("lifetime") / "tiny.vkb"
    path.write_bytes(bytes(compile_model(test_fuzz.tiny_model(), target="generic")))
    return path


def _inputs(n, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((2, 16)).astype(np.float32) for _ in range(n)]


def test_arrays_outlive_close(tiny):
    """Writing into input_arrays() after close() touched freed memory (malloc(): invalid size, 2 runs
    in 3): in a child process, so a corrupted heap fails this test, not the session."""
    code = f"""
import numpy as np
from runtime_min import load, resources
base = resources()["allocations"]
for _ in range(5):
    m = load({str(tiny)!r}, trusted=True)
    f = m.input_arrays()
    m.close()
    for _ in range(200):
        f["x"][...] = np.float32(7)
        assert f["x"].flags.writeable and float(f["x"][1, 3]) == 7.0
    kept = resources()["allocations"]
    del f
    assert resources()["allocations"] == base < kept, (base, kept, resources())
print("ok")
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": str(ROOT), "MALLOC_CHECK_": "3"})
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-3000:]


def test_arrays_read_only_while_their_run_reads_them(tiny):
    from runtime_min import load
    xa, xb = _inputs(2)
    with load(tiny) as m:
        want_b = m.run({"x": xb})["y"]
        for _ in range(20):
            f = m.input_arrays()
            h = m.run_async({"x": xb})
            with pytest.raises(ValueError, match="read-only"):
                f["x"][...] = xa
            assert np.array_equal(h.wait()["y"], want_b)
            f["x"][...] = xa  # waited for: writable again
        # in place, pipelined: the arrays of the run in flight refuse writes until it is waited for
        want_a = m.run({"x": xa})["y"]
        f = m.input_arrays()
        f["x"][...] = xa
        h = m.run_async(f)
        assert not f["x"].flags.writeable
        g = m.input_arrays()  # the other I/O set: free
        g["x"][...] = xb
        h2 = m.run_async(g)
        assert np.array_equal(h.wait()["y"], want_a) and np.array_equal(h2.wait()["y"], want_b)
        assert f["x"].flags.writeable and g["x"].flags.writeable


def test_threads(tiny):
    """Runs from two threads are serialized (each gets its own input's result); input arrays handed
    to one thread are refused to another until that thread's run."""
    from runtime_min import VkcRuntimeError, load
    xs = _inputs(8, seed=1)
    with load(tiny) as m:
        want = [m.run({"x": x})["y"] for x in xs]
        wrong = []

        def worker(k):
            for i in range(60):
                j = (i + k) % len(xs)
                if not np.array_equal(m.run({"x": xs[j]})["y"], want[j]):
                    wrong.append((k, i))

        threads = [threading.Thread(target=worker, args=(k,)) for k in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not wrong

        f = m.input_arrays()
        f["x"][...] = xs[0]
        errors = []

        def other():
            for call in (m.input_arrays, lambda: m.run_async({"x": xs[1]})):
                try:
                    call()
                except VkcRuntimeError as e:
                    errors.append(str(e))

        t = threading.Thread(target=other)
        t.start()
        t.join()
        assert len(errors) == 2 and all("another thread holds this model's next input arrays" in e for e in errors)
        assert np.array_equal(m.run(f)["y"], want[0])
        t = threading.Thread(target=lambda: errors.append(m.run({"x": xs[1]})["y"]))
        t.start()
        t.join()
        assert np.array_equal(errors[-1], want[1])  # after its run the memory is free again
