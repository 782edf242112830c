"""Device features: the runtime enables exactly those a bundle needs (requirements.features and
its modules' SPIR-V capabilities), refuses a device that lacks one by name, and shares a VkDevice
only between bundles that need the same."""
import dataclasses

import numpy as np
import pytest
from onnx import helper

from bundles import read_bundle, write_bundle
from tests.harness import compile_cached
from tests.onnx_builders import tensor_info
from runtime_min import VkcRuntimeError, load
from runtime_min import device as rdevice


def add_bundle(dtype, n=6) -> bytes:
    graph = helper.make_graph([helper.make_node("Add", ["a", "b"], ["y"])], "add",
                              [tensor_info("a", [n], dtype), tensor_info("b", [n], dtype)],
                              [tensor_info("y", [n], dtype)])
    return compile_cached(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


def with_features(blob: bytes, features) -> bytes:
    b = read_bundle(blob)
    m = b.manifest
    m["requirements"]["features"] = list(features)
    return write_bundle(m, [bytes(s) for s in b.spirv], bytes(b.weights))


def without(monkeypatch, feature: str):
    real = rdevice.Instance.describe
    monkeypatch.setattr(rdevice.Instance, "describe", lambda self, p, i: dataclasses.replace(
        real(self, p, i), all_features=real(self, p, i).all_features - {feature}))


def test_exactly_the_needed_features_are_enabled_and_devices_shared_by_them():
    f32, i64 = add_bundle(np.float32), add_bundle(np.int64)
    with load(f32) as a, load(i64) as b, load(add_bundle(np.int64, 9)) as c, load(f32, robust=False) as d:
        assert a._dev.features == {"robustBufferAccess"}
        assert b._dev.features == {"robustBufferAccess", "shaderInt64"}
        assert d._dev.features == frozenset()
        assert a._dev is not b._dev and b._dev is c._dev and a._dev is not d._dev
        x = np.array([2**40, -3, 7, 1 << 62, -(1 << 62), 5], np.int64)
        assert np.array_equal(b.run({"a": x, "b": x})["y"], x + x)


def test_a_device_lacking_a_feature_is_refused_by_name(monkeypatch):
    without(monkeypatch, "shaderInt64")
    with pytest.raises(VkcRuntimeError, match=r"lacks: feature shaderInt64 \(SPIR-V capability Int64"):
        load(add_bundle(np.int64))


def test_requirements_features_are_enabled_and_checked():
    """A listed feature is enabled even when no module's capability implies it, and one the
    device does not have (or that no Vulkan struct has) refuses the bundle, naming it."""
    with load(with_features(add_bundle(np.float32), ["shaderFloat64"])) as m:
        assert m._dev.features == {"robustBufferAccess", "shaderFloat64"}
    with pytest.raises(VkcRuntimeError, match=r"lacks: feature shaderTeleport \(requirements\.features\)"):
        load(with_features(add_bundle(np.float32), ["shaderTeleport"]))


def test_listed_feature_missing_on_the_device(monkeypatch):
    without(monkeypatch, "shaderFloat64")
    with pytest.raises(VkcRuntimeError, match=r"lacks: feature shaderFloat64 \(requirements\.features\)"):
        load(with_features(add_bundle(np.float32), ["shaderFloat64"]))
