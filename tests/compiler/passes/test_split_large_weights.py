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
