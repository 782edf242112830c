"""Graph structure at load: nodes out of order are sorted (as onnxruntime does); a cycle, a tensor
written twice and a read of an undefined tensor are refused in one line naming the node."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from compiler import CompileError, compile_model
from tests.onnx_builders import make_model

F32 = TensorProto.FLOAT


def _model(nodes, out="y"):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F32, [2, 3])],
                              [helper.make_tensor_value_info(out, F32, [2, 3])])
    return make_model(graph, infer_shapes=False, opset=17)


def test_nodes_out_of_order_are_sorted():
    from runtime_min import load

    model = _model([helper.make_node("Neg", ["a"], ["y"], name="last"),
                    helper.make_node("Sigmoid", ["x"], ["a"], name="first")])
    x = np.random.default_rng(3).standard_normal((2, 3)).astype(np.float32)
    (ref,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    with load(compile_model(model, target="lavapipe")) as vk:
        np.testing.assert_allclose(vk.run({"x": x})["y"], ref, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("nodes, words", [
    ([helper.make_node("Add", ["x", "b"], ["a"], name="add"), helper.make_node("Relu", ["a"], ["b"], name="relu"),
      helper.make_node("Neg", ["a"], ["y"], name="neg")], ["cycle", "'add'", "'relu'"]),
    ([helper.make_node("Relu", ["x"], ["y"], name="one"), helper.make_node("Neg", ["x"], ["y"], name="two")],
     ["'y'", "'one'", "'two'"]),
    ([helper.make_node("Add", ["x", "nowhere"], ["y"], name="add")], ["'add'", "'nowhere'"]),
], ids=["cycle", "two writers", "undefined read"])
def test_malformed_graph_refused(nodes, words):
    with pytest.raises(CompileError) as info:
        compile_model(_model(nodes), target="lavapipe")
    msg = str(info.value)
    assert "\n" not in msg and all(w in msg for w in words), msg
