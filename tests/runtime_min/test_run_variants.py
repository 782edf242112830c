"""runtime_min on format 1.2 bundles: the profile picked at load (or named), the shape variant per
run, errors that list what the bundle has, pipelines built on first use, one arena for the set."""
import numpy as np
import pytest

from bundles import read_bundle, write_bundle
from tests.harness import assert_close, run_onnxruntime
from tests.onnx_builders import dynamic_mlp
from runtime_min import VkcRuntimeError, clear_validation_messages, load, validation_messages

SHAPES = [{"x": [1, 16]}, {"x": [5, 16]}]


@pytest.fixture(scope="module")
def model_proto():
    return dynamic_mlp()


@pytest.fixture(scope="module")
def bundle(model_proto):
    from compiler import compile_model
    return compile_model(model_proto, target="nvidia,lavapipe", variants=SHAPES)


def feeds(rows: int, seed: int = 0) -> dict:
    return {"x": np.random.default_rng(seed).standard_normal((rows, 16)).astype(np.float32)}


def test_each_shape_matches_onnxruntime(bundle, model_proto):
    """Two profiles x two shapes: lavapipe's variants run here, each shape against onnxruntime, runs of
    both shapes in flight at once, under the validation layer."""
    clear_validation_messages()
    with load(bundle, validation=True) as m:
        assert m.target == "lavapipe"
        assert m.variants == ["lavapipe x=1x16", "lavapipe x=5x16"]
        assert m.shapes == [{"x": (1, 16)}, {"x": (5, 16)}]
        for rows, seed in ((1, 1), (5, 2), (1, 3)):
            f = feeds(rows, seed)
            got = m.run(f)
            assert got["y"].shape == (rows, 8)
            assert_close("y", got["y"], run_onnxruntime(model_proto, f)["y"], rtol_l2=1e-5)
        handles = [(f, m.run_async(f)) for f in (feeds(1, 4), feeds(5, 5), feeds(5, 6), feeds(1, 7))]
        for f, h in handles:
            assert_close("y", h.wait()["y"], run_onnxruntime(model_proto, f)["y"], rtol_l2=1e-5)
        out = np.empty((5, 8), np.float32)
        assert m.run(feeds(5, 8), outputs={"y": out})["y"] is out
        assert len(m.profile(feeds(5, 9), repeat=1)) == len(read_bundle(bundle).manifest["variants"][3]["dispatches"])
    assert not validation_messages(), validation_messages()


def test_wrong_shape_lists_the_compiled_shapes(bundle):
    with load(bundle) as m:
        with pytest.raises(ValueError) as e:
            m.run(feeds(3))
        assert str(e.value) == "input 'x' has shape (3, 16); this bundle was compiled for x=1x16, x=5x16"
        with pytest.raises(ValueError, match=r"input 'x': expected float32\[1, 16\], got float64\[5, 16\]"):
            m.run({"x": np.zeros((5, 16))})
        with pytest.raises(ValueError, match=r"output 'y': expected a numpy array float32\[5, 8\]"):
            m.run(feeds(5), outputs={"y": np.empty((1, 8), np.float32)})


def test_input_arrays_of_a_shape(bundle, model_proto):
    with load(bundle) as m:
        for rows, seed in ((5, 1), (1, 2)):
            x = m.input_arrays({"x": (rows, 16)})["x"]
            assert x.shape == (rows, 16)
            x[...] = feeds(rows, seed)["x"]
            got = m.run({"x": x})["y"]
            assert_close("y", got, run_onnxruntime(model_proto, feeds(rows, seed))["y"], rtol_l2=1e-5)
        assert m.input_arrays()["x"].shape == (1, 16)   # the shape run last
        with pytest.raises(ValueError, match="compiled for x=1x16, x=5x16"):
            m.input_arrays({"x": (3, 16)})


def test_pipelines_on_first_use_and_one_arena(bundle):
    views = read_bundle(bundle).manifest["variants"]
    with load(bundle) as m:
        assert [v.runs for v in m._variants] == [None, None]
        assert m.load_info["pipelines_seconds"] == 0
        m.run(feeds(5))
        assert m._variants[0].runs is None and m._variants[1].runs is not None
        assert m.load_info["pipelines_seconds"] > 0
        # One arena sized for the largest of the shape set (lavapipe's two variants).
        assert m._arena.size == max(v["memory"]["arena_bytes"] for v in views[2:])
    with load(bundle, build_all=True) as m:
        assert all(v.runs is not None for v in m._variants)


def test_target_override(bundle, model_proto):
    with load(bundle, target="nvidia") as m:
        assert m.target == "nvidia" and m.variants == ["nvidia x=1x16", "nvidia x=5x16"]
        f = feeds(5, 11)
        assert_close("y", m.run(f)["y"], run_onnxruntime(model_proto, f)["y"], rtol_l2=1e-5)
    with pytest.raises(VkcRuntimeError, match=r"^Target 'amd' is not in this bundle; it has 'nvidia', 'lavapipe'\.$"):
        load(bundle, target="amd")


def test_unmet_requirements_are_named(bundle):
    """A variant asking more than the device has is skipped by the pick, and named when asked for."""
    b = read_bundle(bundle)
    manifest = b.manifest
    for v in manifest["variants"][2:]:  # lavapipe's: more shared memory than any device has
        v["requirements"]["max_shared_memory_bytes"] = 2**40
    data = write_bundle(manifest, [bytes(s) for s in b.spirv], bytes(b.weights))
    with pytest.raises(VkcRuntimeError) as e:
        load(data, target="lavapipe")
    assert "lacks: for target 'lavapipe': 1099511627776 shared memory bytes (it has" in str(e.value)
    # Without lavapipe's variants no profile here matches a CPU, and nvidia's match does not fit.
    with pytest.raises(VkcRuntimeError) as e:
        load(data)
    assert "for target 'nvidia': a device its match names" in str(e.value)
    assert "for target 'lavapipe': 1099511627776 shared memory bytes" in str(e.value)


