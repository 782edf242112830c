"""compile_model's refusals of shapes it cannot fix at compile time, against what the model says."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.onnx_builders import make_model

from compiler import compile_model
from compiler.errors import CompileError


def test_split_sizes_from_input_values_are_refused_as_data_dependent():
    """Split sizes computed from an input's values (a mixture of experts' token counts per
    expert, JetMoE's export): refused, naming the node, the input whose values set them, and
    the fix."""
    nodes = [helper.make_node("ReduceSum", ["routes", "axis"], ["counts"], keepdims=0),
             helper.make_node("Split", ["x", "counts"], ["a", "b"], axis=0)]
    graph = helper.make_graph(nodes, "routed", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 4]),
                                                helper.make_tensor_value_info("routes", TensorProto.INT64, [8, 2])],
                              [helper.make_tensor_value_info("a", TensorProto.FLOAT, None),
                               helper.make_tensor_value_info("b", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.array([0], np.int64), "axis")])
    with pytest.raises(CompileError, match=r"Split '.*': 'counts' comes from the computation.* depends on the "
                                           r"values of the input 'routes' \(data-dependent shapes.*every expert "
                                           r"applied to every token"):
        compile_model(make_model(graph, opset=18, infer_shapes=False))
