"""Epilogue fusion: elementwise tails rendered into the producing Conv/Gemm/MatMul store."""
from __future__ import annotations

import numpy as np
from onnx import helper, numpy_helper

from compiler.frontend import to_ir
from compiler.passes import fold_constants, run_passes
from harness import check_against_onnxruntime


def _residual_with_downsample_first():
    """A ResNet downsample block where, as exporters often write it, the shortcut conv comes
    before the main branch: the shortcut conv must not absorb the Add while the main branch's
    result does not exist yet."""
    rng = np.random.default_rng(0)
    def w(name, *shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32), name)
    nodes = [
        helper.make_node("Conv", ["x", "w_short"], ["short"], strides=[2, 2]),
        helper.make_node("Conv", ["x", "w_main"], ["main"], strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["main"], ["main_relu"]),
        helper.make_node("Conv", ["main_relu", "w_main2"], ["main2"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["short", "main2"], ["sum"]),
        helper.make_node("Relu", ["sum"], ["y"]),
    ]
    graph = helper.make_graph(nodes, "downsample", [helper.make_tensor_value_info("x", 1, [1, 4, 8, 8])],
                              [helper.make_tensor_value_info("y", 1, [1, 8, 4, 4])],
                              [w("w_short", 8, 4, 1, 1), w("w_main", 8, 4, 3, 3), w("w_main2", 8, 8, 3, 3)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def test_residual_add_fuses_into_a_conv_that_runs_after_both_branches():
    model = _residual_with_downsample_first()
    graph = run_passes(fold_constants(to_ir(model)))
    ops = [n.op_type for n in graph.nodes]
    assert ops.count("Conv") == 3 and "vkc.Elementwise" not in ops  # Add and Relus all fused
    order = {id(n): i for i, n in enumerate(graph.nodes)}
    for node in graph.nodes:
        for v in node.inputs:
            if v is not None and v.producer is not None:
                assert order[id(v.producer)] < order[id(node)], f"{node.name} runs before {v.name} exists"
    check_against_onnxruntime(model)


def _gemm_reshape_chain(operand_shape=None):
    """GPT-2's MLP as exported: a Gemm on [B*S, E], a Reshape to [B, S, 4E], gelu_new
    (0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3)))) on the view, and, when operand_shape is
    given, an Add of a tensor of that shape (a bias [4E] keeps the element mapping of the
    reshape; a [B, S, 1] one does not)."""
    rng = np.random.default_rng(1)
    b, s, e = 2, 5, 8
    def const(name, a):
        return numpy_helper.from_array(np.asarray(a, np.float32), name)
    inits = [const("w", rng.standard_normal((e, 4 * e)) * 0.5), const("c", rng.standard_normal(4 * e) * 0.1),
             numpy_helper.from_array(np.array([b, s, 4 * e], np.int64), "shape3"),
             const("three", 3.0), const("k", 0.044715), const("r", np.sqrt(2 / np.pi)), const("one", 1.0),
             const("half", 0.5)]
    nodes = [helper.make_node("Gemm", ["x", "w", "c"], ["h2"]),
             helper.make_node("Reshape", ["h2", "shape3"], ["h"]),
             helper.make_node("Pow", ["h", "three"], ["p"]), helper.make_node("Mul", ["p", "k"], ["pk"]),
             helper.make_node("Add", ["h", "pk"], ["a"]), helper.make_node("Mul", ["a", "r"], ["ar"]),
             helper.make_node("Tanh", ["ar"], ["t"]), helper.make_node("Add", ["t", "one"], ["t1"]),
             helper.make_node("Mul", ["h", "half"], ["hh"]),
             helper.make_node("Mul", ["hh", "t1"], ["y0" if operand_shape else "y"])]
    if operand_shape:
        inits.append(const("extra", rng.standard_normal(operand_shape)))
        nodes.append(helper.make_node("Add", ["y0", "extra"], ["y"]))
    graph = helper.make_graph(nodes, "gelu_new", [helper.make_tensor_value_info("x", 1, [b * s, e])],
                              [helper.make_tensor_value_info("y", 1, [b, s, 4 * e])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def test_chain_on_a_reshaped_result_fuses():
    """The GELU on the reshaped Gemm result (and a bias along the kept last dim) is the Gemm's
    epilogue: one kernel, whose [B*S, 4E] result the output views as [B, S, 4E]."""
    for shape in (None, [32]):
        model = _gemm_reshape_chain(shape)
        graph = run_passes(fold_constants(to_ir(model)))
        assert [n.op_type for n in graph.nodes] == ["Gemm"]
        assert graph.outputs[0].alias_of is graph.nodes[0].outputs[0]
        check_against_onnxruntime(model)


def test_operand_indexed_differently_through_the_reshape_stays_apart():
    """A [B, S, 1] operand over the [B, S, 4E] view has no [B*S, 4E] index the epilogue knows."""
    model = _gemm_reshape_chain([2, 5, 1])
    ops = [n.op_type for n in run_passes(fold_constants(to_ir(model))).nodes]
    assert ops == ["Gemm", "vkc.Elementwise"]
    check_against_onnxruntime(model)
