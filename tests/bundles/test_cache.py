"""One cache-folder rule for the compiler (SPIR-V, tuning) and the runtime (pipeline caches)."""
from pathlib import Path

import pytest

from bundles.cache import cache_dir, default_cache_dir
from compiler.tuning_cache import load_tuning, store_tuning, tuning_path
from runtime_min.pipelines import cache_file


@pytest.fixture
def env(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for name in ("VKC_CACHE_DIR", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_default_is_home_cache(env, tmp_path):
    assert cache_dir() == default_cache_dir() == tmp_path / "home/.cache/vkc"


def test_absolute_xdg_cache_home(env, tmp_path):
    env.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg/vkc"


@pytest.mark.parametrize("value", ["relative/cache", ""])
def test_relative_or_empty_xdg_cache_home_is_ignored(env, tmp_path, value):
    env.setenv("XDG_CACHE_HOME", value)  # the XDG spec: a relative path is invalid, ignore it
    assert cache_dir() == tmp_path / "home/.cache/vkc"


def test_vkc_cache_dir_wins(env, tmp_path):
    env.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    env.setenv("VKC_CACHE_DIR", str(tmp_path / "mine"))
    assert cache_dir() == tmp_path / "mine"
    assert tuning_path() == tmp_path / "mine/tuning.json"


@pytest.mark.parametrize("value", ["off", "OFF"])
def test_off_disables_caches_but_not_tuning(env, tmp_path, value):
    env.setenv("VKC_CACHE_DIR", value)
    assert cache_dir() is None
    assert tuning_path() == tmp_path / "home/.cache/vkc/tuning.json"


def test_runtime_pipeline_cache_follows_the_rule(env, tmp_path):
    class Info:
        device_uuid, driver_uuid, cache_header = "dev", "drv", b""

    env.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_file(Info()) == tmp_path / "xdg/vkc/pipelines/dev-drv.bin"
    assert cache_file(Info(), cache_dir=tmp_path / "arg") == tmp_path / "arg/pipelines/dev-drv.bin"
    env.setenv("VKC_CACHE_DIR", "off")
    assert cache_file(Info()) is None


def test_tuning_round_trip(tmp_path):
    path = tmp_path / "t" / "tuning.json"
    assert load_tuning("gpu", path) == ()
    store_tuning("gpu", {"8x8x8x1:strided": {"tile_m": 32, "reg_m": 4}}, path)
    store_tuning("cpu", {"p": {"cpu_rows": 4}}, path)
    assert load_tuning("gpu", path) == (("8x8x8x1:strided", (("reg_m", 4), ("tile_m", 32))),)
    path.write_text("not json")
    assert load_tuning("gpu", path) == ()
    assert isinstance(tuning_path(), Path)