def test_a_variant_the_device_cannot_run_is_named_when_fed(bundle, model_proto):
    """One of the profile's shapes asks more than the device has: the others run, and feeding that
    shape says which variant it is and what the device lacks (not that the shape is unknown)."""
    b = read_bundle(bundle)
    manifest = b.manifest
    manifest["variants"][3]["requirements"]["max_shared_memory_bytes"] = 2**40   # lavapipe x=5x16
    data = write_bundle(manifest, [bytes(s) for s in b.spirv], bytes(b.weights))
    with load(data, target="lavapipe") as m:
        assert m.variants == ["lavapipe x=1x16"]
        assert_close("y", m.run(feeds(1))["y"], run_onnxruntime(model_proto, feeds(1))["y"], rtol_l2=1e-5)
        with pytest.raises(ValueError, match=r"these input shapes are variant 'lavapipe x=5x16', which device .* cannot "
                                             r"run: it lacks 1099511627776 shared memory bytes \(it has"):
            m.run(feeds(5))
        with pytest.raises(ValueError, match=r"input 'x': expected float32\[1, 16\], got float32\[3, 16\]"):
            m.run(feeds(3))


def test_portable_fallback_is_picked(model_proto):
    """A profile whose match does not fit this device is passed over for the portable one."""
    from compiler import compile_model
    data = compile_model(model_proto, target="nvidia,generic", input_shapes={"x": [2, 16]})
    with load(data) as m:
        assert m.target == "generic"
        assert m.run(feeds(2))["y"].shape == (2, 8)


@pytest.mark.parametrize("target", ["lavapipe", "nvidia"])
def test_only_the_profiles_weights_are_uploaded(target):
    """small_cnn's lavapipe kernels read Winograd-transformed filters, nvidia's the ONNX layout: each
    profile uploads its own weights, packed, and both agree with onnxruntime."""
    from compiler import compile_model
    from bundles.variants import packed_weights
    from tests.harness import random_feeds
    from tests.onnx_builders import small_cnn
    model = small_cnn()
    data = compile_model(model, target="nvidia,lavapipe")
    b = read_bundle(data)
    index = [v["target"]["name"] for v in b.manifest["variants"]].index(target)
    used = sum(end - start for start, end, _ in packed_weights(b.manifest, [index]))
    assert used < len(b.weights)
    f = random_feeds(model, seed=3)
    clear_validation_messages()
    with load(data, target=target, validation=True) as m:
        assert m._weights.size == used
        got = m.run(f)
    assert not validation_messages(), validation_messages()
    ref = run_onnxruntime(model, f)
    for name, value in got.items():
        assert_close(name, value, ref[name], rtol_l2=1e-4)


def test_timing_per_variant(bundle):
    """gpu_time is the last run's, whichever variant it was."""
    with load(bundle, timing=True) as m:
        if not m.device_info.timestamps:
            pytest.skip("no timestamp queries on this device")
        for rows in (1, 5, 1):
            m.run(feeds(rows))
            t = m.gpu_time
            assert t is not None and t.total > 0 and t.kernels > 0


def test_target_override_on_a_flat_bundle(model_proto):
    """A single-variant bundle has one target: naming it loads as usual, naming another is an error."""
    from compiler import compile_model
    data = compile_model(model_proto, target="generic", input_shapes={"x": [2, 16]})
    with load(data, target="generic") as m:
        assert m.target == "generic" and m.variants == ["generic x=2x16"]
    with pytest.raises(VkcRuntimeError, match=r"^Target 'nvidia' is not in this bundle; it has 'generic'\.$"):
        load(data, target="nvidia")


def test_device_memory_is_checked_for_the_profiles_own_weights(monkeypatch):
    """A device whose largest allocation holds lavapipe's own weights (a 3x3 filter transformed for
    Winograd) but not the section (which also holds nvidia's layout) runs the lavapipe profile: the
    check counts what is uploaded."""
    import dataclasses

    from compiler import compile_model
    from bundles.variants import packed_weights
    from runtime_min import device as rdevice
    from tests.onnx_builders import single_op_model
    w = np.random.default_rng(0).standard_normal((128, 128, 3, 3)).astype(np.float32)
    model = single_op_model("Conv", {"x": [1, 128, 8, 8]}, {"pads": [1, 1, 1, 1]}, initializers={"w": w})
    data = compile_model(model, target="nvidia,lavapipe")
    b = read_bundle(data)
    index = [v["target"]["name"] for v in b.manifest["variants"]].index("lavapipe")
    used = sum(end - start for start, end, _ in packed_weights(b.manifest, [index]))
    assert used < len(b.weights)
    real = rdevice.Instance.describe
    for limit, fits in ((used, True), (used - 1, False)):
        monkeypatch.setattr(rdevice.Instance, "describe", lambda self, p, i, limit=limit: dataclasses.replace(
            real(self, p, i), max_memory_allocation_bytes=limit))
        if fits:
            with load(data, target="lavapipe") as m:
                assert m._weights.size == used
        else:
            with pytest.raises(VkcRuntimeError, match=f"one allocation of .* for the weights"):
                load(data, target="lavapipe")
