"""The start of a decoder layer as onnxruntime-genai's model builder writes it, end to end against
onnxruntime: SkipSimplifiedLayerNormalization (its residual sum also an output, for the next
layer) -> MatMulNBits (the 4-bit query projection) -> com.microsoft RotaryEmbedding at run-time
positions; a decoding step (one token) and a prompt (the dequantized-GEMM path), float32 and
float16. The builder writes accuracy_level 4, under which onnxruntime quantizes A to int8 (6e-3
rel L2 off the float product here); vkc ignores accuracy_level and computes in float32, so the
reference is taken at accuracy_level 0."""

import numpy as np
import onnx
import pytest

from tests.compiler.lower.test_matmul_nbits import nbits_weights
from tests.harness import check_against_onnxruntime
from tests.onnx_builders import init, tensor_info

from compiler.compile import compile_with_kernels

MS = "com.microsoft"
HIDDEN, HEADS, MAX_POS = 128, 4, 64


def fragment(s: int, o_proj: bool = False) -> onnx.ModelProto:
    """o_proj: the skip is the attention's output projection (a MatMulNBits of input 'attn'), as
    in the builder's layers."""
    rng = np.random.default_rng(3)
    b, scales, zp = nbits_weights(HIDDEN, HIDDEN, zero_points="packed")
    half = HIDDEN // HEADS // 2
    angles = np.arange(MAX_POS)[:, None] / 10000 ** (np.arange(half) / half)
    weights = [init("gamma", (1 + rng.standard_normal(HIDDEN) / 10).astype(np.float32)),
               init("q_proj.b", b), init("q_proj.scales", scales), init("q_proj.zp", zp),
               init("cos", np.cos(angles).astype(np.float32)),
               init("sin", np.sin(angles).astype(np.float32))]
    nodes = []
    if o_proj:
        ob, oscales, ozp = nbits_weights(HIDDEN, HIDDEN, zero_points="packed", seed=5)
        weights += [init("o_proj.b", ob), init("o_proj.scales", oscales), init("o_proj.zp", ozp)]
        nodes.append(onnx.helper.make_node("MatMulNBits", ["attn", "o_proj.b", "o_proj.scales", "o_proj.zp"],
                                           ["skip"], name="o_proj", domain=MS, K=HIDDEN, N=HIDDEN, bits=4,
                                           block_size=32))
    nodes += [
        onnx.helper.make_node("SkipSimplifiedLayerNormalization", ["x", "skip", "gamma"],
                              ["norm", "", "", "residual"], domain=MS, epsilon=1e-6),
        onnx.helper.make_node("MatMulNBits", ["norm", "q_proj.b", "q_proj.scales", "q_proj.zp"],
                              ["q"], domain=MS, K=HIDDEN, N=HIDDEN, bits=4, block_size=32),
        onnx.helper.make_node("RotaryEmbedding", ["q", "position_ids", "cos", "sin"], ["q_rot"],
                              domain=MS, num_heads=HEADS),
    ]
    graph = onnx.helper.make_graph(
        nodes, "genai_fragment",
        [tensor_info("x", [1, s, HIDDEN]), tensor_info("attn" if o_proj else "skip", [1, s, HIDDEN]),
         tensor_info("position_ids", [1, s], np.int64)],
        [tensor_info("q_rot", [1, s, HIDDEN]), tensor_info("residual", [1, s, HIDDEN])],
        initializer=weights)
    return onnx.helper.make_model(graph, ir_version=10, opset_imports=[
        onnx.helper.make_opsetid("", 21), onnx.helper.make_opsetid(MS, 1)])


def feeds(s: int, start: int, o_proj: bool = False) -> dict:
    rng = np.random.default_rng(4)
    return {"x": rng.standard_normal((1, s, HIDDEN)).astype(np.float32),
            "attn" if o_proj else "skip": rng.standard_normal((1, s, HIDDEN)).astype(np.float32),
            "position_ids": np.arange(start, start + s, dtype=np.int64)[None]}


@pytest.mark.parametrize("s,start", [pytest.param(1, 37, id="decode"), pytest.param(64, 0, id="prompt")])
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_genai_fragment(s, start, precision):
    tolerances = {} if precision == "fp32" else dict(rtol_l2=1e-2, rtol=1e-2, atol=1e-2)
    check_against_onnxruntime(fragment(s), feeds=feeds(s, start), precision=precision,
                              **tolerances)


@pytest.mark.parametrize("target", ["generic", "lavapipe"])
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_decode_step_splits_the_residual_norm(precision, target):
    """A decoding step whose skip is the attention's output projection: the residual sum goes into
    that product's store and the norm into the next product's reading of A (passes/
    fuse_layernorm.py, passes/normalized_products.py), so no norm kernel runs where the products'
    kernels can normalize (GPU profiles), and the sum is still an output."""
    model = fragment(1, o_proj=True)
    templates = [k.template for k in compile_with_kernels(model, input_shapes=None, target=target,
                                                           precision=precision)[1]
                 if k.template != "elementwise_typed"]   # fp16: the inputs' and outputs' casts
    assert templates == (["matmul_nbits", "matmul_nbits", "rotary"] if target == "generic" else
                         ["matmul_nbits", "layernorm", "matmul_nbits", "rotary"])
    tolerances = {} if precision == "fp32" else dict(rtol_l2=1e-2, rtol=1e-2, atol=1e-2)
    check_against_onnxruntime(model, feeds=feeds(1, 37, o_proj=True), precision=precision, target=target,
                              **tolerances)
