"""normalize_in_products: an RMS normalization read only by products of a few rows is computed by
their GEMV kernels as they read A (no norm kernel, no intermediate), against onnxruntime: one
product and K split across workgroups, a paired gate/up product, rows of a batch, block-quantized
weights (MatMulNBits); where the kernel that fits cannot normalize (a CPU profile's), the norm
runs first; where the norm's result is read elsewhere, or by more rows, it stays."""
from dataclasses import replace

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from bundles import read_bundle
from compiler.compile import compile_with_kernels
from compiler.lower import matmul_nbits
from tests.compiler.lower.test_matmul_nbits import SUBGROUP_SUMS

STAGED = replace(SUBGROUP_SUMS, name="generic-subgroup-sums-staged")   # matmul_nbits' staged GEMV
from tests.harness import assert_close, check_against_onnxruntime, random_feeds, run_bundle, run_onnxruntime
from tests.quantized_onnx import quantized_onnx


def norm_model(*, rows=1, k=256, n=64, op="RMSNormalization", gated=False, norm_is_output=False, seed=0):
    """x [1, rows, k] -> RMSNorm -> x W [1, rows, n] (gated: silu(x Wg) * (x Wu))."""
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array((1 + rng.normal(size=(k,)) / 4).astype(np.float32), "scale")]
    inits += [numpy_helper.from_array((rng.normal(size=(k, n)) / np.sqrt(k)).astype(np.float32), name)
              for name in (("wg", "wu") if gated else ("w",))]
    nodes = [helper.make_node(op, ["x", "scale"], ["h"], axis=-1, epsilon=1e-5)]
    if gated:
        nodes += [helper.make_node("MatMul", ["h", "wg"], ["gate"], name="gate"),
                  helper.make_node("MatMul", ["h", "wu"], ["up"], name="up"),
                  helper.make_node("Sigmoid", ["gate"], ["sig"]), helper.make_node("Mul", ["gate", "sig"], ["silu"]),
                  helper.make_node("Mul", ["silu", "up"], ["y"])]
    else:
        nodes.append(helper.make_node("MatMul", ["h", "w"], ["y"], name="product"))   # named: the quantized oracle finds it
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, rows, n])]
    outputs += [helper.make_tensor_value_info("h", TensorProto.FLOAT, [1, rows, k])] if norm_is_output else []
    graph = helper.make_graph(nodes, "norm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, rows, k])],
                              outputs, inits)
    return helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 23)])


def templates(model, target="generic", precision="fp32"):
    return [k.template for k in compile_with_kernels(model, target=target, precision=precision)[1]]


def tolerance(precision):
    return dict(rtol_l2=1e-5, rtol=1e-4, atol=1e-5) if precision == "fp32" else dict(rtol_l2=1e-2, rtol=1e9, atol=1e9)


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("kw, want", [
    pytest.param(dict(), ["matmul_gemv"], id="one-product"),
    pytest.param(dict(k=2048), ["zero_fill", "matmul_gemv"], id="split-k"),   # the last slice normalizes
    pytest.param(dict(rows=3, k=100, n=40), ["matmul_gemv"], id="3-rows"),
    pytest.param(dict(gated=True, n=48), ["matmul_gemv"], id="paired"),
    pytest.param(dict(gated=True, k=2048, n=16), ["zero_fill", "matmul_gemv"], id="paired-split-k"),
])
def test_norm_in_the_product(kw, want, precision):
    model = norm_model(**kw)
    assert [t for t in templates(model, precision=precision) if not t.startswith("elementwise")] == want
    check_against_onnxruntime(model, target="generic", precision=precision, **tolerance(precision))


def test_onnxruntime_simplified_layernorm():
    """onnxruntime's SimplifiedLayerNormalization (what its model builder writes; onnx.checker
    does not know it) is taken too."""
    model = norm_model(op="SimplifiedLayerNormalization")
    assert templates(model) == ["matmul_gemv"]
    check_against_onnxruntime(model, target="generic", full_check=None, **tolerance("fp32"))


@pytest.mark.parametrize("kw", [dict(), dict(gated=True, k=2048, n=16)])
def test_cpu_profile_normalizes_first(kw):
    """lavapipe's products have no GEMV kernel: the norm's own kernel runs first, into scratch."""
    model = norm_model(**kw)
    assert "layernorm" in templates(model, target="lavapipe")
    check_against_onnxruntime(model, target="lavapipe", **tolerance("fp32"))


@pytest.mark.parametrize("kw", [dict(norm_is_output=True), dict(rows=8)])
def test_norm_kept(kw):
    """The norm's result read elsewhere (an output), or by a product of more rows than the GEMV
    kernel takes: the norm keeps its kernel."""
    model = norm_model(**kw)
    assert templates(model)[0] == "layernorm"
    check_against_onnxruntime(model, target="generic", **tolerance("fp32"))


@pytest.mark.parametrize("target", ["generic", SUBGROUP_SUMS, STAGED, "lavapipe"])
@pytest.mark.parametrize("weights, kw", [
    ("int4", dict(k=512)),
    ("int8", dict(rows=3, k=256, n=40)),
    ("int4", dict(gated=True, k=256, n=48)),
])
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_norm_in_quantized_products(weights, kw, target, precision, monkeypatch):
    """--weights int4/int8: the MatMulNBits kernel normalizes as it reads A (its invocations add
    up the squares of what they read; staged: as it stages A); lavapipe's kernel of an
    invocation a row group cannot, so the norm runs first. float16: A and the norm's scale
    read eight values a load. Against onnxruntime on the same quantization."""
    if target is STAGED:
        monkeypatch.setattr(matmul_nbits, "STAGED_GROUPS", 4)
    model = norm_model(**kw)
    bundle, kernels = compile_with_kernels(model, target=target, weights=weights, precision=precision)
    templates = [k.template for k in kernels]
    assert ("layernorm" in templates) == (target == "lavapipe") and "matmul_nbits" in templates
    feeds = random_feeds(model)
    got = run_bundle(bundle, feeds)[0]
    ref = run_onnxruntime(quantized_onnx(model, read_bundle(bundle).manifest), feeds)
    for name in ref:
        assert_close(name, got[name], ref[name], **tolerance(precision))
