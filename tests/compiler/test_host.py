"""compiler/host.py: `--target host` reads the local device; named profiles need no device."""
from dataclasses import replace
from types import SimpleNamespace

import pytest

from compiler import host
from compiler.host import host_target, resolve_target
from compiler.targets import TARGETS, get_target
from compiler.tune import CANDIDATES, tune
from tests.onnx_builders import small_cnn


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



class _ClockingModel:
    """A model whose profiled time falls as its GPU clocks up over `ramp` calls, then stays; or,
    with `alternate`, never settles."""

    def __init__(self, ramp: int = 0, alternate: bool = False):
        self.calls, self.ramp, self.alternate = 0, ramp, alternate

    def profile(self, feeds, repeat=10):
        self.calls += 1
        ms = 1 + self.calls % 2 if self.alternate else 1 + 4 * max(0, self.ramp - self.calls) / self.ramp
        return [SimpleNamespace(seconds=ms * 1e-3)]


def test_warm_up_runs_until_the_time_is_steady(monkeypatch):
    monkeypatch.setattr(host, "WARM_UP_ROUND_S", 0.0)   # one profile call a round
    ramping = _ClockingModel(ramp=20)
    host.warm_up(ramping, {})
    assert ramping.calls == 22   # through the ramp (the 20th call is at full clocks), two more
    steady = _ClockingModel(ramp=1)
    host.warm_up(steady, {})
    assert steady.calls == 3


def test_warm_up_gives_up_at_its_limit(monkeypatch):
    monkeypatch.setattr(host, "WARM_UP_ROUND_S", 0.0)
    never = _ClockingModel(alternate=True)
    host.warm_up(never, {}, limit_s=0.05)
    assert never.calls > 3
