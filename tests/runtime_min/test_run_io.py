"""The host side of a run: run_async with two runs in flight on one arena, caller-provided outputs,
outputs that never alias the runtime's memory, GPU time, flat memory, and `vkc run`'s input errors.
The validation layer (with synchronization validation) must stay silent throughout (conftest)."""
import itertools
import tracemalloc

import numpy as np
import pytest
from tests.runtime_min.shaders import N, random_inputs
from tests.runtime_min.test_runtime import check

import runtime_min
from runtime_min import load


def test_two_runs_in_flight_match_run(model):
    feeds = [random_inputs(10 + i) for i in range(7)]
    handles = [model.run_async(f) for f in feeds[:2]]  # both I/O sets busy
    handles.append(model.run_async(feeds[2]))  # waits for the first, whose handle keeps its outputs
    check(handles[1].wait(), feeds[1])  # out of order
    check(handles[0].wait(), feeds[0])
    check(handles[2].result(), feeds[2])
    assert handles[0].wait() is handles[0].wait()  # waiting twice returns the same outputs
    prev = model.run_async(feeds[3])  # pipelined: one wait behind
    for f, nxt in itertools.pairwise(feeds[3:]):
        h = model.run_async(nxt)
        check(prev.wait(), f)
        prev = h
    check(prev.wait(), feeds[-1])
    check(model.run(feeds[0]), feeds[0])


def test_caller_outputs(model):
    feeds = random_inputs(20)
    y = np.full(N, np.nan, np.float32)
    out = model.run(feeds, outputs={"y": y})
    assert out["y"] is y and out["z"] is not y
    check(out, feeds)
    y2 = np.full(N, np.nan, np.float32)
    h = model.run_async(random_inputs(21), outputs={"y": y2})
    h2 = model.run_async(feeds)
    check(h.wait(), random_inputs(21))
    assert h.wait()["y"] is y2
    check(h2.wait(), feeds)
    with pytest.raises(ValueError, match=r"output 'y': expected a numpy array float32\[1000\], got float64\[1000\]"):
        model.run_async(feeds, outputs={"y": np.zeros(N)})


def test_outputs_never_alias_runtime_memory(model):
    runs = [(f, model.run(f)) for f in map(random_inputs, range(30, 34))]  # both I/O sets used twice
    for f, out in runs:
        check(out, f)  # later runs overwrote nothing of it
        for in_views, out_views, _, _ in model._variants[0].runs:  # per I/O set
            for view in out_views + in_views:
                assert not any(np.shares_memory(view, a) for a in out.values())


def _fill(arrays: dict, feeds: dict) -> dict:
    for name, a in arrays.items():
        np.copyto(a, feeds[name])
    return arrays


