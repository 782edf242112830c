import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import runtime_min
from runtime_min import VkcRuntimeError, load
from runtime_min.pipelines import specialization_data
from tests.runtime_min.shaders import N, build, expected, random_inputs


def check(out, feeds):
    want = expected(feeds)
    assert sorted(out) == ["y", "z"]
    for name in want:
        assert out[name].dtype == np.float32 and out[name].shape == (N,)
        assert np.array_equal(out[name], want[name]), name  # exact: every element written, and right


def test_runs_and_matches_numpy(model):
    assert [(i.name, i.shape, i.dtype) for i in model.inputs] == [("x", (4, N // 4), np.float32),
                                                                 ("u", (N,), np.float32)]
    assert [(o.name, o.shape) for o in model.outputs] == [("y", (N,)), ("z", (N,))]
    assert model.device_name
    first_feeds, second_feeds = random_inputs(1), random_inputs(2)
    # Poison both I/O sets' outputs: an element the copy-out misses would stay NaN.
    for _, out_views, _, _ in model._variants[0].runs:  # per I/O set
        for view in out_views:
            view[...] = np.nan
    first = model.run(first_feeds)
    check(first, first_feeds)
    # Different inputs: an element some dispatch misses would keep the first run's value.
    second = model.run(second_feeds)
    check(second, second_feeds)
    check(first, first_feeds)  # outputs are fresh arrays, not views of staging
    first["y"][:] = 0
    check(model.run(first_feeds), first_feeds)


def test_load_from_path_and_memoryview(bundle, tmp_path):
    path = tmp_path / "m.vkb"
    path.write_bytes(bundle)
    feeds = random_inputs(3)
    for source in (str(path), path, memoryview(bundle)):
        with load(source, validation=True) as m:
            check(m.run(feeds), feeds)


def test_noncontiguous_inputs(model):
    feeds = random_inputs(4)
    x_f = np.asfortranarray(feeds["x"])
    u_strided = np.repeat(feeds["u"], 2)[::2]
    assert not x_f.flags.c_contiguous and not u_strided.flags.c_contiguous
    check(model.run({"x": x_f, "u": u_strided}), feeds)


def test_input_errors(model):
    feeds = random_inputs(5)
    with pytest.raises(ValueError, match=r"missing input 'u': expected float32\[1000\]"):
        model.run({"x": feeds["x"]})
    with pytest.raises(ValueError, match=r"unknown input 'v'; the model's inputs are: x \(float32\[4, 250\]\), u"):
        model.run({**feeds, "v": feeds["u"]})
    with pytest.raises(ValueError, match=r"input 'x': expected float32\[4, 250\], got float32\[250, 4\]"):
        model.run({**feeds, "x": feeds["x"].T})
    with pytest.raises(ValueError, match=r"input 'u': expected float32\[1000\], got float64\[1000\]"):
        model.run({**feeds, "u": feeds["u"].astype(np.float64)})
    with pytest.raises(ValueError, match=r"input 'u': expected float32\[1000\], got float64\[1000\] \(from a list\); "
                                         r"convert it first .* the runtime does not cast"):
        model.run({**feeds, "u": feeds["u"].tolist()})
    check(model.run(feeds), feeds)  # the model still works after refused inputs


def test_bench(model):
    times = model.bench(random_inputs(6), warmup=1, repeat=4)
    assert len(times) == 4 and all(t > 0 for t in times)


def test_device_choice_errors(bundle, monkeypatch):
    with pytest.raises(VkcRuntimeError, match=r"Vulkan device 99 does not exist; found \d+: 0: "):
        load(bundle, device=99)
    with pytest.raises(VkcRuntimeError, match=r"No Vulkan device's name contains 'no-such-gpu'"):
        load(bundle, device="no-such-gpu")
    monkeypatch.setenv("VKC_DEVICE", "42")
    with pytest.raises(VkcRuntimeError, match="Vulkan device 42 does not exist"):
        load(bundle)


def test_device_by_index_and_name(bundle, monkeypatch):
    devices = runtime_min.list_devices()
    with load(bundle, device=devices[0].index, validation=True) as m:
        assert m.device_name == devices[0].name
    monkeypatch.setenv("VKC_DEVICE", devices[0].name[:4].upper())
    with load(bundle, validation=True) as m:
        assert devices[0].name[:4].lower() in m.device_name.lower()


def test_requirements_refused(tmp_path):
    blob = build(tmp_path, extensions=["VK_VKC_not_a_real_extension"], max_shared_memory_bytes=1 << 30,
                 vulkan_api=[9, 0, 0])
    with pytest.raises(VkcRuntimeError) as e:
        load(blob)
    msg = str(e.value)
    assert "extension VK_VKC_not_a_real_extension" in msg
    assert f"{1 << 30} shared memory bytes" in msg and "Vulkan 9.0.0" in msg


def test_list_devices():
    devices = runtime_min.list_devices()
    assert devices and [d.index for d in devices] == list(range(len(devices)))
    for d in devices:
        assert isinstance(d, runtime_min.DeviceInfo) and d.name and d.api_version >= (1, 0, 0)
        assert d.max_shared_memory_bytes >= 16384 and d.max_workgroup_invocations >= 128
        assert d.max_storage_buffer_range >= 1 << 27 or d.type != "CPU"
    lvp = [d for d in devices if "llvmpipe" in d.name]
    if lvp:
        assert lvp[0].type == "CPU" and lvp[0].subgroup_size == 8 and "VK_KHR_16bit_storage" in lvp[0].extensions


def test_close(bundle):
    m = load(bundle, validation=True)
    m.close()
    m.close()
    with pytest.raises(VkcRuntimeError, match="closed"):
        m.run(random_inputs(0))


def test_specialization_packing():
    data = specialization_data([{"id": 3, "type": "float32", "value": 1.5}, {"id": 0, "type": "uint32",
                                "value": 4000000000}, {"id": 1, "type": "int32", "value": -2}])
    assert data == np.array([1.5], "<f4").tobytes() + np.array([4000000000, 2**32 - 2], "<u4").tobytes()


def _python(script, env=None, tmp_path=None):
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2]), **(env or {})}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True, env=env,
                          cwd=tmp_path)


