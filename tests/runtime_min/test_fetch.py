"""Model.run(feeds, fetch=[...]): only the named outputs are copied back (a decode step's token
id, not its logits), on either I/O set, mixed with full runs; what is refused."""

import numpy as np
import pytest
from onnx import TensorProto, helper

from compiler import compile_model
from runtime_min import load


def relu_argmax_bundle() -> bytes:
    """logits = Relu(x) [1, 3, 40], compiled with --argmax-output logits (also tests/native/test_fetch.py)."""
    f = TensorProto.FLOAT
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["logits"])], "g",
                              [helper.make_tensor_value_info("x", f, [1, 3, 40])],
                              [helper.make_tensor_value_info("logits", f, [1, 3, 40])])
    model = helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 17)])
    return compile_model(model, target="lavapipe", argmax_output="logits")


@pytest.fixture(scope="module")
def bundle():
    return relu_argmax_bundle()


def feeds(seed):
    return {"x": np.random.default_rng(seed).standard_normal((1, 3, 40)).astype(np.float32)}


def test_only_fetched_outputs_come_back(bundle):
    with load(bundle) as model:
        for seed in range(5):   # both I/O sets, each fetch set recorded once, full runs between
            x = feeds(seed)
            want = int(np.argmax(np.maximum(x["x"], 0)[0, -1]))
            got = model.run(x, fetch=["logits_argmax"])
            assert list(got) == ["logits_argmax"] and got["logits_argmax"].tolist() == [want]
            full = model.run(x)
            assert full["logits_argmax"].tolist() == [want]
            np.testing.assert_array_equal(full["logits"], np.maximum(x["x"], 0))
            assert list(model.run(x, fetch=["logits"])) == ["logits"]
        assert model.run(feeds(9), fetch=[]) == {}


def test_unfetched_output_is_not_copied(bundle):
    """The I/O set's logits memory keeps the last full run's values through fetch-only runs."""
    with load(bundle) as model:
        first = model.run(feeds(0))["logits"]
        model.run(feeds(1))                                   # the other I/O set
        model.run(feeds(2), fetch=["logits_argmax"])           # the first set again
        v = model._variants[0]
        out_views = v.runs[0][1]
        np.testing.assert_array_equal(out_views[0], first)


def test_run_async_with_fetch_and_own_arrays(bundle):
    with load(bundle) as model:
        out = np.zeros(1, np.int64)
        h = model.run_async(feeds(3), outputs={"logits_argmax": out}, fetch=["logits_argmax"])
        assert h.wait()["logits_argmax"] is out
        assert out[0] == np.argmax(np.maximum(feeds(3)["x"], 0)[0, -1])


@pytest.mark.parametrize("fetch, error, words", [
    (["logitz"], ValueError, "unknown output 'logitz'"),
    ("logits", TypeError, "list of output names"),
])
def test_refused(bundle, fetch, error, words):
    with load(bundle) as model, pytest.raises(error, match=words):
        model.run(feeds(0), fetch=fetch)
