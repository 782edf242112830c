"""pytest setup for the vkc suites.

- The repository root and tests/ go on sys.path, so ``compiler``, ``bundles``, ``runtime_min`` and
  the helpers ``harness`` / ``onnx_builders`` import without installing anything.
- ``check`` is the fixture form of ``harness.check_against_onnxruntime``.
- Marker ``slow``: the full-size model tests (deselect with ``-m "not slow"``).
"""

from __future__ import annotations

import os
import sys

import pytest

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(TESTS_DIR)
for p in (TESTS_DIR, REPO_ROOT):
    if p in sys.path:
        sys.path.remove(p)
    sys.path.insert(0, p)
# the repository root must win over tests/ (tests/compiler/ is a plain folder, not the package)
sys.path.remove(REPO_ROOT)
sys.path.insert(0, REPO_ROOT)


# The coopmat2 kernels' compiler that .ci/setup unpacks (.ci/newer_glslc.sh), unless one is named.
_NEWER_GLSLC = os.path.join(REPO_ROOT, ".toolchain", "glslc")
if "VKC_COOPMAT2_GLSLC" not in os.environ and os.access(_NEWER_GLSLC, os.X_OK):
    os.environ["VKC_COOPMAT2_GLSLC"] = _NEWER_GLSLC


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: full-size model tests (ResNet-50, SqueezeNet at 224x224)")


@pytest.fixture
def check():
    from harness import check_against_onnxruntime

    return check_against_onnxruntime


@pytest.fixture
def rng(request):
    """A generator seeded from the test id, so every test draws its own reproducible numbers."""
    import zlib

    import numpy as np

    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))
