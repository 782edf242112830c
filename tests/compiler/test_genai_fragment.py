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

MS = "com.microsoft"
HIDDEN, HEADS, MAX_POS = 128, 4, 64


def fragment(s: int) -> onnx.ModelProto:
    rng = np.random.default_rng(3)
    b, scales, zp = nbits_weights(HIDDEN, HIDDEN, zero_points="packed")
    half = HIDDEN // HEADS // 2
    angles = np.arange(MAX_POS)[:, None] / 10000 ** (np.arange(half) / half)
    weights = [init("gamma", (1 + rng.standard_normal(HIDDEN) / 10).astype(np.float32)),
               init("q_proj.b", b), init("q_proj.scales", scales), init("q_proj.zp", zp),
               init("cos", np.cos(angles).astype(np.float32)),
               init("sin", np.sin(angles).astype(np.float32))]
    nodes = [
        onnx.helper.make_node("SkipSimplifiedLayerNormalization", ["x", "skip", "gamma"],
                              ["norm", "", "", "residual"], domain=MS, epsilon=1e-6),
        onnx.helper.make_node("MatMulNBits", ["norm", "q_proj.b", "q_proj.scales", "q_proj.zp"],
                              ["q"], domain=MS, K=HIDDEN, N=HIDDEN, bits=4, block_size=32),
        onnx.helper.make_node("RotaryEmbedding", ["q", "position_ids", "cos", "sin"], ["q_rot"],
                              domain=MS, num_heads=HEADS),
    ]
    graph = onnx.helper.make_graph(
        nodes, "genai_fragment",
        [tensor_info("x", [1, s, HIDDEN]), tensor_info("skip", [1, s, HIDDEN]),
         tensor_info("position_ids", [1, s], np.int64)],
        [tensor_info("q_rot", [1, s, HIDDEN]), tensor_info("residual", [1, s, HIDDEN])],
        initializer=weights)
    return onnx.helper.make_model(graph, ir_version=10, opset_imports=[
        onnx.helper.make_opsetid("", 21), onnx.helper.make_opsetid(MS, 1)])


def feeds(s: int, start: int) -> dict:
    rng = np.random.default_rng(4)
    return {"x": rng.standard_normal((1, s, HIDDEN)).astype(np.float32),
            "skip": rng.standard_normal((1, s, HIDDEN)).astype(np.float32),
            "position_ids": np.arange(start, start + s, dtype=np.int64)[None]}


@pytest.mark.parametrize("s,start", [pytest.param(1, 37, id="decode"), pytest.param(64, 0, id="prompt")])
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_genai_fragment(s, start, precision):
    tolerances = {} if precision == "fp32" else dict(rtol_l2=1e-2, rtol=1e-2, atol=1e-2)
    check_against_onnxruntime(fragment(s), feeds=feeds(s, start), precision=precision,
                              **tolerances)