def test_inputs_written_in_place(model, monkeypatch):
    """input_arrays() is the memory the next run reads: filled and passed back, nothing is copied;
    with a run in flight on that memory, it waits for that run first (whose handle keeps its outputs)."""
    copies = []
    monkeypatch.setattr(runtime_min.model, "_write_input", lambda view, a: copies.append(a) or np.copyto(view, a))
    feeds = [random_inputs(70 + i) for i in range(5)]
    arrays = model.input_arrays()
    assert sorted(arrays) == ["u", "x"] and arrays["x"].shape == (4, N // 4) and arrays["x"].flags.writeable
    check(model.run(_fill(arrays, feeds[0])), feeds[0])
    assert copies == []
    handles = [model.run_async(_fill(model.input_arrays(), f)) for f in feeds[1:3]]   # both I/O sets busy
    third = model.input_arrays()   # the first set's memory: its run is waited for
    check(handles[0].wait(), feeds[1])
    h = model.run_async(_fill(third, feeds[3]))
    check(handles[1].wait(), feeds[2])
    check(h.wait(), feeds[3])
    assert copies == []
    check(model.run({k: v.copy() for k, v in _fill(model.input_arrays(), feeds[4]).items()}), feeds[4])
    assert len(copies) == 2   # a copy of them is copied in as usual


def test_feed_errors_before_anything_runs(model):
    feeds = random_inputs(40)
    with pytest.raises(ValueError, match=r"input 'u': expected float32\[1000\], got float64\[1000\]"):
        model.run_async({**feeds, "u": feeds["u"].astype(np.float64)})
    with pytest.raises(ValueError, match=r"input 'x': expected float32\[4, 250\], got float32\[1000\]"):
        model.run_async({**feeds, "x": feeds["x"].reshape(-1)})
    with pytest.raises(ValueError, match=r"missing input 'u'"):
        model.run_async({"x": feeds["x"]})
    with pytest.raises(TypeError, match="feeds must be a dict"):
        model.run_async([feeds["x"], feeds["u"]])
    check(model.run({"x": feeds["x"].astype(">f4"), "u": feeds["u"]}), feeds)  # byte order: converted, not refused
    check(model.run(feeds), feeds)


def test_non_coherent_memory_is_flushed_and_invalidated(bundle):
    """As on a device whose host-visible memory is not coherent: flush and invalidate are called (valid
    on coherent memory too, so the layer checks their ranges)."""
    with load(bundle, validation=True) as m:
        for slot in m._slots:
            slot.inb.coherent = slot.outb.coherent = False
        prev = m.run_async(random_inputs(50))
        for i in range(51, 55):
            h = m.run_async(random_inputs(i))
            check(prev.wait(), random_inputs(i - 1))
            prev = h
        check(prev.wait(), random_inputs(54))


def test_gpu_time(bundle):
    with load(bundle, validation=True, timing=True) as m:
        assert m.gpu_time is None
        h1, h2 = m.run_async(random_inputs(1)), m.run_async(random_inputs(2))
        h1.wait()
        h2.wait()
        g = m.gpu_time
        assert isinstance(g, runtime_min.GpuTime) and g.kernels > 0 and g.copy_in >= 0 and g.copy_out >= 0
        assert g.total == pytest.approx(g.copy_in + g.kernels + g.copy_out) and g.total < 10
    with load(bundle, validation=True) as m:
        m.run(random_inputs(1))
        assert m.gpu_time is None  # timing is off by default: timestamps cost on some devices


def test_close_with_runs_in_flight(bundle):
    start = runtime_min.resources()
    m = load(bundle, validation=True)
    h1, h2 = m.run_async(random_inputs(60)), m.run_async(random_inputs(61))
    m.close()
    check(h1.wait(), random_inputs(60))
    check(h2.wait(), random_inputs(61))
    with pytest.raises(runtime_min.VkcRuntimeError, match="closed"):
        m.run_async(random_inputs(62))
    assert runtime_min.resources()["live"] == start["live"]


def test_memory_flat_over_1000_runs(model):
    feeds = random_inputs(70)
    outs = {o.name: np.empty(o.shape, o.dtype) for o in model.outputs}
    for _ in range(50):
        model.run(feeds, outs)
    before = runtime_min.resources()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        prev = model.run_async(feeds, outs)
        for i in range(1000):
            if i % 2:
                h = model.run_async(feeds)
                prev.wait()
                prev = h
            else:
                model.run(feeds, outs)
        prev.wait()
        grown = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    assert grown < 64 << 10, f"{grown} bytes of Python objects kept after 1000 runs"
    assert runtime_min.resources() == before
    check(outs, feeds)


def test_run_command_input_errors(bundle, tmp_path):
    from typer.testing import CliRunner

    from compiler.cli import app
    path = tmp_path / "m.vkb"
    path.write_bytes(bundle)
    r = CliRunner().invoke(app, ["run", str(path), "--input", "x=missing.npy"])
    assert r.exit_code == 1 and r.exception is None or isinstance(r.exception, SystemExit), r.output
    assert "x=missing.npy: no such file" in " ".join(r.output.split()) and "Traceback" not in r.output
    # An unknown name is named, with the model's inputs, before any file is read (this one is missing too).
    r = CliRunner().invoke(app, ["run", str(path), "--input", "x=missing.npy", "--input", "v=missing.npy"])
    out = " ".join(r.output.split())
    assert r.exit_code == 1 and "no input 'v'; its inputs are: x (float32[4, 250]), u (float32[1000])" in out, out
    (tmp_path / "bad.npy").write_text("not numpy")
    r = CliRunner().invoke(app, ["run", str(path), "--input", f"u={tmp_path / 'bad.npy'}"])
    assert r.exit_code == 1 and "not a .npy file numpy can read" in " ".join(r.output.split()), r.output
    np.save(tmp_path / "u.npy", random_inputs(0)["u"])
    r = CliRunner().invoke(app, ["run", str(path), "--input", f"u={tmp_path / 'u.npy'}"])
    assert r.exit_code == 0, r.output


def test_each_run_is_ordered_after_the_one_before(bundle, monkeypatch):
    """Both I/O sets' command buffers use the one arena, so each begins with a barrier from the transfer
    and compute stages, whose first scope holds everything submitted before it. The validation layer
    here (1.3.239) reports no hazard between submissions, even with its QueueSubmit check enabled
    (dropping this barrier went unreported), so the recording itself is checked."""
    import vulkan as vk

    from runtime_min import model as rmodel
    calls, real = [], rmodel.Model._barrier
    monkeypatch.setattr(rmodel.Model, "_barrier", lambda self, cmd, *a: (calls.append((cmd, a)), real(self, cmd, *a)))
    stages = vk.VK_PIPELINE_STAGE_TRANSFER_BIT | vk.VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT
    writes = vk.VK_ACCESS_TRANSFER_WRITE_BIT | vk.VK_ACCESS_SHADER_WRITE_BIT
    with load(bundle, validation=True) as m:
        for slot in m._slots:
            run_cmd = m._variants[0].runs[slot.index][2]
            src_stage, src_access, dst_stage, dst_access = next(a for cmd, a in calls if cmd == run_cmd)
            assert src_stage & stages == stages and dst_stage & stages == stages
            assert src_access & writes == writes and dst_access & writes == writes


@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_large_input_copied_in_parts(layout):
    """Inputs of 4 MiB or more are copied into the staging buffer by four threads in four parts:
    every element lands where it belongs, from a contiguous array and from a transposed view."""
    from onnx import TensorProto, helper
    from compiler import compile_model
    rows, cols = 1031, 1033   # 4.06 MiB of float32, sizes that split unevenly
    graph = helper.make_graph([helper.make_node("Neg", ["x"], ["y"])], "neg",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, cols])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows, cols])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = np.random.default_rng(3).standard_normal((rows, cols) if layout == "contiguous" else (cols, rows),
                                                  dtype=np.float32)
    x = x if layout == "contiguous" else x.T
    assert x.nbytes >= 4 << 20
    with load(compile_model(model, target="generic")) as m:
        np.testing.assert_array_equal(m.run({"x": x})["y"], -x)
