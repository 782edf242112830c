"""compile_model(argmax_output=...): the bundle also outputs NAME_argmax, the argmax of the
output's last row, computed on the device: equal to numpy's argmax (ties to the first index) for
logits of rank 3, 2 and 1 (one position or several), in float32 and float16 bundles; the named
output stays; what is refused."""

import numpy as np
import pytest
from onnx import TensorProto, helper

from compiler import compile_model
from compiler.errors import CompileError
from tests.harness import run_bundle


def relu_model(shape):
    """logits = Relu(x): rows of many ties (every negative value is 0)."""
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["logits"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, shape)])
    return helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("target", ["lavapipe", "generic"])
@pytest.mark.parametrize("shape", [[1, 5, 1000], [3, 7, 40], [2, 300], [64],
                                   [1, 1, 1000], [3, 1, 40], [1, 300]])   # one position: no Gather
def test_argmax_of_last_row(shape, target, precision):
    rng = np.random.default_rng(0)
    x = rng.integers(-3, 3, shape).astype(np.float32)   # ties within every row
    bundle = compile_model(relu_model(shape), target=target, precision=precision, argmax_output="logits")
    got, io = run_bundle(bundle, {"x": x})
    assert [o[0] for o in io["outputs"]] == ["logits", "logits_argmax"]
    last = np.maximum(x, 0)[..., -1, :] if len(shape) > 1 else np.maximum(x, 0)
    want = np.argmax(last, axis=-1).reshape(shape[:-2] if len(shape) > 1 else [1])
    assert got["logits_argmax"].dtype == np.int64 and np.array_equal(got["logits_argmax"], want)
    np.testing.assert_array_equal(got["logits"], np.maximum(x, 0))


def test_all_equal_row_gives_index_0():
    x = np.zeros((1, 2, 50), np.float32)
    got, _ = run_bundle(compile_model(relu_model([1, 2, 50]), target="lavapipe", argmax_output="logits"), {"x": x})
    assert got["logits_argmax"].tolist() == [0]


@pytest.mark.parametrize("name, words", [
    ("logitz", ["no output 'logitz'", "its outputs: logits"]),
    (3, ["must name an output"]),
])
def test_refused(name, words):
    with pytest.raises(CompileError) as e:
        compile_model(relu_model([1, 4]), target="lavapipe", argmax_output=name)
    assert all(w in str(e.value) for w in words)


def test_integer_output_refused():
    graph = helper.make_graph([helper.make_node("Abs", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.INT32, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.INT32, [1, 4])])
    model = helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(CompileError, match="int32 .* name a float output"):
        compile_model(model, target="lavapipe", argmax_output="y")
