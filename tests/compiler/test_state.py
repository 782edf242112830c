"""Bundle state (compiler/state.py, FORMAT.md "State"): a cache written in place by TensorScatter
kept on the device between runs, found automatically or named; outputs that are not written in
place copied back; shape variants sharing one state; float16 state under --precision fp16; what
is refused."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from bundles import read_bundle
from compiler.compile import compile_model
from compiler.errors import CompileError
from runtime_min import load

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def cache_model(rows=8, width=4, new=1, opset=24):
    """cache [1, rows, width] in, new rows x [1, new, width] written at pos; y = sum over rows."""
    nodes = [helper.make_node("TensorScatter", ["cache", "x", "pos"], ["present"], axis=1),
             helper.make_node("ReduceSum", ["present", "axes"], ["y"], keepdims=0)]
    graph = helper.make_graph(
        nodes, "cache",
        [helper.make_tensor_value_info("x", F, [1, "n", width]),
         helper.make_tensor_value_info("pos", I64, [1]),
         helper.make_tensor_value_info("cache", F, [1, rows, width])],
        [helper.make_tensor_value_info("y", F, [1, width]),
         helper.make_tensor_value_info("present", F, [1, rows, width])],
        [helper.make_tensor("axes", I64, [1], [1])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def running_sum_model():
    """acc [1, 4] in, acc + x out (not in place: an Add): the copy back at the end of the run."""
    graph = helper.make_graph(
        [helper.make_node("Add", ["acc", "x"], ["acc_out"]), helper.make_node("Mul", ["acc_out", "two"], ["y"])],
        "acc", [helper.make_tensor_value_info("x", F, [1, 4]), helper.make_tensor_value_info("acc", F, [1, 4])],
        [helper.make_tensor_value_info("y", F, [1, 4]), helper.make_tensor_value_info("acc_out", F, [1, 4])],
        [helper.make_tensor("two", F, [], [2.0])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_cache_is_state_and_written_in_place():
    bundle = compile_model(cache_model(), input_shapes={"x": [1, 1, 4]}, target="lavapipe")
    m = read_bundle(bundle).manifest
    assert [x["name"] for x in m["inputs"]] == ["x", "pos"] and [x["name"] for x in m["outputs"]] == ["y"]
    assert m["state"] == [{"name": "cache", "tensor": m["state"][0]["tensor"], "output": "present"}]
    assert m["tensors"][m["state"][0]["tensor"]]["memory"] == "state"
    assert read_bundle(bundle).version == (1, 3)
    assert len(m["dispatches"]) == 2  # the scatter of one row and the sum: no copy of the cache
    rng = np.random.default_rng(0)
    rows = rng.normal(size=(8, 1, 1, 4)).astype(np.float32)
    with load(bundle) as model:
        assert [s.name for s in model.state] == ["cache"]
        np.testing.assert_array_equal(model.read_state("cache"), np.zeros((1, 8, 4), np.float32))
        for t in range(5):
            y = model.run({"x": rows[t], "pos": np.array([t])})["y"]
            np.testing.assert_allclose(y, rows[:t + 1].sum(axis=0)[0], rtol=1e-6, atol=1e-6)
        cache = model.read_state("cache")
        np.testing.assert_array_equal(cache[0, :5], rows[:5, 0, 0])
        np.testing.assert_array_equal(cache[0, 5:], 0)
        model.reset_state()
        np.testing.assert_array_equal(model.read_state("cache"), 0)
        model.write_state("cache", np.ones((1, 8, 4), np.float32))
        y = model.run({"x": rows[0], "pos": np.array([7])})["y"]
        np.testing.assert_allclose(y, 7 + rows[0, 0], rtol=1e-6)
        with pytest.raises(ValueError, match="not a state of this model"):
            model.read_state("nope")
        with pytest.raises(ValueError, match=r"expected float32\[1, 8, 4\]"):
            model.write_state("cache", np.ones((8, 4), np.float32))


def test_variants_share_the_state():
    """A prefill variant (4 rows at once) and a decode variant (1 row) read and write one cache."""
    bundle = compile_model(cache_model(), variants=[{"x": [1, 4, 4]}, {"x": [1, 1, 4]}], target="lavapipe")
    rng = np.random.default_rng(1)
    x = rng.normal(size=(1, 6, 4)).astype(np.float32)
    with load(bundle) as model:
        model.run({"x": x[:, :4], "pos": np.array([0])})
        model.run({"x": x[:, 4:5], "pos": np.array([4])})
        y = model.run({"x": x[:, 5:6], "pos": np.array([5])})["y"]
        np.testing.assert_allclose(y, x.sum(axis=1), rtol=1e-5, atol=1e-6)


def test_output_not_written_in_place_is_copied_back():
    bundle = compile_model(running_sum_model(), state="acc=acc_out", target="lavapipe")
    with load(bundle) as model:
        for t in range(1, 4):
            y = model.run({"x": np.ones((1, 4), np.float32)})["y"]
            np.testing.assert_array_equal(y, np.full((1, 4), 2.0 * t, np.float32))
        np.testing.assert_array_equal(model.read_state("acc"), np.full((1, 4), 3.0, np.float32))


def test_float16_state():
    bundle = compile_model(cache_model(), input_shapes={"x": [1, 1, 4]}, target="lavapipe", precision="fp16")
    m = read_bundle(bundle).manifest
    assert m["tensors"][m["state"][0]["tensor"]]["dtype"] == "float16"
    with load(bundle) as model:
        model.run({"x": np.full((1, 1, 4), 0.5, np.float32), "pos": np.array([2])})
        assert model.read_state("cache").dtype == np.float16
        np.testing.assert_array_equal(model.read_state("cache")[0, 2], np.full(4, 0.5, np.float16))


def test_state_none_keeps_the_cache_at_the_api():
    bundle = compile_model(cache_model(), input_shapes={"x": [1, 1, 4]}, target="lavapipe", state="none")
    m = read_bundle(bundle).manifest
    assert "state" not in m and [x["name"] for x in m["outputs"]] == ["y", "present"]


@pytest.mark.parametrize("state, phrase", [
    ("cache=y", "differ"),
    ("nope=present", "no input 'nope'"),
    ("cache", "is not INPUT=OUTPUT"),
])
def test_refused(state, phrase):
    with pytest.raises(CompileError, match=phrase):
        compile_model(cache_model(), input_shapes={"x": [1, 1, 4]}, state=state)
