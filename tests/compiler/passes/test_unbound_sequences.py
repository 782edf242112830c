"""A tensor split into a sequence and read back at constant positions (the dynamo exporter's
torch.unbind/split: SplitToSequence, then SequenceAt) becomes slices of it
(compiler/passes/unbound_sequences.py)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper

from tests.harness import check_against_onnxruntime
from tests.onnx_builders import make_model, tensor_info

from compiler import compile_model
from compiler.errors import UnsupportedOpsError


def _model(x_shape, positions, out_shapes, split=None, constant_position=True, **attrs):
    inits = []
    split_inputs = ["x"]
    if split is not None:
        inits.append(numpy_helper.from_array(np.array(split, np.int64), "split"))
        split_inputs.append("split")
    nodes = [helper.make_node("SplitToSequence", split_inputs, ["seq"], **attrs)]
    inputs = [tensor_info("x", x_shape, np.float32)]
    for j, at in enumerate(positions):
        if constant_position:
            inits.append(numpy_helper.from_array(np.array(at, np.int64), f"at{j}"))
        else:
            inputs.append(tensor_info(f"at{j}", [], np.int64))
        nodes.append(helper.make_node("SequenceAt", ["seq", f"at{j}"], [f"piece{j}"]))
        nodes.append(helper.make_node("Neg", [f"piece{j}"], [f"y{j}"]))   # a kernel reads each piece
    graph = helper.make_graph(nodes, "g", inputs, [tensor_info(f"y{j}", s, np.float32)
                                                   for j, s in enumerate(out_shapes)], initializer=inits)
    return make_model(graph, opset=18)


CASES = [
    pytest.param([3, 4, 5], [0, 2, -2], [[4, 5]] * 3, None, dict(axis=0, keepdims=0), id="unbind-dim0"),
    pytest.param([2, 4, 5], [1, -1], [[2, 5]] * 2, None, dict(axis=1, keepdims=0), id="unbind-dim1"),
    pytest.param([2, 3, 4], [2], [[2, 3, 1]], None, dict(axis=-1, keepdims=1), id="keepdims"),
    pytest.param([2, 7, 3], [0, 2], [[2, 3, 3], [2, 1, 3]], 3, dict(axis=1), id="chunks-of-3"),
    pytest.param([6, 2], [0, 1, 2], [[1, 2], [3, 2], [2, 2]], [1, 3, 2], dict(axis=0), id="sizes"),
]


@pytest.mark.parametrize("x_shape,positions,out_shapes,split,attrs", CASES)
def test_matches_onnxruntime(x_shape, positions, out_shapes, split, attrs):
    check_against_onnxruntime(_model(x_shape, positions, out_shapes, split, **attrs), exact=True)


def test_position_at_run_time_refused():
    model = _model([3, 4], [0], [[4]], constant_position=False, axis=0, keepdims=0)
    with pytest.raises(UnsupportedOpsError, match="SequenceAt"):
        compile_model(model, input_shapes={"x": [3, 4], "at0": []})
