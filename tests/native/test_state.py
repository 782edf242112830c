"""libvkc's state (format 1.3, FORMAT.md "State"): a bundle keeping a cache between runs
(tests/compiler/test_state.py's cache_model: a prefill variant of 3 rows and a decode variant of
one) driven through the C API by tests/native/api_check.c, step for step as runtime_min runs it:
outputs and state bit-identical, one state for both variants, zeros at load and after
vkc_reset_state, a written state read by the next run; misuse refused in one line; the same
under ASan + UBSan; the validation layer (synchronization validation on) silent. The manifest's
state rules give the Python reader's verdict and check name."""
import copy
import json
import os
import shutil
import struct
import subprocess

import numpy as np
import pytest

pytestmark = pytest.mark.skipif(shutil.which(os.environ.get("CC", "cc")) is None, reason="no C compiler")

ROWS = np.random.default_rng(0).normal(size=(7, 4)).astype(np.float32)
# (rows, position) per run: the prefill variant, then the decode variant twice
RUNS = [(ROWS[0:3], 0), (ROWS[3:4], 3), (ROWS[4:5], 4)]
AFTER_WRITE = (ROWS[5:6], 2)
WRITTEN = np.random.default_rng(1).normal(size=(1, 8, 4)).astype(np.float32)


@pytest.fixture(scope="module")
def cache_bundle(tmp_path_factory):
    from compiler.compile import compile_model
    from tests.compiler.test_state import cache_model
    path = tmp_path_factory.mktemp("state") / "cache.vkb"
    path.write_bytes(compile_model(cache_model(), variants=[{"x": [1, 3, 4]}, {"x": [1, 1, 4]}], target="lavapipe"))
    return path


def _feeds(rows, position):
    return {"x": rows[None], "pos": np.array([position], np.int64)}


def _steps(folder):
    """api_check's steps for the scenario, its input files written under `folder`."""
    def run_dir(k, rows, position):
        d = folder / f"run{k}"
        d.mkdir(exist_ok=True)
        for name, value in _feeds(rows, position).items():
            np.save(d / f"{name}.npy", value)
        return ["run", str(d)]
    np.save(folder / "written.npy", WRITTEN)
    np.save(folder / "short.npy", WRITTEN[:, :4])
    steps = ["info", "read", "cache", str(folder / "initial.npy")]
    for k, (rows, position) in enumerate(RUNS):
        steps += run_dir(k, rows, position)
    steps += ["read", "cache", str(folder / "after.npy"), "write", "cache", str(folder / "written.npy"),
              *run_dir(3, *AFTER_WRITE), "read", "cache", str(folder / "after_write.npy"),
              "reset", "read", "cache", str(folder / "reset.npy"), *run_dir(4, *RUNS[0]),
              "read", "nope", str(folder / "nope.npy"), "read-size", "cache", "3",
              "write", "cache", str(folder / "short.npy")]
    return steps


EXPECTED_LINES = [
    "state cache float32 128 1 8 4", "ok info 1", "ok read cache",
    "ok run lavapipe x=1x3x4,pos=1", "ok run lavapipe x=1x1x4,pos=1", "ok run lavapipe x=1x1x4,pos=1",
    "ok read cache", "ok write cache", "ok run lavapipe x=1x1x4,pos=1", "ok read cache", "ok reset",
    "ok read cache", "ok run lavapipe x=1x3x4,pos=1",
    "error: 'nope' is not a state of this model; its state: 'cache'",
    "error: state 'cache': expected a buffer of 128 bytes (float32[1, 8, 4]), got 3",
    "error: state 'cache': expected a buffer of 128 bytes (float32[1, 8, 4]), got 64",
    "validation 0"]


def _reference(bundle):
    """runtime_min through the same scenario: outputs per run, state after the runs and after the
    write's run."""
    from runtime_min import load
    with load(str(bundle)) as model:
        outs = [model.run(_feeds(*run))["y"] for run in RUNS]
        after = model.read_state("cache")
        model.write_state("cache", WRITTEN)
        outs.append(model.run(_feeds(*AFTER_WRITE))["y"])
        after_write = model.read_state("cache")
    return outs, after, after_write


def _api_check(exe, bundle, folder, env=None):
    r = subprocess.run([str(exe), str(bundle), *_steps(folder)], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "VKC_VALIDATION": "1", **(env or {})})
    assert r.returncode == 0, r.stdout + r.stderr[-4000:]
    return r.stdout.splitlines()


