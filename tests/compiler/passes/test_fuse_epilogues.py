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