PRELUDE = """
    import sys
"""


def test_runs_with_compiler_packages_blocked(bundle, tmp_path):
    (tmp_path / "m.vkb").write_bytes(bundle)
    feeds = random_inputs(8)
    np.savez(tmp_path / "feeds.npz", **feeds)
    script = PRELUDE + """
    BLOCKED = {"onnx", "onnxruntime", "jinja2", "typer", "compiler", "shaderc", "templates"}
    class Block:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ImportError(f"{name} is blocked in this test")
    sys.meta_path.insert(0, Block())
    import numpy as np
    import runtime_min
    from tests.runtime_min.shaders import expected
    feeds = dict(np.load("feeds.npz"))
    with runtime_min.load("m.vkb", validation=True) as m:
        out = m.run(feeds)
    want = expected(feeds)
    assert all(np.array_equal(out[k], want[k]) for k in want)
    assert runtime_min.validation_messages() == [], runtime_min.validation_messages()
    assert not BLOCKED & {n.split(".")[0] for n in sys.modules}
    print("OK")
    """
    r = _python(script, tmp_path=tmp_path)
    assert r.returncode == 0 and r.stdout.strip() == "OK", r.stderr


def test_no_vulkan_loader(bundle, tmp_path):
    (tmp_path / "m.vkb").write_bytes(bundle)
    script = PRELUDE + """
    class NoLoader:  # what the `vulkan` package does when libvulkan.so.1 is missing
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] == "vulkan":
                raise OSError("Cannot find Vulkan SDK version.")
    sys.meta_path.insert(0, NoLoader())
    import runtime_min  # must work without a loader
    try:
        runtime_min.load("m.vkb")
    except runtime_min.VkcRuntimeError as e:
        print(e)
    """
    r = _python(script, tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "No Vulkan loader was found" in r.stdout and "apt-get install mesa-vulkan-drivers libvulkan1" in r.stdout


def test_no_vulkan_driver(bundle, tmp_path):
    (tmp_path / "m.vkb").write_bytes(bundle)
    script = PRELUDE + """
    import runtime_min
    try:
        runtime_min.load("m.vkb")
    except runtime_min.VkcRuntimeError as e:
        print(e)
    """
    none = str(tmp_path / "no_icd.json")
    r = _python(script, env={"VK_DRIVER_FILES": none, "VK_ICD_FILENAMES": none}, tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "apt-get install mesa-vulkan-drivers libvulkan1" in r.stdout, r.stdout


def test_bundle_without_dispatches():
    """An Identity-like model: outputs alias inputs, nothing to dispatch; int64 and a bool scalar."""
    from bundles import write_bundle
    t = lambda name, dtype, shape, offset, nbytes: {"name": name, "dtype": dtype, "shape": shape, "memory": "arena",
                                                     "offset": offset, "nbytes": nbytes}
    m = {"manifest_version": 1, "model": {"name": "id", "producer": "hand", "opset": 13, "source_sha256": "0" * 64},
         "target": {"name": "generic"},
         "requirements": {"vulkan_api": [1, 1, 0], "extensions": [], "max_shared_memory_bytes": 0,
                          "max_workgroup_invocations": 1, "max_workgroup_size": [1, 1, 1],
                          "max_storage_buffer_range": 0},
         "memory": {"alignment": 256, "arena_bytes": 512, "weights_bytes": 0, "intermediates_sum_bytes": 0,
                    "lower_bound_bytes": 0},
         "tensors": [t("x", "int64", [2, 3], 0, 48), t("s", "bool", [], 256, 1)],
         "inputs": [{"name": "x", "tensor": 0}, {"name": "s", "tensor": 1}],
         "outputs": [{"name": "y", "tensor": 0}, {"name": "t", "tensor": 1}],
         "modules": [], "kernels": [], "dispatches": []}
    with load(write_bundle(m, [], b""), validation=True) as model:
        x = np.arange(6, dtype=np.int64).reshape(2, 3)
        out = model.run({"x": x, "s": np.array(True)})
        assert np.array_equal(out["y"], x) and out["t"].dtype == np.bool_ and out["t"].shape == () and out["t"]
        with pytest.raises(ValueError, match=r"input 's': expected bool\[\], got int64\[\]"):
            model.run({"x": x, "s": np.array(1)})


def test_sync_validation_reports_a_missing_barrier(bundle, monkeypatch):
    """validation=True includes synchronization validation. The hand-built bundle's second dispatch
    reads y, which the first writes; without its barrier the reader refuses the bundle, and loaded
    with that check bypassed it runs with a read-after-write hazard the layer reports."""
    import bundles.format
    from bundles import BundleError, read_bundle, write_bundle
    with read_bundle(bundle) as b:
        m, spirv, blob = b.manifest, [bytes(s) for s in b.spirv], bytes(b.weights)
    m["dispatches"][1]["barrier"] = False
    racy = write_bundle(m, spirv, blob, barriers=False)
    with pytest.raises(BundleError, match=r"'barriers'.*dispatch 1 binding 0 \(tensor 2 'y', arena bytes "
                                          r"\[8192, 12192\)\) reads .* dispatch 0 binding 3 .*\(read after write\)"):
        load(racy, validation=True)
    monkeypatch.setattr(bundles.format, "check_barriers", lambda *a: None)
    feeds = random_inputs(3)
    with load(racy, validation=True) as model:
        model.run(feeds)
    messages = runtime_min.validation_messages()
    runtime_min.clear_validation_messages()  # expected here; any other test's message still fails it
    assert any("SYNC-HAZARD-READ-AFTER-WRITE" in msg for msg in messages), messages
