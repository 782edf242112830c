"""SPIR-V validation at load (bundles/spirv_val.py, runtime_min/pipelines.py validate_modules): a
re-sealed bundle whose module is invalid is refused in one line naming the module, before any driver
sees it; trusted=True skips it; a warm load pays a hash, not the validator; without the library
the load says it runs unvalidated."""
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from compiler import compile_model
    from tests.bundles import test_fuzz
    base = test_fuzz.Base(compile_model(test_fuzz.tiny_model(), target="generic"))
    folder = tmp_path_factory.mktemp("spirv")
    (folder / "good.vkb").write_bytes(base.data)
    rng = random.Random(3)
    while True:  # an unassigned opcode the reader's framing and interface checks let through
        family, data = test_fuzz.spirv_edit(rng, base)
        if family == "spirv:opcode":
            try:
                test_fuzz.read_bundle(data).close()
                break
            except test_fuzz.BundleError:
                pass
    (folder / "bad.vkb").write_bytes(data)
    return folder


def test_invalid_module_refused_in_one_line(tiny):
    from bundles import BundleError
    from runtime_min import load
    with pytest.raises(BundleError) as e:
        load(tiny / "bad.vkb")
    message = str(e.value)
    assert e.value.check == "spirv validation"
    assert "\n" not in message and "Invalid opcode" in message, message
    assert message.startswith("bundle check 'spirv validation' failed: module ") and "('" in message, message


def test_valid_bundle_validated_then_cached(tiny, tmp_path):
    from bundles import spirv_val
    from runtime_min import load
    spirv_val.validator()._valid.clear()  # as in a fresh process
    with load(tiny / "good.vkb", cache_dir=tmp_path) as m:
        assert m.spirv_validated and m.load_info["spirv_validation"].startswith("ok (2 modules"), m.load_info
    markers = list((tmp_path / "spirv-valid").rglob("*"))
    assert sum(p.is_file() for p in markers) == 2
    # A fresh process (a new Validator) finds the verdicts on disk and never calls the library.
    fresh = spirv_val.Validator()
    fresh._lib = None
    from bundles import read_bundle
    with read_bundle(tiny / "good.vkb") as b:
        assert all(fresh.validate(bytes(mod), folder=tmp_path) is None for mod in b.spirv)


def test_trusted_skips_validation(tiny):
    from runtime_min import load
    with load(tiny / "good.vkb", trusted=True) as m:
        assert not m.spirv_validated and m.load_info["spirv_validation"] == "skipped (trusted=True)"
        assert m.run({"x": __import__("numpy").ones((2, 16), "float32")})["y"].shape == (2, 8)


def test_without_the_library_says_unvalidated(tiny):
    code = f"""
import json, warnings
from runtime_min import load
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    for _ in range(2):
        with load({str(tiny / "good.vkb")!r}) as m:
            info = (m.spirv_validated, m.load_info["spirv_validation"])
print(json.dumps([info, [str(w.message) for w in caught]]))
"""
    env = {**os.environ, "VKC_SPIRV_TOOLS": "/nonexistent/libSPIRV-Tools-shared.so", "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    (validated, status), warned = json.loads(r.stdout.splitlines()[-1])
    assert not validated and status.startswith("off (/nonexistent/libSPIRV-Tools-shared.so could not be loaded")
    assert len(warned) == 1 and "run unvalidated" in warned[0], warned
