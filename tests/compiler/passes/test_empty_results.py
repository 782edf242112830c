"""drop_empty_results: a node whose results hold no element (an empty Slice, as Phi-3's export
leaves of a head it rotates whole) goes, its results empty constants, so no pass counts it as a
reader: Phi-3's q, k and v products merge as Llama's do. Against onnxruntime; an empty graph
output stays computed."""
from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from compiler.compile import compile_with_kernels, lower_model
from tests.harness import check_against_onnxruntime

FIXTURES = Path(__file__).resolve().parents[2] / "models" / "fixtures"


def rest_model(*, rest_is_output=False):
    """x [1, 4, 8] -> Tanh -> its first 8 columns (all) and the empty rest [8:], joined again."""
    inits = [numpy_helper.from_array(np.array([v], np.int64), n)
             for n, v in (("zero", 0), ("eight", 8), ("big", 1 << 30), ("last", -1))]
    nodes = [helper.make_node("Tanh", ["x"], ["t"]),
             helper.make_node("Slice", ["t", "zero", "eight", "last"], ["head"]),
             helper.make_node("Slice", ["t", "eight", "big", "last"], ["rest"]),
             helper.make_node("Neg", ["head"], ["neg"]),
             helper.make_node("Concat", ["neg", "rest"], ["y"], axis=-1)]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8])]
    outputs += [helper.make_tensor_value_info("rest", TensorProto.FLOAT, [1, 4, 0])] if rest_is_output else []
    graph = helper.make_graph(nodes, "rest", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8])],
                              outputs, inits)
    return helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 17)])


def test_empty_slice_goes():
    model = rest_model()
    graph = lower_model(model, input_shapes=None, target="generic")[1]
    assert not [n for n in graph.nodes if n.op_type == "Slice" and 0 in n.outputs[0].shape]
    check_against_onnxruntime(model, target="generic")


def test_empty_output_stays():
    model = rest_model(rest_is_output=True)
    graph = lower_model(model, input_shapes=None, target="generic")[1]
    assert graph.is_output(next(v for n in graph.nodes for v in n.outputs if v is not None and v.name == "rest"))
    check_against_onnxruntime(model, target="generic")


def test_phi3_decode_step_merges_projections():
    """optimum's Phi-3 (q, k and v sliced from one qkv_proj, each head rotated whole with an empty
    rest): the decode step runs Llama's kernels, one q/k/v product that normalizes its input and
    an attention that rotates Q and K itself (no rotary kernel)."""
    step = {"input_ids": [1, 1]}

    def templates(name):
        kernels = compile_with_kernels(str(FIXTURES / f"{name}.onnx"), input_shapes=step, target="generic",
                                       max_context=160)[1]
        return [k.template for k in kernels]

    phi3, llama = templates("phi3_tiny_optimum"), templates("llama_tiny_optimum")
    assert phi3 == llama and "layernorm" not in phi3 and "rotary" not in phi3 and phi3.count("attention_tiled") == 2