def test_state_agrees_with_runtime_min(build, c_program, cache_bundle, tmp_path):
    exe = c_program("api_check.c", build, tmp_path)
    lines = _api_check(exe, cache_bundle, tmp_path)
    assert lines == EXPECTED_LINES, "\n".join(lines)
    outs, after, after_write = _reference(cache_bundle)
    for k, want in enumerate(outs):
        assert np.load(tmp_path / f"run{k}" / "out.y.npy").tobytes() == want.tobytes(), k
    assert np.load(tmp_path / "after.npy").tobytes() == after.tobytes()
    assert np.load(tmp_path / "after_write.npy").tobytes() == after_write.tobytes()
    assert not np.load(tmp_path / "initial.npy").any() and not np.load(tmp_path / "reset.npy").any()
    # after the reset, the first run again: its output again
    assert np.load(tmp_path / "run4" / "out.y.npy").tobytes() == outs[0].tobytes()
    # the written state was read by the next run: rows 0, 1 and 3.. of WRITTEN, row 2 the new one
    want = WRITTEN.copy()
    want[0, 2] = AFTER_WRITE[0][0]
    assert np.load(tmp_path / "after_write.npy").tobytes() == want.tobytes()


def test_state_under_asan(asan_build, c_program, cache_bundle, tmp_path):
    exe = c_program("api_check.c", asan_build, tmp_path)
    lines = _api_check(exe, cache_bundle, tmp_path,
                         env={"ASAN_OPTIONS": "detect_leaks=0", "UBSAN_OPTIONS": "halt_on_error=1"})
    assert lines == EXPECTED_LINES, "\n".join(lines)


def _stray_state_tensor(m):
    for v in m["variants"]:
        v["memory"]["state_bytes"] = 512
    m["variants"][0]["tensors"].append({"name": "stray", "dtype": "float32", "shape": [1], "nbytes": 4,
                                        "memory": "state", "offset": 256})


def _arena_tensor(m):
    v = m["variants"][0]
    v["state"][0]["tensor"] = v["inputs"][0]["tensor"]


# edit -> the phrase of the C reader's refusal (None: accepted)
STATE_EDITS = {
    "valid": (lambda m: None, None),
    "state-in-the-arena": (_arena_tensor, "state[0].tensor = 0 is a arena tensor; state must be in the state buffer"),
    "state-named-as-an-input": (lambda m: m["variants"][0]["state"][0].update(name="x"),
                                "state[0].name = 'x' is used twice among the inputs, outputs and state"),
    "state-output-missing": (lambda m: m["variants"][1]["state"][0].pop("output"), "state[0].output is missing"),
    "state-not-a-list": (lambda m: m["variants"][0].update(state={"cache": 0}), "state = {...} (1 keys) must be a list"),
    "state-bytes-short": (lambda m: [v["memory"].update(state_bytes=64) for v in m["variants"]],
                          "runs past the end of state (64 bytes)"),
    "state-differs-between-variants": (lambda m: m["variants"][1]["state"][0].update(output="other"),
                                       "variants[1].state differs from variants[0].state"),
    "state-tensor-outside-every-entry": (_stray_state_tensor,
                                         "tensors[5].memory = 'state' but the tensor lies in no state entry's bytes"),
    "state-memory-unknown": (lambda m: m["variants"][0]["tensors"][0].update(memory="cache"),
                             "memory = 'cache' must be 'arena', 'weights' or 'state'"),
}


@pytest.mark.parametrize("edit", list(STATE_EDITS))
def test_state_rules_same_verdict_in_c(build, cache_bundle, edit):
    """Each state rule of the manifest through vkc_check and the Python reader: same verdict, same
    check name (every edit but "valid" fails check `manifest`)."""
    from bundles import read_bundle
    from tests.bundles.test_fuzz import assemble
    from tests.native.test_native import python_verdict
    with read_bundle(str(cache_bundle)) as b:
        m, mods, weights = copy.deepcopy(b.manifest), [bytes(x) for x in b.spirv], bytes(b.weights)
    change, phrase = STATE_EDITS[edit]
    change(m)
    data = assemble([(1, 8, json.dumps(m).encode())] + [(2, 16, x) for x in mods] + [(3, 4096, weights)])
    r = subprocess.run([str(build / "vkc_fuzz")], input=struct.pack("<Q", len(data)) + data, capture_output=True,
                       timeout=60)
    line = r.stdout.decode().strip()
    verdict, check = python_verdict(data)
    assert (check or verdict) == ("ACCEPT" if phrase is None else "manifest"), (verdict, check)
    assert phrase is None or phrase in line, line
    assert line.split()[0] == verdict and (verdict == "ACCEPT" or line.split(" ", 2)[2].split(":")[0] == check), \
        (verdict, check, line)
