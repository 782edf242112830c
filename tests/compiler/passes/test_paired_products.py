"""paired_products (through fuse_epilogues): SwiGLU's silu(gate) * up over two products of the
same activations becomes one product by the weights side by side, whose kernel computes both
columns and stores the gated value: one dispatch on the GEMV kernels (float and MatMulNBits).
Against onnxruntime (for --weights, the same quantization as MatMulNBits nodes). Where no GEMV
kernel fits: tests/compiler/lower/test_paired.py."""
import pytest

from bundles import read_bundle
from compiler.compile import compile_with_kernels, lower_model
from tests.compiler.lower.test_matmul_nbits import SUBGROUP_SUMS
from tests.harness import assert_close, random_feeds, run_bundle, run_onnxruntime
from tests.llm_models import swiglu_model
from tests.quantized_onnx import quantized_onnx


def check_pair(model, target, weights=None, precision="fp32"):
    """The product kernels' templates and all kernels, the outputs checked against onnxruntime."""
    bundle, kernels = compile_with_kernels(model, target=target, weights=weights, precision=precision)
    oracle = quantized_onnx(model, read_bundle(bundle).manifest) if weights else model
    feeds = random_feeds(model)
    got, ref = run_bundle(bundle, feeds)[0], run_onnxruntime(oracle, feeds)
    tol = dict(rtol_l2=1e-2, rtol=1e9, atol=1e9) if precision == "fp16" else dict(rtol_l2=1e-5, rtol=1e-4, atol=1e-5)
    for name in ref:
        assert_close(name, got[name], ref[name], **tol)
    return [k.template for k in kernels if not k.template.startswith("elementwise")], kernels


@pytest.mark.parametrize("target, rows, weights", [
    ("generic", 1, None), ("generic", 2, None),
    ("generic", 1, "int4"),
    (SUBGROUP_SUMS, 3, "int4"),                # the nvidia profile's reduction
    ("lavapipe", 2, "int8"),                   # a row group an invocation
])
def test_gated_products_pair(target, rows, weights):
    templates, kernels = check_pair(swiglu_model(rows), target, weights)
    assert templates == ["matmul_gemv" if weights is None else "matmul_nbits"]
    assert len(kernels) == 1 and kernels[0].params["PAIRED"]


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_pair_split_k(precision):
    """Few columns, deep K: the pair's slices of K across workgroups, the last to finish adding
    both products' sums (acc_v, acc_w) before the gated store."""
    templates, kernels = check_pair(swiglu_model(1, k=2048, f=16), "generic", precision=precision)
    gemv = [k for k in kernels if k.template == "matmul_gemv"]
    assert templates == ["zero_fill", "matmul_gemv"] and gemv[0].params["PAIRED"] and gemv[0].params["split_k"]


def test_pair_over_shared_memory_runs_apart():
    """Four rows' paired partial sums would take 32 KiB of shared memory, over the generic
    profile's 16: the two products run as two GEMVs."""
    templates, _ = check_pair(swiglu_model(4), "generic")
    assert templates == ["matmul_gemv"] * 2


def test_float16_pair():
    """--precision fp16: the gated product read by the down projection is float16 (passes/
    scale_products.py), the pair's store."""
    templates, kernels = check_pair(swiglu_model(1, down=True), "generic", precision="fp16")
    assert templates == ["matmul_gemv"] * 2 and [k.params["PAIRED"] for k in kernels[-2:]] == [True, False]


def test_product_read_elsewhere_stays_apart():
    graph = lower_model(swiglu_model(1, extra_reader=True), target="generic")[1]
    assert not any("paired" in n.attrs for n in graph.nodes)
    assert [n.op_type for n in graph.nodes].count("MatMul") == 2
    check_pair(swiglu_model(1, extra_reader=True), "generic")
