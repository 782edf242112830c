"""TensorScatter (opset 24) against onnxruntime, the cache an input and an output of its own (no
bundle state): linear writes within the cache (onnxruntime refuses one past its end), circular
writes wrapping round it."""
import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from compiler import compile_model
from runtime_min import load

CACHE, UPDATE = [2, 3, 5, 4], [2, 3, 3, 4]


def scatter_model(mode: str):
    node = helper.make_node("TensorScatter", ["cache", "update", "write_indices"], ["y"], axis=2, mode=mode)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("cache", TensorProto.FLOAT, CACHE),
                                            helper.make_tensor_value_info("update", TensorProto.FLOAT, UPDATE),
                                            helper.make_tensor_value_info("write_indices", TensorProto.INT64, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, CACHE)])
    return helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 24)])


@pytest.mark.parametrize("mode, indices", [("linear", [0, 2]), ("linear", [2, 1]),
                                           ("circular", [4, 1]), ("circular", [3, 0])])
def test_tensor_scatter(mode, indices, rng):
    model = scatter_model(mode)
    feeds = {"cache": rng.standard_normal(CACHE).astype(np.float32),
             "update": rng.standard_normal(UPDATE).astype(np.float32),
             "write_indices": np.array(indices, np.int64)}
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    with load(compile_model(model, target="generic", state="none")) as m:
        np.testing.assert_array_equal(m.run(feeds)["y"], want)
