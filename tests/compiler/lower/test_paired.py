"""A paired product (passes/paired_products.py) where no GEMV kernel fits: a CPU profile's float
products, a prompt's rows, a prompt's block-quantized products (dequantized for the tiled GEMM):
the second product first, into scratch, then the first with the epilogue reading it, as before
pairing. Against onnxruntime (for --weights, the same quantization as MatMulNBits nodes)."""
import pytest

from bundles import read_bundle
from compiler.compile import compile_with_kernels
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
