"""Constant weights over Vulkan's guaranteed 128 MiB binding range are split into column blocks."""
from __future__ import annotations

import importlib

import numpy as np
import pytest
from onnx import helper, numpy_helper

from compiler.frontend import to_ir
from compiler.passes import fold_constants, run_passes
from tests.harness import check_against_onnxruntime

# The module (the package re-exports its function under the same name).
split = importlib.import_module("compiler.passes.split_large_weights")


@pytest.mark.parametrize("trans_b", [0, 1])
def test_gemm_with_an_oversized_weight_becomes_column_blocks(monkeypatch, trans_b):
    monkeypatch.setattr(split, "MAX_BINDING_BYTES", 4096)  # small stand-in for 128 MiB
    rng = np.random.default_rng(0)
    k, n = 24, 100  # 9,600 bytes of weights: over the stand-in limit
    w = rng.standard_normal((n, k) if trans_b else (k, n)).astype(np.float32) / 5
    nodes = [helper.make_node("Gemm", ["x", "w", "c"], ["h"], transB=trans_b, alpha=0.5),
             helper.make_node("Relu", ["h"], ["y"])]
    graph = helper.make_graph(nodes, "big", [helper.make_tensor_value_info("x", 1, [3, k])],
                              [helper.make_tensor_value_info("y", 1, [3, n])],
                              [numpy_helper.from_array(w, "w"),
                               numpy_helper.from_array(rng.standard_normal(n).astype(np.float32), "c")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)

    lowered = run_passes(fold_constants(to_ir(model)))
    gemms = [node for node in lowered.nodes if node.op_type == "Gemm"]
    assert len(gemms) > 2 and all(g.inputs[1].nbytes <= 4096 for g in gemms)
    assert sum(g.outputs[0].shape[1] for g in gemms) == n
    check_against_onnxruntime(model)


def test_decode_step_blocks_are_whole_columns(monkeypatch):
    """One token through an oversized weight (an LM head): blocks of whole 128 columns, each a
    GEMV writing its slice of the Concat in place (no copy), the last one the rest."""
    from compiler.compile import compile_with_kernels
    monkeypatch.setattr(split, "MAX_BINDING_BYTES", 1 << 16)
    rng = np.random.default_rng(1)
    k, n = 32, 1000   # 128,000 bytes: three blocks of 334 columns, made 384, 384 and 232
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "head",
                              [helper.make_tensor_value_info("x", 1, [1, 1, k])],
                              [helper.make_tensor_value_info("y", 1, [1, 1, n])],
                              [numpy_helper.from_array(rng.standard_normal((k, n)).astype(np.float32), "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    lowered = run_passes(fold_constants(to_ir(model)))
    assert [m.outputs[0].shape[-1] for m in lowered.nodes if m.op_type == "MatMul"] == [384, 384, 232]
    assert [kernel.template for kernel in compile_with_kernels(model)[1]] == ["matmul_gemv"] * 3
    check_against_onnxruntime(model)
