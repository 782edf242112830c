"""The runtime suites run with the Khronos validation layer on, and any message it reports fails the
test that caused it. The pipeline and SPIR-V caches go to a temporary folder, not ~/.cache.
`bundle` / `model`: the hand-built test bundle of shaders.py, and it loaded under validation."""
import os

import pytest


@pytest.fixture(autouse=True, scope="module")
def runtime_environment(tmp_path_factory):
    saved = {k: os.environ.get(k) for k in ("VKC_VALIDATION", "VKC_CACHE_DIR", "VKC_DEVICE", "VKC_ROBUST")}
    os.environ.update(VKC_VALIDATION="1", VKC_CACHE_DIR=str(tmp_path_factory.mktemp("vkc_cache")))
    for k in ("VKC_DEVICE", "VKC_ROBUST"):
        os.environ.pop(k, None)
    yield
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(autouse=True)
def no_validation_messages():
    import runtime_min
    runtime_min.clear_validation_messages()
    yield
    assert runtime_min.validation_messages() == []


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    from tests.runtime_min.shaders import build
    return build(tmp_path_factory.mktemp("spv"))


@pytest.fixture(scope="module")
def model(bundle):
    from runtime_min import load
    with load(bundle, validation=True) as m:
        yield m
