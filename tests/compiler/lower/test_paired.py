"""A paired product (passes/paired_products.py) where no GEMV kernel fits: a CPU profile's float
products, a prompt's rows, a prompt's block-quantized products (dequantized for the tiled GEMM):
the second product first, into scratch, then the first with the epilogue reading it, as before
pairing. Against onnxruntime (for --weights, the same quantization as MatMulNBits nodes)."""
import pytest

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
