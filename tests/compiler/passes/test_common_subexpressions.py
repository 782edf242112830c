"""Repeated nodes on the same inputs become one (compiler/passes/common_subexpressions.py)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from tests.harness import check_against_onnxruntime
from tests.onnx_builders import make_model, tensor_info

from compiler.compile import compile_with_kernels
from compiler.frontend import to_ir
from compiler.passes import fold_constants
from compiler.passes.common_subexpressions import merge_common_subexpressions


def _per_layer_masks(layers=3, random_op=False):
    """What SDPA's export writes: every layer turns the same bool mask into an additive one with
    constants of its own (-10000 where masked), then adds it to its own scores."""
    nodes = [helper.make_node("Cast", ["m"], ["mb"], to=TensorProto.BOOL, name="cast")]
    inits = []
    for i in range(layers):
        inits += [numpy_helper.from_array(np.array(0.0, np.float32), f"zero{i}"),
                  numpy_helper.from_array(np.array(-1e4, np.float32), f"ninf{i}")]
        nodes += [helper.make_node("Where", ["mb", f"zero{i}", f"ninf{i}"], [f"bias{i}"], name=f"where{i}"),
                  helper.make_node("Add", [f"x{i}" if i else "x", f"bias{i}"], [f"x{i + 1}"], name=f"add{i}")]
    if random_op:
        nodes += [helper.make_node("RandomUniformLike", ["x"], [f"r{i}"], name=f"random{i}", seed=1.0)
                  for i in range(2)]
    graph = helper.make_graph(nodes, "masks", [tensor_info("x", [2, 5]), tensor_info("m", [2, 5], np.int64)],
                              [tensor_info(f"x{layers}", [2, 5])] +
                              ([tensor_info(f"r{i}", [2, 5]) for i in range(2)] if random_op else []),
                              initializer=inits)
    return make_model(graph)


def test_repeated_mask_is_one_node():
    graph = merge_common_subexpressions(fold_constants(to_ir(_per_layer_masks())))
    wheres = [n for n in graph.nodes if n.op_type == "Where"]
    assert len(wheres) == 1 and wheres[0].sources == ["where0", "where1", "where2"]
    assert all(n.inputs[1] is wheres[0].outputs[0] for n in graph.nodes if n.op_type == "Add")


def test_random_draws_stay_apart():
    graph = merge_common_subexpressions(fold_constants(to_ir(_per_layer_masks(1, random_op=True))))
    assert sum(n.op_type == "RandomUniformLike" for n in graph.nodes) == 2


def test_different_constants_stay_apart():
    model = _per_layer_masks(2)
    model.graph.initializer[3].CopyFrom(numpy_helper.from_array(np.array(-1e3, np.float32), "ninf1"))
    graph = merge_common_subexpressions(fold_constants(to_ir(model)))
    assert sum(n.op_type == "Where" for n in graph.nodes) == 2


def test_merged_matches_onnxruntime():
    feeds = {"x": np.random.default_rng(0).standard_normal((2, 5)).astype(np.float32),
             "m": np.array([[1, 1, 1, 0, 1], [1, 0, 1, 1, 1]], np.int64)}
    check_against_onnxruntime(_per_layer_masks(), feeds=feeds, target="lavapipe")


def test_group_query_attention_scalars_once():
    """The model builder's decode step: GroupQueryAttention's expansion writes each layer its
    positions, key counts and write rows from the same seqlens_k; merged after the expansion,
    one kernel computes each for both layers (no elementwise kernel of layer 1's alone)."""
    fixture = Path(__file__).resolve().parents[2] / "models" / "fixtures" / "llama_tiny_genai_int4.onnx"
    past = {f"past_key_values.{i}.{kv}": [1, 2, 160, 16] for i in range(2) for kv in ("key", "value")}
    kernels = compile_with_kernels(fixture, input_shapes={"input_ids": [1, 1], "attention_mask": [1, 160], **past},
                                   target="nvidia", precision="fp16")[1]
    scalars = [k for k in kernels if k.template.startswith("elementwise")
               and any("/attn/GroupQueryAttention" in n for n in k.nodes)]
    assert len(scalars) == 3
    assert all(any("layers.0/" in n for n in k.nodes) and any("layers.1/" in n for n in k.nodes) for k in scalars)
