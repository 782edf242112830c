"""pytest setup for the vkc suites.

- The repository root is on the import path (pyproject's pytest ``pythonpath``), so ``compiler``,
  ``bundles``, ``runtime_min`` and the helpers (``tests.harness``, ``tests.onnx_builders``) import
  without installing anything.
- ``check`` is the fixture form of ``harness.check_against_onnxruntime``.
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


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: full-size model tests (ResNet-50, SqueezeNet at 224x224)")


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
