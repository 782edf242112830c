"""vkc_run_fetch: only the outputs asked for come back from the device (a decode step's token id
without its logits): tests/runtime_min/test_fetch.py's bundle (a Relu "logits" and its
logits_argmax) run through the C API by tests/native/api_check.c, each fetch set recorded once and
reused, mixed with full runs; the outputs fetched bit-identical to runtime_min's, every other
output's buffer and vkc_output_data memory left as poisoned; also under ASan + UBSan; validation
silent."""
import os
import shutil
import subprocess

import numpy as np
import pytest

pytestmark = pytest.mark.skipif(shutil.which(os.environ.get("CC", "cc")) is None, reason="no C compiler")

# (fetch set or None for vkc_run_variant) per run, in order: every set twice, full runs between
PLAN = [None, "logits_argmax", "logits", "-", "logits_argmax", None, "logits,logits_argmax", "-", "logits"]


@pytest.fixture(scope="module")
def argmax_bundle(tmp_path_factory):
    from tests.runtime_min.test_fetch import relu_argmax_bundle
    path = tmp_path_factory.mktemp("fetch") / "relu_argmax.vkb"
    path.write_bytes(relu_argmax_bundle())
    return path


@pytest.mark.parametrize("lib", ["build", "asan_build"])
def test_only_fetched_outputs_come_back(request, c_program, argmax_bundle, tmp_path, lib):
    from runtime_min import load
    from tests.runtime_min.test_fetch import feeds
    exe = c_program("api_check.c", request.getfixturevalue(lib), tmp_path)
    steps, want = [], []
    with load(str(argmax_bundle)) as model:
        for k, fetch in enumerate(PLAN):
            d = tmp_path / f"run{k}"
            d.mkdir()
            np.save(d / "x.npy", feeds(k)["x"])
            names = None if fetch is None else [] if fetch == "-" else fetch.split(",")
            want.append(model.run(feeds(k), fetch=names))
            steps += ["run", str(d)] if fetch is None else ["fetch", str(d), fetch]
    env = {**os.environ, "VKC_VALIDATION": "1", "ASAN_OPTIONS": "detect_leaks=0", "UBSAN_OPTIONS": "halt_on_error=1"}
    r = subprocess.run([str(exe), str(argmax_bundle), *steps], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stdout + r.stderr[-4000:]
    variant = "lavapipe x=1x3x40"
    assert r.stdout.splitlines() == [f"ok {'run' if f is None else 'fetch'} {variant}" for f in PLAN] + \
        ["validation 0"], r.stdout
    for k, outs in enumerate(want):
        got = {p.name[len("out."):-len(".npy")] for p in (tmp_path / f"run{k}").glob("out.*.npy")}
        assert got == set(outs), (k, PLAN[k], got)
        for name, value in outs.items():
            assert np.load(tmp_path / f"run{k}" / f"out.{name}.npy").tobytes() == value.tobytes(), (k, name)
