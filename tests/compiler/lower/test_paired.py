"""A paired product (passes/paired_products.py) where no GEMV kernel fits. A prompt's rows on tensor
cores: one cooperative-matrix kernel computes both products (their tiles of B side by side) and
stores the gated value, float weights or block-quantized ones (dequantized as they are fetched). Elsewhere
(a CPU profile's float products, a prompt's tiled GEMM) the second product first, into scratch,
then the first with the epilogue reading it, as before pairing. Against onnxruntime (for
--weights, the same quantization as MatMulNBits nodes)."""
from dataclasses import replace

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


@pytest.mark.parametrize("target, rows, precision", [("lavapipe", 1, "fp32"), ("generic", 16, "fp32")])
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


TENSOR_CORES = emulating_cooperative_matrix(TARGETS["nvidia"])
# A 64x128 tile of 2x2 subgroups, 2x4 accumulators each (SN = 4: two of each product), one
# shared-memory buffer of K steps of 32 (within lavapipe's shared memory)
FOUR_FRAGMENTS = replace(TENSOR_CORES, name="nvidia-emulated-2x4", coopmat_tiles=((2, 2, 2, 4),), min_workgroups=1,
                         coopmat_stages=1, coopmat_k=32)


@pytest.mark.parametrize("target, rows, k, f, weights, b_vec", [
    (TENSOR_CORES, 64, 64, 128, None, 8),      # whole tiles, 16-byte loads of B
    (TENSOR_CORES, 64, 64, 36, None, 4),       # the second product's columns 8 bytes from a 16-byte boundary
    (TENSOR_CORES, 33, 64, 30, None, 1),       # ragged rows and columns, loads of one element
    (FOUR_FRAGMENTS, 64, 96, 40, None, 8),
    (TENSOR_CORES, 70, 128, 40, "int4", 8),    # W's packed words, a word of 8 weights a fetch
])
def test_prompt_pair_on_tensor_cores_is_one_kernel(target, rows, k, f, weights, b_vec):
    templates, kernels = check_pair(swiglu_model(rows, k=k, f=f), target, weights, "fp16")
    assert templates == ["matmul_coopmat"]
    product = next(k for k in kernels if k.template == "matmul_coopmat")
    assert product.params["PAIRED"] and product.params["B_VEC"] == b_vec
    assert product.params["b_mode"] == ("packed" if weights else "strided")
    assert product.groups[0] == -(-f // (product.params["BN"] // 2))   # BN / 2 output columns a workgroup


def test_split_k_keeps_the_pair_apart_from_its_slices():
    """A pair on too few workgroups takes no split-K slices (they would add up two products'
    partial sums): deeper K steps instead."""
    split = replace(TENSOR_CORES, name="nvidia-emulated-split", min_workgroups=100000, coopmat_short_k=0)
    _, kernels = check_pair(swiglu_model(64, k=1024, f=32), split, None, "fp16")
    product = next(k for k in kernels if k.template == "matmul_coopmat")
    assert product.params["PAIRED"] and not product.params["split_k"]
