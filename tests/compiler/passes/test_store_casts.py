"""absorb_store_casts: under --precision fp16-matmul a LayerNorm, an attention or a widened
product (float16 operands, a float32 epilogue) whose result only the Cast into a product reads
stores float16 itself (directly, or through a reshape as GPT-2's Gemm and every out-projection read
it); a fused LayerNorm whose result another node also reads writes it twice (float32, and float16
as Y2); any other result read elsewhere keeps its Cast, and so does a product whose epilogue reads
a float32 tensor. Against onnxruntime on lavapipe, with its own kernels and the generic (GPU)
profile's."""
from __future__ import annotations

import numpy as np
from onnx import helper, numpy_helper

from tests.attention_models import padding_mask, self_attention_block
from tests.harness import check_against_onnxruntime, passes_graph

F16, F32 = np.dtype(np.float16), np.dtype(np.float32)


def _layernorm_then_product(form: str):
    """x [2, 5, 8] -> LayerNormalization -> a product: "matmul" (MatMul by [8, 12]), "gemm" (Reshape
    to [10, 8], Gemm), or "residual" (MatMul, and the normalized x added to its result too)."""
    rng = np.random.default_rng(3)
    def const(name, a):
        return numpy_helper.from_array(np.asarray(a, np.float32), name)
    inits = [const("scale", 1 + 0.1 * rng.standard_normal(8)), const("bias", 0.1 * rng.standard_normal(8)),
             const("w", rng.standard_normal((8, 8 if form == "residual" else 12)) * 0.3),
             const("c", 0.1 * rng.standard_normal(12)), numpy_helper.from_array(np.array([10, 8], np.int64), "rows")]
    nodes = [helper.make_node("LayerNormalization", ["x", "scale", "bias"], ["n"], axis=-1)]
    if form == "gemm":
        nodes += [helper.make_node("Reshape", ["n", "rows"], ["n2"]), helper.make_node("Gemm", ["n2", "w", "c"], ["y"])]
        shape = [10, 12]
    elif form == "residual":
        nodes += [helper.make_node("MatMul", ["n", "w"], ["m"]), helper.make_node("Add", ["m", "n"], ["y"])]
        shape = [2, 5, 8]
    else:
        nodes += [helper.make_node("MatMul", ["n", "w"], ["y"])]
        shape = [2, 5, 12]
    graph = helper.make_graph(nodes, form, [helper.make_tensor_value_info("x", 1, [2, 5, 8])],
                              [helper.make_tensor_value_info("y", 1, shape)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_layernorm_stores_float16_for_the_product():
    for form in ("matmul", "gemm"):
        graph = passes_graph(_layernorm_then_product(form), "fp16-matmul")
        norm = next(n for n in graph.nodes if n.op_type == "LayerNormalization")
        assert norm.inputs[0].dtype == F32 and norm.outputs[0].dtype == F16, form
        # No Cast between them (x is float32, as the normalization computes).
        assert [n.op_type for n in graph.nodes] == ["LayerNormalization", "MatMul" if form == "matmul" else "Gemm"]
        for target in ("lavapipe", "generic"):
            check_against_onnxruntime(_layernorm_then_product(form), target=target, precision="fp16-matmul",
                                      rtol_l2=1e-2, rtol=2e-2, atol=2e-2)


def test_a_result_read_elsewhere_keeps_its_cast():
    """A plain LayerNormalization's (its outputs are ONNX's: no second Y to add)."""
    graph = passes_graph(_layernorm_then_product("residual"), "fp16-matmul")
    norm = next(n for n in graph.nodes if n.op_type == "LayerNormalization")
    assert norm.outputs[0].dtype == F32
    assert "vkc.Elementwise" in [n.op_type for n in graph.nodes]
    check_against_onnxruntime(_layernorm_then_product("residual"), precision="fp16-matmul",
                              rtol_l2=1e-2, rtol=2e-2, atol=2e-2)


def _post_ln_block():
    """BERT's post-LN step: n = LayerNorm(x + r) (fused with its residual sum), then
    y = MatMul(n, w) + n: n is read by the product (through a Cast) and by the residual."""
    rng = np.random.default_rng(5)
    inits = [numpy_helper.from_array(np.asarray(a, np.float32), name) for name, a in (
        ("scale", 1 + 0.1 * rng.standard_normal(8)), ("bias", 0.1 * rng.standard_normal(8)),
        ("w", rng.standard_normal((8, 8)) * 0.3))]
    nodes = [helper.make_node("Add", ["x", "r"], ["s"]),
             helper.make_node("LayerNormalization", ["s", "scale", "bias"], ["n"], axis=-1),
             helper.make_node("MatMul", ["n", "w"], ["m"]), helper.make_node("Add", ["m", "n"], ["y"])]
    graph = helper.make_graph(nodes, "post_ln", [helper.make_tensor_value_info(v, 1, [2, 5, 8]) for v in "xr"],
                              [helper.make_tensor_value_info("y", 1, [2, 5, 8])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_fused_layernorm_writes_float16_beside_its_float32_result():
    """The fused LayerNorm writes n in float32 (for the residual) and, as Y2, in float16 (for the
    product) in one dispatch: no Cast is left."""
    graph = passes_graph(_post_ln_block(), "fp16-matmul")
    norm = next(n for n in graph.nodes if n.op_type == "vkc.LayerNorm")
    roles = dict(zip(norm.attrs["outputs"], norm.outputs))
    assert roles["Y"].dtype == F32 and roles["Y2"].dtype == F16
    product = next(n for n in graph.nodes if n.op_type == "MatMul")
    assert product.inputs[0] is roles["Y2"] and roles["Y"] in product.inputs
    assert "vkc.Elementwise" not in [n.op_type for n in graph.nodes]
    for target in ("lavapipe", "generic"):
        check_against_onnxruntime(_post_ln_block(), target=target, precision="fp16-matmul",
                                  rtol_l2=1e-2, rtol=2e-2, atol=2e-2)


def test_attention_stores_float16_for_the_out_projection():
    model = self_attention_block(2, 9, 2, 8)
    graph = passes_graph(model, "fp16-matmul")
    (attention,) = [n for n in graph.nodes if n.op_type == "vkc.Attention"]
    assert attention.inputs[0].dtype == F32 and attention.outputs[0].dtype == F16
    feeds = {"x": np.random.default_rng(4).standard_normal((2, 9, 16)).astype(np.float32),
             "mask": padding_mask(2, 9, [9, 5])}
    for target in ("lavapipe", "generic"):
        check_against_onnxruntime(model, feeds=feeds, target=target, precision="fp16-matmul",
                                  rtol_l2=1e-2, rtol=2e-2, atol=2e-2)


def _two_products(residual: bool):
    """x [2, 5, 8] -> MatMul [8, 16] -> Add bias -> Gelu (erf form) -> MatMul [16, 8], where
    `residual` -> Add x (the second product's epilogue then reads float32 x) -> MatMul [8, 8]."""
    rng = np.random.default_rng(4)
    def const(name, a):
        return numpy_helper.from_array(np.asarray(a, np.float32), name)
    inits = [const("w1", rng.standard_normal((8, 16)) * 0.3), const("b1", 0.1 * rng.standard_normal(16)),
             const("w2", rng.standard_normal((16, 8)) * 0.3), const("half", 0.5), const("one", 1.0),
             const("rsqrt2", 2 ** -0.5), const("w3", rng.standard_normal((8, 8)) * 0.3)]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["m"]), helper.make_node("Add", ["m", "b1"], ["a"]),
             helper.make_node("Mul", ["a", "rsqrt2"], ["s"]), helper.make_node("Erf", ["s"], ["e"]),
             helper.make_node("Add", ["e", "one"], ["e1"]), helper.make_node("Mul", ["a", "e1"], ["g0"]),
             helper.make_node("Mul", ["g0", "half"], ["g"]),
             helper.make_node("MatMul", ["g", "w2"], ["p" if residual else "y"])]
    if residual:
        nodes += [helper.make_node("Add", ["p", "x"], ["r"]), helper.make_node("MatMul", ["r", "w3"], ["y"])]
    graph = helper.make_graph(nodes, "ffn", [helper.make_tensor_value_info("x", 1, [2, 5, 8])],
                              [helper.make_tensor_value_info("y", 1, [2, 5, 8])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_widened_product_stores_float16_for_the_next_product():
    """BERT's FFN: the up-projection with its bias and GELU stores float16 for the down-projection
    (its float32 bias read as such). So does a down-projection whose epilogue adds float32 x, for
    the product after it: the kernel reads each operand in its own type, and only x's Cast is left."""
    for residual in (False, True):
        graph = passes_graph(_two_products(residual), "fp16-matmul")
        up, down = [n for n in graph.nodes if n.op_type == "MatMul"][:2]
        assert up.outputs[0].dtype == F16 and up.inputs[2].dtype == F32 and up.inputs[2].is_constant
        assert down.inputs[0] is up.outputs[0]
        assert down.outputs[0].dtype == (F16 if residual else F32)   # the last product's input, or y
        assert [n.op_type for n in graph.nodes].count("vkc.Elementwise") == 1   # x's Cast
        for target in ("lavapipe", "generic"):
            check_against_onnxruntime(_two_products(residual), target=target, precision="fp16-matmul",
                                      rtol_l2=1e-2, rtol=2e-2, atol=2e-2)
