"""compiler/host.py: `--target host` reads the local device; named profiles need no device."""
from dataclasses import replace

import pytest

from compiler.host import host_target, resolve_target
from compiler.targets import TARGETS, get_target
from compiler.tune import CANDIDATES, tune
from onnx_builders import small_cnn


def test_named_profiles_and_host():
    assert resolve_target("lavapipe") is TARGETS["lavapipe"] is get_target("lavapipe")
    custom = replace(TARGETS["generic"], name="custom")
    assert resolve_target(custom) is custom
    host = resolve_target("host")
    assert host.name.startswith("host:") and host == host_target()
    assert host.matmul in CANDIDATES
    with pytest.raises(ValueError, match="compiler.host.resolve_target"):
        get_target("host")  # targets.py is data: the device is host.py's business
    with pytest.raises(ValueError, match="unknown target 'nope'"):
        resolve_target("nope")


def test_tune_refuses_a_profile_without_candidates():
    odd = replace(TARGETS["generic"], name="odd", matmul="systolic")
    with pytest.raises(ValueError, match="'systolic', which has no tuning candidates"):
        tune(small_cnn(), target=odd, log=lambda _: None)
