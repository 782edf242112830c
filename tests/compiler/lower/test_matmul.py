"""Gemm and MatMul (the tiled matmul lowering) against onnxruntime."""

import numpy as np
import pytest

from tests.harness import check_against_onnxruntime
from tests.onnx_builders import he_normal, single_op_model, small_normal


def _gemm_model(rng, M, K, N, *, alpha=1.0, beta=1.0, transA=0, transB=0, c="N",
                b_is_input=False, c_is_input=False):
    a_shape = [K, M] if transA else [M, K]
    b_shape = [N, K] if transB else [K, N]
    c_shape = {"none": None, "scalar": [], "1": [1], "N": [N], "1N": [1, N], "M1": [M, 1], "MN": [M, N]}[c]
    inputs = {"a": a_shape}
    inits = {}
    node_inputs = ["a", "b"]
    if b_is_input:
        inputs["b"] = b_shape
    else:
        inits["b"] = he_normal(rng, b_shape, fan_in=K)
    if c_shape is not None:
        node_inputs.append("c")
        if c_is_input:
            inputs["c"] = c_shape
        else:
            inits["c"] = small_normal(rng, c_shape, scale=0.5)
    attrs = {"alpha": alpha, "beta": beta, "transA": transA, "transB": transB}
    return single_op_model("Gemm", inputs, attrs, initializers=inits, node_inputs=node_inputs)


GEMM_CASES = [
    pytest.param(dict(M=4, K=16, N=8), id="default-biasN"),
    pytest.param(dict(M=4, K=16, N=8, alpha=0.5), id="alpha0.5"),
    pytest.param(dict(M=4, K=16, N=8, beta=2.5), id="beta2.5"),
    pytest.param(dict(M=4, K=16, N=8, alpha=-1.5, beta=0.25), id="alpha-1.5-beta0.25"),
    pytest.param(dict(M=4, K=16, N=8, beta=0.0), id="beta0"),
    pytest.param(dict(M=5, K=12, N=9, transA=1), id="transA"),
    pytest.param(dict(M=5, K=12, N=9, transB=1), id="transB"),
    pytest.param(dict(M=5, K=12, N=9, transA=1, transB=1), id="transA-transB"),
    pytest.param(dict(M=5, K=12, N=9, transA=1, transB=1, alpha=0.7, beta=1.3, c="MN"), id="transAB-alpha-beta-cMN"),
    pytest.param(dict(M=4, K=16, N=8, c="none"), id="c-absent"),
    pytest.param(dict(M=4, K=16, N=8, c="none", transB=1), id="c-absent-transB"),
    pytest.param(dict(M=4, K=16, N=8, c="scalar"), id="c-scalar"),
    pytest.param(dict(M=4, K=16, N=8, c="1"), id="c-[1]"),
    pytest.param(dict(M=4, K=16, N=8, c="N"), id="c-[N]"),
    pytest.param(dict(M=4, K=16, N=8, c="MN"), id="c-[M,N]"),
    pytest.param(dict(M=4, K=16, N=8, c="1N"), id="c-[1,N]"),
    pytest.param(dict(M=4, K=16, N=8, c="M1"), id="c-[M,1]"),
    pytest.param(dict(M=4, K=16, N=8, b_is_input=True), id="b-graph-input"),
    pytest.param(dict(M=4, K=16, N=8, b_is_input=True, c_is_input=True, c="MN", transB=1), id="b-c-graph-inputs"),
    pytest.param(dict(M=1, K=7, N=5, transB=1), id="odd-1x7x5"),
    pytest.param(dict(M=33, K=65, N=17, transB=1), id="odd-33x65x17"),
    pytest.param(dict(M=33, K=65, N=17, transA=1, c="MN"), id="odd-33x65x17-transA-cMN"),
    pytest.param(dict(M=128, K=256, N=64, transB=1), id="medium-128x256x64"),
    pytest.param(dict(M=1, K=784, N=1024, transB=1), id="linear-1x784x1024"),
]


@pytest.mark.parametrize("case", GEMM_CASES)
def test_gemm(case, rng):
    check_against_onnxruntime(_gemm_model(rng, **case))


