"""A paired product (passes/paired_products.py) where no GEMV kernel fits: a CPU profile's float
products, a prompt's rows, a prompt's block-quantized products (dequantized for the tiled GEMM):
the second product first, into scratch, then the first with the epilogue reading it, as before
pairing. Against onnxruntime (for --weights, the same quantization as MatMulNBits nodes)."""
import pytest

from bundles import read_bundle
from compiler.compile import compile_with_kernels
from compiler.targets import TARGETS, emulating_cooperative_matrix
from tests.compiler.passes.test_paired_products import check_pair
from tests.llm_models import swiglu_model


@pytest.mark.parametrize("target, rows, weights, products", [
    ("lavapipe", 1, None, ["matmul_texel"] * 2),
    ("generic", 16, None, ["matmul_tiled"] * 2),
    ("generic", 64, "int4", ["gather_block_quantized", "matmul_tiled"] * 2),
])
def test_products_apart(target, rows, weights, products):
    templates, kernels = check_pair(swiglu_model(rows), target, weights)
    assert templates == products
    assert not any(k.params.get("PAIRED") for k in kernels)


def test_prompt_halves_bind_the_paired_weights():
    """A prompt's two products bind their halves of the paired packed weights as views where a
    half starts on a binding boundary: the bundle holds those bytes once."""
    bundle, kernels = compile_with_kernels(swiglu_model(64, k=512, f=128), target="generic", weights="int4")
    tensors = {t["name"]: t for t in read_bundle(bundle).manifest["tensors"] if t["memory"] == "weights"}
    halves = sorted((t for name, t in tensors.items() if name.endswith("/part1")), key=lambda t: t["nbytes"])
    assert any(t["nbytes"] % 256 == 0 for t in halves), halves
    for half in halves:
        first = tensors[half["name"][:-1] + "0"]
        if half["nbytes"] % 256 == 0:   # a view: right after its first half, in the same weights
            assert half["offset"] == first["offset"] + first["nbytes"], (first, half)


@pytest.mark.parametrize("target, rows, precision", [
    ("lavapipe", 1, "fp32"), ("generic", 16, "fp32"),
    (emulating_cooperative_matrix(TARGETS["nvidia"]), 64, "fp16"),
])
@pytest.mark.parametrize("f, in_place", [(128, True), (40, False)])
def test_float_halves_read_the_paired_weight(target, rows, precision, f, in_place):
    """A float paired product computed apart reads each half's columns of the paired weight in
    place, its rows the whole width apart, where the half's first column starts on a binding
    boundary (the bundle holds the weight once); otherwise from a copy of the half."""
    model = swiglu_model(rows, k=64, f=f)
    check_pair(model, target, None, precision)
    bundle, _ = compile_with_kernels(model, target=target, precision=precision)
    weights = [t for t in read_bundle(bundle).manifest["tensors"] if t["memory"] == "weights"]
    held = max(t["offset"] + t["nbytes"] for t in weights)
    assert (held == 64 * 2 * f * (2 if precision == "fp16" else 4)) == in_place, weights
