"""A decode step (one token) of the Llama-shaped decoders: ONNX's in-place cache form
(tests/llm_models.py) and optimum's growing cache (--max-context), float and --weights int4/int8.

The dispatches, compiled for nvidia with --precision fp16. A layer is: Q, K and V as one product
(passes/merge_projections.py) that RMS-normalizes its input as it reads it (passes/
normalized_products.py); split-KV attention over a cache
of 256 rows, reading Q's, K's and V's columns of the product in place, rotating Q and K as it reads
them and storing K's row and V's into their caches (passes/split_parts.py,
passes/cache_row_stores.py, passes/rotary_in_attention.py); the output projection with the residual add in its store; gate and
up as one normalizing product storing silu(gate) * up (passes/paired_products.py); the down
projection with the residual add in its store. Per model: the position arithmetic (position ids,
the keys filled: once, not a layer), the embedding, the head (normalizing), and one float32
residual add in the first layer (its float16 operand and float32 result are of two types, which
no product's store reads yet).

The step's logits and caches on this device, on the generic profile's GEMV kernels (the ones
the decode step runs on GPUs: paired and merged products), against onnxruntime's."""
from collections import Counter
from pathlib import Path

import pytest

from bundles import read_bundle
from compiler.compile import compile_model, compile_with_kernels
from tests.harness import assert_close, run_bundle, run_onnxruntime
from tests.llm_models import step_feeds, tiny_llama
from tests.quantized_onnx import quantized_onnx

FIXTURES = Path(__file__).resolve().parent / "fixtures"
LAYERS = 2


def _layer(product):
    """One layer's kernels: no cache write or rotation of their own."""
    return {product: 4, "attention_tiled": 1}


@pytest.mark.parametrize("weights", [None, "int4", "int8"])
@pytest.mark.parametrize("form", ["in-place", "optimum"])
def test_dispatches(form, weights):
    model, extra = (tiny_llama(layers=LAYERS, context=256), {}) if form == "in-place" else \
        (FIXTURES / "llama_tiny_optimum.onnx", {"max_context": 256})
    kernels = compile_with_kernels(model, input_shapes={"input_ids": [1, 1]}, target="nvidia",
                                   precision="fp16", weights=weights, **extra)[1]
    product = "matmul_gemv" if weights is None else "matmul_nbits"
    want = Counter({k: LAYERS * n for k, n in _layer(product).items()})
    want.update({product: 1, "zero_fill": 1,   # the split-KV attention's counters, zeroed once a run
                 "gather" if weights is None else "gather_block_quantized": 1,
                 # position ids and keys filled (in-place: int64, and its int32 cast for attention;
                 # optimum: keys filled int64 and int32, position ids); every layer's residual
                 # sums are the products' epilogues (the first layer's float16 one read as such)
                 "elementwise_typed": 3})
    assert +Counter(k.template for k in kernels) == +want


@pytest.mark.parametrize("precision, weights", [("fp32", None), ("fp16", None), ("fp32", "int4")])
def test_step_on_gemv_kernels(precision, weights):
    llama = tiny_llama(layers=LAYERS, context=16)
    bundle = compile_model(llama, input_shapes={"input_ids": [1, 1]}, target="generic", state="none",
                           precision=precision, weights=weights)
    oracle = quantized_onnx(llama, read_bundle(bundle).manifest) if weights else llama
    feeds = step_feeds(llama, [7], 5)
    got, ref = run_bundle(bundle, feeds)[0], run_onnxruntime(oracle, feeds)
    tol = dict(rtol_l2=1e-2, rtol=1e9, atol=1e9) if precision == "fp16" else dict(rtol_l2=1e-5, rtol=1e-4, atol=1e-5)
    for name in ref:
        assert_close(name, got[name], ref[name], **tol)