MATMUL_CASES = [
    # (A shape, B shape, B is an initializer)
    pytest.param([1, 7], [7, 3], False, id="2d-1x7x3"),
    pytest.param([16, 32], [32, 8], False, id="2d-16x32x8"),
    pytest.param([33, 65], [65, 17], False, id="2d-33x65x17"),
    pytest.param([33, 65], [65, 17], True, id="2d-33x65x17-B-init"),
    pytest.param([128, 256], [256, 64], True, id="2d-128x256x64-B-init"),
    pytest.param([3, 17, 9], [3, 9, 11], False, id="3d-batched"),
    pytest.param([2, 3, 8, 16], [2, 3, 16, 4], False, id="4d-batched"),
    pytest.param([4, 5, 6], [6, 7], True, id="3d-x-2d-B-init"),
    pytest.param([4, 5, 6], [6, 7], False, id="3d-x-2d"),
    pytest.param([5, 6], [3, 6, 7], False, id="2d-x-3d"),
    pytest.param([2, 1, 5, 6], [1, 3, 6, 7], False, id="4d-broadcast-both"),
    pytest.param([2, 3, 5, 6], [3, 6, 7], False, id="4d-x-3d-broadcast"),
    pytest.param([1, 4, 1, 9], [2, 1, 9, 5], False, id="4d-M1-broadcast"),
]


@pytest.mark.parametrize("a_shape,b_shape,b_init", MATMUL_CASES)
def test_matmul(a_shape, b_shape, b_init, rng):
    if b_init:
        model = single_op_model("MatMul", {"a": a_shape}, initializers={"b": he_normal(rng, b_shape, fan_in=b_shape[-2])})
    else:
        model = single_op_model("MatMul", {"a": a_shape, "b": b_shape})
    check_against_onnxruntime(model)


def _projection_model(rng, a_shape, n, residual_shape):
    """x[..., K] @ W[K, N] + bias + residual, then Relu: a Linear layer as exporters write it."""
    from onnx import TensorProto, helper, numpy_helper
    k, out_shape = a_shape[-1], [*a_shape[:-1], n]
    inits = [numpy_helper.from_array(he_normal(rng, [k, n], fan_in=k), "W"),
             numpy_helper.from_array(small_normal(rng, [n]), "bias")]
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Add", ["h", "bias"], ["hb"]),
             helper.make_node("Add", ["hb", "r"], ["hr"]), helper.make_node("Relu", ["hr"], ["y"])]
    graph = helper.make_graph(nodes, "projection", [helper.make_tensor_value_info("x", TensorProto.FLOAT, a_shape),
                                                    helper.make_tensor_value_info("r", TensorProto.FLOAT, residual_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("target", ["generic", "lavapipe"])
@pytest.mark.parametrize("a_shape,residual_shape,one_gemm", [
    ([37, 1, 24], [37, 1, 20], True),       # seq-first, batch 1 (nn.MultiheadAttention's in-projection)
    ([13, 3, 24], [13, 3, 20], True),       # seq-first, batch 3
    ([2, 5, 7, 24], [5, 7, 20], True),      # two batch dims (this residual stays a separate Add)
    ([13, 3, 24], [13, 1, 20], False),      # a residual broadcast over the rows of each batch
])
def test_batches_of_a_shared_weight_are_one_gemm(target, a_shape, residual_shape, one_gemm, rng):
    """A batched MatMul with a 2-D weight runs as one GEMM over all rows (not one small GEMM per
    batch, each reading the whole weight) when its fused epilogue operands index the rows alike;
    otherwise per batch. Both agree with onnxruntime."""
    from compiler.compile import compile_with_kernels
    model = _projection_model(rng, a_shape, 20, residual_shape)
    _, kernels = compile_with_kernels(model, target=target)
    (gemm,) = [k for k in kernels if k.template.startswith("matmul")]
    batches = int(np.prod(a_shape[:-2]))
    assert gemm.groups[2] == (1 if one_gemm else batches), gemm.groups
    check_against_onnxruntime(model, target=target)
