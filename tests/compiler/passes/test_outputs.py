"""Graph outputs that need no computation (a Shape folded to a constant, a constant, an input
passed through) still get bytes of their own and come back exact."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from tests.harness import check_against_onnxruntime


def test_shape_constant_and_passthrough_outputs():
    rng = np.random.default_rng(0)
    const = numpy_helper.from_array(rng.standard_normal((2, 2)).astype(np.float32), "c")
    nodes = [helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Identity", ["c"], ["const_out"]),
             helper.make_node("Identity", ["x"], ["same"]),
             helper.make_node("Relu", ["x"], ["y"])]
    graph = helper.make_graph(
        nodes, "outputs", [helper.make_tensor_value_info("x", 1, [2, 3, 5])],
        [helper.make_tensor_value_info("shape", onnx.TensorProto.INT64, [3]),
         helper.make_tensor_value_info("const_out", 1, [2, 2]),
         helper.make_tensor_value_info("same", 1, [2, 3, 5]),
         helper.make_tensor_value_info("y", 1, [2, 3, 5])], [const])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    result = check_against_onnxruntime(model)
    assert result["outputs"]["shape"].dtype == np.int64
    assert result["outputs"]["shape"].tolist() == [2, 3, 5]
