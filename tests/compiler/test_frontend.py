"""The frontend: shapes come from the given input shapes through the graph, never from a
declaration written for other shapes; a declared element type the graph does not compute, and a
graph that cannot run at the given shapes, are refused by name."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from compiler import CompileError, compile_model
from tests.harness import assert_close
from tests.onnx_builders import make_model

F32 = TensorProto.FLOAT


def _model(nodes, inputs, outputs, inits=(), value_info=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits), value_info=list(value_info))
    return make_model(graph, infer_shapes=False, opset=17)


def exported_mlp(rng, value_info: bool) -> onnx.ModelProto:
    """An MLP as a batch-1 export left it once its input was made dynamic: the output (and with
    value_info, the hidden values) still say batch 1; torch's Linear is Gemm(transB=1); an
    Identity remains."""
    w1 = numpy_helper.from_array((rng.standard_normal((32, 784)) / 28).astype(np.float32), "fc1.weight")
    b1 = numpy_helper.from_array((0.1 * rng.standard_normal(32)).astype(np.float32), "fc1.bias")
    w2 = numpy_helper.from_array((rng.standard_normal((10, 32)) / 6).astype(np.float32), "fc2.weight")
    b2 = numpy_helper.from_array((0.1 * rng.standard_normal(10)).astype(np.float32), "fc2.bias")
    nodes = [helper.make_node("Gemm", ["input", "fc1.weight", "fc1.bias"], ["h"], name="/fc1/Gemm", transB=1),
             helper.make_node("Relu", ["h"], ["r"], name="/relu/Relu"),
             helper.make_node("Identity", ["r"], ["r2"], name="/Identity"),
             helper.make_node("Gemm", ["r2", "fc2.weight", "fc2.bias"], ["logits"], name="/fc2/Gemm", transB=1)]
    return _model(nodes, [helper.make_tensor_value_info("input", F32, ["batch", 784])],
                  [helper.make_tensor_value_info("logits", F32, [1, 10])], [w1, b1, w2, b2],
                  [helper.make_tensor_value_info("h", F32, [1, 32]), helper.make_tensor_value_info("r", F32, [1, 32])]
                  if value_info else [])


@pytest.mark.parametrize("value_info", [False, True], ids=["output", "output+value_info"])
def test_declared_batch_1_output_follows_the_inputs(rng, value_info):
    """Two variants (batch 1 and 4) of a model declaring its output [1, 10]: each run returns
    onnxruntime's shape and values, every element written (outputs poisoned with NaN)."""
    from runtime_min import load, validation_messages

    model = exported_mlp(rng, value_info)
    bundle = compile_model(model, target="lavapipe", variants=[{"input": [1, 784]}, {"input": [4, 784]}])
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    with load(bundle, validation=True) as vk:
        assert [s["input"] for s in vk.shapes] == [(1, 784), (4, 784)]
        for batch in (1, 4, 1):
            x = rng.standard_normal((batch, 784)).astype(np.float32)
            (ref,) = session.run(None, {"input": x})
            poisoned = np.full((batch, 10), np.nan, np.float32)
            got = vk.run({"input": x}, outputs={"logits": poisoned})["logits"]
            assert got is poisoned and got.shape == ref.shape == (batch, 10)
            assert not np.isnan(got).any(), "an output element was not written"
            assert_close("logits", got, ref, rtol_l2=1e-4, rtol=1e-4, atol=1e-5)
    assert validation_messages() == []


def test_wrong_declared_output_shape_of_static_model():
    """A static model whose output is declared [5, 7] while Relu of [2, 3] gives [2, 3]: the
    bundle's output is what onnxruntime computes."""
    from runtime_min import load

    model = _model([helper.make_node("Relu", ["x"], ["y"])], [helper.make_tensor_value_info("x", F32, [2, 3])],
                   [helper.make_tensor_value_info("y", F32, [5, 7])])
    with load(compile_model(model, target="lavapipe")) as vk:
        assert vk.outputs[0].shape == (2, 3)
        x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
        np.testing.assert_array_equal(vk.run({"x": x})["y"], np.maximum(x, 0))
    # its fixed batch of 2 pinned to 4: the output follows the input
    with load(compile_model(model, target="lavapipe", input_shapes={"x": [4, 3]})) as vk:
        assert vk.outputs[0].shape == (4, 3)


def test_hard_coded_reshape_refused_by_name():
    """Reshape to a constant [1, 6] cannot take a batch of 4: refused naming the node."""
    model = _model([helper.make_node("Reshape", ["x", "shape"], ["f"], name="flatten_to_batch_1"),
                    helper.make_node("Relu", ["f"], ["y"])],
                   [helper.make_tensor_value_info("x", F32, ["n", 2, 3])], [helper.make_tensor_value_info("y", F32, [1, 6])],
                   [numpy_helper.from_array(np.array([1, 6], np.int64), "shape")])
    compile_model(model, target="lavapipe", input_shapes={"x": [1, 2, 3]})
    with pytest.raises(CompileError, match="Reshape 'flatten_to_batch_1'.*24 elements") as info:
        compile_model(model, target="lavapipe", input_shapes={"x": [4, 2, 3]})
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("where", ["output", "value_info"])
def test_wrong_declared_dtype_refused(where):
    """A declared int64 where Relu computes float32: one line naming both and the node."""
    declared = helper.make_tensor_value_info("h" if where == "value_info" else "y", TensorProto.INT64, [2, 3])
    model = _model([helper.make_node("Relu", ["x"], ["h"], name="act"), helper.make_node("Neg", ["h"], ["y"], name="neg")],
                   [helper.make_tensor_value_info("x", F32, [2, 3])],
                   [declared if where == "output" else helper.make_tensor_value_info("y", F32, [2, 3])],
                   value_info=[declared] if where == "value_info" else [])
    with pytest.raises(CompileError) as info:
        compile_model(model, target="lavapipe")
    msg = str(info.value)
    assert "\n" not in msg and "int64" in msg and "float32" in msg
    assert ("'act'" if where == "value_info" else "'neg'") in msg


def test_shape_inference_reads_a_skeleton_of_large_weights(monkeypatch):
    """onnx serializes the model it infers shapes on, which fails past protobuf's 2 GiB: the
    frontend infers on a copy whose large weights carry no data. Forced onto every weight here,
    the bundle is byte for byte the one compiled the usual way."""
    from compiler import frontend
    from compiler.compile import compile_model
    from tests.llm_models import tiny_llama
    model = tiny_llama(layers=1)
    usual = compile_model(model, input_shapes={"input_ids": [1, 2]}, target="generic")
    monkeypatch.setattr(frontend, "SKELETON_BYTES", 16)
    assert compile_model(model, input_shapes={"input_ids": [1, 2]}, target="generic") == usual
