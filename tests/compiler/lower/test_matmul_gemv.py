"""templates/matmul_gemv.comp.j2: a decoder step's products (at most four rows) on GPU profiles,
against onnxruntime: fp32 and fp16, batched and broadcast weights, fused epilogues, N not a
multiple of a workgroup's columns, K not a multiple of the unrolled step, float16 weights read
8 columns (16 bytes) an invocation where N allows, K split across workgroups where the columns
give too few; which products take it."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.harness import check_against_onnxruntime

from compiler.compile import compile_with_kernels


def gemv_model(*, m, k, n, batch=(), epilogue=False, seed=0):
    rng = np.random.default_rng(seed)
    w = numpy_helper.from_array((rng.normal(size=(k, n)) / np.sqrt(k)).astype(np.float32), "w")
    bias = numpy_helper.from_array(rng.normal(size=(n,)).astype(np.float32), "bias")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y0" if epilogue else "y"])]
    if epilogue:  # a residual and SiLU, as a decoder's MLP and attention output write them
        nodes += [helper.make_node("Add", ["y0", "bias"], ["y1"]), helper.make_node("Sigmoid", ["y1"], ["s"]),
                  helper.make_node("Mul", ["y1", "s"], ["y2"]), helper.make_node("Add", ["y2", "r"], ["y"])]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [*batch, m, k])]
    if epilogue:
        inputs.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, [*batch, m, n]))
    graph = helper.make_graph(nodes, "gemv", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [*batch, m, n])],
                              [w, bias])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("kw", [
    pytest.param(dict(m=1, k=128, n=256), id="decode-step"),
    pytest.param(dict(m=4, k=70, n=36, epilogue=True), id="4-rows-epilogue"),
    pytest.param(dict(m=1, k=33, n=1028, batch=(2,)), id="batched-ragged"),
    pytest.param(dict(m=1, k=257, n=12, batch=(1, 3), epilogue=True), id="two-batch-dims"),
    pytest.param(dict(m=2, k=70, n=40, epilogue=True), id="2-rows-epilogue-n8"),
    pytest.param(dict(m=4, k=70, n=40, epilogue=True), id="4-rows-epilogue-n8"),
    pytest.param(dict(m=1, k=33, n=1032, batch=(2,)), id="batched-ragged-n8"),
])
def test_gemv(kw, precision):
    model = gemv_model(**kw)
    kernels = compile_with_kernels(model, target="generic", precision=precision)[1]
    gemv = [k for k in kernels if k.template.startswith("matmul")]
    assert [k.template for k in gemv] == ["matmul_gemv"]
    # 8 columns' partial sums of 4 rows would take 32 KiB of shared memory, over generic's 16
    wide = precision == "fp16" and kw["n"] % 8 == 0 and kw["m"] <= 2
    assert gemv[0].params["COLS"] == (8 if wide else 4)
    tol = dict(rtol_l2=1e-4) if precision == "fp32" else dict(rtol_l2=1e-2, rtol=1e9, atol=1e9)
    check_against_onnxruntime(model, target="generic", precision=precision, **tol)


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("kw, split", [
    pytest.param(dict(m=1, k=2048, n=64, epilogue=True), 8, id="few-columns"),
    pytest.param(dict(m=1, k=1500, n=40, batch=(3,)), 3, id="batched-ragged"),   # the last slice shorter
    pytest.param(dict(m=4, k=1030, n=8, epilogue=True), 3, id="4-rows-one-group"),
])
def test_split_k(kw, split, precision):
    """Few columns, deep K: slices of K across workgroups, the last slice of a column group to
    finish adds them and applies the epilogue (the split-K finish, common.glsl.j2)."""
    model = gemv_model(**kw)
    kernels = compile_with_kernels(model, target="generic", precision=precision)[1]
    gemv = [k for k in kernels if k.template == "matmul_gemv"]
    assert len(gemv) == 1 and gemv[0].params["split_k"]
    assert dict((n, v) for n, _, v in gemv[0].spec)["SPLIT"] == split
    assert kernels[0].template == "zero_fill"   # the slices' counters
    tol = dict(rtol_l2=1e-4) if precision == "fp32" else dict(rtol_l2=1e-2, rtol=1e9, atol=1e9)
    check_against_onnxruntime(model, target="generic", precision=precision, **tol)


@pytest.mark.parametrize("kw, target", [
    (dict(m=5, k=64, n=64), "generic"),     # more rows: the register or tiled kernels
    (dict(m=1, k=64, n=30), "generic"),     # N not whole vec4s
    (dict(m=1, k=64, n=64), "lavapipe"),    # texel profiles keep their own kernels
])
def test_other_products_keep_their_kernels(kw, target):
    kernels = compile_with_kernels(gemv_model(**kw), target=target)[1]
    assert "matmul_gemv" not in [k.template for k in kernels]
