"""Every script of benchmarks/ still starts: `--help` (run in this process, as `python -m` runs
it) prints its usage and exits 0, and every library module imports. The GPU tools and probes
need an NVIDIA GPU (and torch) to measure; here they show they parse and import what CI has.
A new module under benchmarks/ is found, not listed, so it cannot escape the check."""
import contextlib
import importlib
import io
import runpy
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
# Imported by the scripts, never run themselves.
LIBRARIES = {"benchmarks.cli", "benchmarks.light_models", "benchmarks.peers", "benchmarks.transformer_profile",
             "benchmarks.gpu.cublas_timing", "benchmarks.gpu.kernel_table", "benchmarks.gpu.llama_widths",
             "benchmarks.serving.client",
             "benchmarks.serving.ort_engine"}


def modules():
    for path in sorted(BENCHMARKS.rglob("*.py")):
        if path.name != "__init__.py":
            yield ".".join(("benchmarks", *path.relative_to(BENCHMARKS).with_suffix("").parts))


SCRIPTS = [m for m in modules() if m not in LIBRARIES]


def test_libraries_are_modules_of_the_tree():
    assert LIBRARIES <= set(modules())


@pytest.mark.parametrize("module", sorted(LIBRARIES))
def test_library_imports(module):
    importlib.import_module(module)


@pytest.mark.parametrize("module", SCRIPTS)
def test_script_help(module, monkeypatch):
    monkeypatch.setattr(sys, "argv", [module, "--help"])
    monkeypatch.delitem(sys.modules, module, raising=False)  # run it afresh, as `python -m` does
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as done:
        runpy.run_module(module, run_name="__main__", alter_sys=False)
    assert done.value.code in (0, None), out.getvalue()
    assert len(out.getvalue().strip()) > 40, f"{module} --help printed no usage: {out.getvalue()!r}"
