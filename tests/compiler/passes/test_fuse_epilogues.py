"""Epilogue fusion: elementwise tails rendered into the producing Conv/Gemm/MatMul store."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper

from compiler.frontend import to_ir
from compiler.passes import fold_constants, run_passes
from tests.harness import check_against_onnxruntime, passes_graph


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


def _matmul_bias_relu_and_conv():
    """A transformer-style MatMul [2, 5, 8] x [8, 12] with its bias Add and a Relu, then a Conv."""
    rng = np.random.default_rng(2)
    inits = [numpy_helper.from_array((rng.standard_normal(shape) * 0.5).astype(np.float32), name)
             for name, shape in (("w", (8, 12)), ("b", (12,)), ("k", (3, 2, 1, 1)))]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["a"]),
             helper.make_node("Relu", ["a"], ["r"]), helper.make_node("Conv", ["r", "k"], ["c"]),
             helper.make_node("Sigmoid", ["c"], ["y"])]
    graph = helper.make_graph(nodes, "mm", [helper.make_tensor_value_info("x", 1, [2, 2, 5, 8])],
                              [helper.make_tensor_value_info("y", 1, [2, 3, 5, 12])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def test_fp16_matmul_products_store_float32_through_their_epilogue():
    """--precision fp16-matmul: the Cast of a float16 MatMul's (or Gemm's) result to float32 and the
    float32 chain after it are the product's epilogue (the kernel reads float16 A and B and stores
    float32; a Gemm's float16 bias is read as such); a Conv's result is cast apart. Where only the
    Cast into the next product (the Conv here) reads the widened result, the product stores
    float16 after all, reading its float32 bias as such (passes/store_casts.py)."""
    f16, f32 = np.dtype(np.float16), np.dtype(np.float32)
    graph = passes_graph(_matmul_bias_relu_and_conv(), "fp16-matmul")
    mm, conv = (next(n for n in graph.nodes if n.op_type == op) for op in ("MatMul", "Conv"))
    assert [v.dtype for v in mm.inputs[:2]] == [f16, f16] and mm.outputs[0].dtype == f16
    assert mm.inputs[2].dtype == f32 and conv.outputs[0].dtype == f16   # the bias as it was; the Conv unwidened
    assert mm.attrs.get("epilogue") is not None   # the bias and the Relu
    gemm = passes_graph(_gemm_reshape_chain([32]), "fp16-matmul")
    gemm_node = next(n for n in gemm.nodes if n.op_type == "Gemm")
    assert gemm_node.outputs[0].dtype == f32 and gemm_node.inputs[1].dtype == f16
    assert gemm_node.inputs[2].dtype == f16 and gemm_node.inputs[2].is_constant
    assert [n.op_type for n in gemm.nodes] == ["vkc.Elementwise", "Gemm"]   # the input's Cast, then it all
    for target in ("lavapipe", "generic"):   # the register and the tiled kernels
        # ([2, 5, 1]: a chain that would widen but stays apart, the Gemm's bias float16 with it)
        for model in (_matmul_bias_relu_and_conv(), _gemm_reshape_chain([32]), _gemm_reshape_chain([2, 5, 1])):
            check_against_onnxruntime(model, target=target, precision="fp16-matmul", rtol_l2=1e-2,
                                      rtol=2e-2, atol=2e-2)


def _mlp_residual_then_pad():
    """The end of a Swin block under --precision fp16: the MLP's second MatMul [1, 4, 4, 16] x
    [16, 8], its bias and the residual sum (a float16 epilogue; the residual a float16 tensor of
    its own, a LayerNorm's here), then PatchMerging's Pad, which computes float32 only: a Cast to float32
    follows the product's epilogue."""
    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array((rng.standard_normal(shape) * 0.5).astype(np.float32), name)
             for name, shape in (("w", (16, 8)), ("b", (8,)), ("g", (8,)))]
    inits.append(numpy_helper.from_array(np.array([0, 0, 0, 0, 0, 0, 1, 0], np.int64), "pads"))
    nodes = [helper.make_node("MatMul", ["h", "w"], ["m"]), helper.make_node("Add", ["b", "m"], ["a"]),
             helper.make_node("LayerNormalization", ["x", "g", "b"], ["r"]),
             helper.make_node("Add", ["r", "a"], ["s"]),
             helper.make_node("Pad", ["s", "pads"], ["y"])]
    graph = helper.make_graph(nodes, "block", [helper.make_tensor_value_info("h", 1, [1, 4, 4, 16]),
                                               helper.make_tensor_value_info("x", 1, [1, 4, 4, 8])],
                              [helper.make_tensor_value_info("y", 1, [1, 4, 5, 8])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_float16_epilogue_with_a_residual_is_not_widened():
    """A float16 product whose fused epilogue reads a float16 residual keeps storing float16: its
    kernel reads epilogue operands in the type it stores, so the Cast to float32 stays a node of its
    own (widening read the float16 residual's bytes as float32: Swin's rel L2 of 1.2)."""
    graph = passes_graph(_mlp_residual_then_pad(), "fp16")
    mm = next(n for n in graph.nodes if n.op_type == "MatMul")
    assert mm.outputs[0].dtype == np.float16 and len(mm.inputs) == 4   # the bias and the residual
    for target in ("lavapipe", "generic"):
        check_against_onnxruntime(_mlp_residual_then_pad(), target=target, precision="fp16",
                                  rtol_l2=1e-2, rtol=2e-2, atol=2e-2)


def _widened_with_a_float16_residual(op: str, m: int, k: int, n: int):
    """y = float32(A · W (+ bias)) + float32(r): a float16 product (MatMul, Gemm with a float16
    bias, or MatMulNBits with float16 scales) whose float32 sum with a float16 residual becomes
    its epilogue (layer 0 of a float16 decoder, whose residual stream is float32 after it)."""
    rng = np.random.default_rng(4)
    f16 = lambda a: a.astype(np.float16)  # noqa: E731
    inits, nodes = [], []
    if op == "MatMulNBits":
        block = 32
        q = rng.integers(0, 16, (n, k), dtype=np.uint8)
        inits += [numpy_helper.from_array((q[:, 0::2] | (q[:, 1::2] << 4)).reshape(n, k // block, block // 2), "wq"),
                  numpy_helper.from_array(f16(rng.uniform(0.01, 0.05, (n * k // block,))), "scales")]
        nodes.append(helper.make_node("MatMulNBits", ["a", "wq", "scales"], ["p"], domain="com.microsoft",
                                      K=k, N=n, bits=4, block_size=block))
    else:
        inits.append(numpy_helper.from_array(f16(rng.standard_normal((k, n)) / np.sqrt(k)), "w"))
        if op == "Gemm":
            inits.append(numpy_helper.from_array(f16(rng.standard_normal(n) * 0.1), "c"))
        nodes.append(helper.make_node(op, ["a", "w"] + (["c"] if op == "Gemm" else []), ["p"]))
    nodes += [helper.make_node("Cast", ["p"], ["p32"], to=1), helper.make_node("Cast", ["r"], ["r32"], to=1),
              helper.make_node("Add", ["p32", "r32"], ["y"])]
    graph = helper.make_graph(nodes, "widened", [helper.make_tensor_value_info("a", 10, [m, k]),
                                                 helper.make_tensor_value_info("r", 10, [m, n])],
                              [helper.make_tensor_value_info("y", 1, [m, n])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
                             ir_version=8)


@pytest.mark.parametrize("op, m, k, n", [("MatMul", 1, 64, 48), ("MatMul", 4, 64, 48), ("MatMul", 64, 64, 48),
                                         ("MatMul", 2, 4096, 8), ("Gemm", 64, 64, 48), ("MatMulNBits", 1, 64, 48),
                                         ("MatMulNBits", 2, 128, 32)])
@pytest.mark.parametrize("target", ["generic", "lavapipe"])
def test_float16_residual_of_a_widened_product(op, m, k, n, target):
    """The product stores float32 through the residual sum, its kernel (GEMV, register, tiled,
    split-K, texel, MatMulNBits) reading the float16 residual in its own type: one node, and
    onnxruntime's values."""
    model = _widened_with_a_float16_residual(op, m, k, n)
    graph = passes_graph(model, "fp32")
    [product] = [node for node in graph.nodes if node.op_type == op]
    assert product.outputs[0].dtype == np.float32 and "vkc.Elementwise" not in [node.op_type for node in graph.nodes]
    check_against_onnxruntime(model, target=target, rtol_l2=1e-3, rtol=1e-2, atol=1e-2)
