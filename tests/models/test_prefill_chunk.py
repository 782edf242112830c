"""A prompt chunk (16 tokens) of the Llama-shaped decoders: ONNX's in-place cache form
(tests/llm_models.py) and optimum's growing cache (--max-context).

The dispatches, compiled for nvidia with --precision fp16. A layer is: the norm; Q, K and V as
one product (passes/merge_projections.py: the head splits, Transposes at S > 1, go into their
readers' layouts, passes/transposes_in_place.py); one rotary kernel for Q's and K's columns of
it (passes/split_parts.py), storing K's rows into its cache and copying V's into theirs
(passes/cache_row_stores.py); attention, reading Q and writing its output at the strides of the
head split and merge; the output
projection with the residual add in its store; the norm; gate and up as one product storing
silu(gate) * up (passes/paired_products.py); the down projection with the residual add in its
store. No copy kernel.

The chunk's logits and caches on this device, against onnxruntime's (the caches as inputs and
outputs, and kept on the device over two chunks and a step): the generic profile's kernels in
float32, the nvidia profile's (its tensor cores emulated) in float16."""
from collections import Counter
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from compiler.compile import compile_model, compile_with_kernels
from compiler.targets import TARGETS, emulating_cooperative_matrix
from runtime_min import load
from tests.harness import assert_close, run_bundle, run_onnxruntime
from tests.llm_models import step_feeds, tiny_llama

FIXTURES = Path(__file__).resolve().parent / "fixtures"
LAYERS = 2
CHUNK = 16


@pytest.mark.parametrize("form", ["in-place", "optimum"])
def test_dispatches(form):
    model, extra = (tiny_llama(layers=LAYERS, context=64), {}) if form == "in-place" else \
        (FIXTURES / "llama_tiny_optimum.onnx", {"max_context": 64})
    kernels = compile_with_kernels(model, input_shapes={"input_ids": [1, CHUNK]}, target="nvidia",
                                   precision="fp16", **extra)[1]
    layer = {"layernorm": 2, "rotary": 1}
    want = Counter({k: LAYERS * n for k, n in layer.items()})
    if form == "in-place":
        # q/k/v, o, gate and up, down a layer, and the head; the final norm; position ids, keys
        # filled and their int32 cast
        want.update({"matmul_coopmat": 4 * LAYERS + 1, "attention_tiled": LAYERS, "layernorm": 1,
                     "gather": 1, "elementwise_typed": 3})
    else:
        # (its down projection, of K = 128, is split-K; the first layer's float32 residual)
        want.update({"matmul_coopmat": 3 * LAYERS + 1, "matmul_tiled": LAYERS, "splitk_reduce": LAYERS,
                     "attention_coopmat": LAYERS, "layernorm": 1, "gather": 1, "elementwise_typed": 4})
    assert +Counter(k.template for k in kernels) == +want
    qkv = [k for k in kernels if any(n.endswith(("q_proj/MatMul", ".q")) for n in k.nodes)]
    assert len(qkv) == LAYERS and all(any(n.endswith(("v_proj/MatMul", ".v")) for n in k.nodes) for k in qkv)
    assert sum(bool(k.params.get("PAIRED")) for k in kernels) == LAYERS


TARGETS_PRECISIONS = [("generic", "fp32"), ("nvidia-emulated", "fp16")]


def _target(name):
    return emulating_cooperative_matrix(TARGETS["nvidia"]) if name == "nvidia-emulated" else name


def _tolerance(precision):
    return dict(rtol_l2=1e-2, rtol=1e9, atol=1e9) if precision == "fp16" else dict(rtol_l2=1e-5, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("target, precision", TARGETS_PRECISIONS)
def test_chunk_against_onnxruntime(target, precision):
    """Six tokens at position 5 of the in-place form, the caches an input and an output of their
    own (state none: the cache writes read their rows at strides): logits and both caches of
    every layer."""
    llama = tiny_llama(layers=LAYERS, context=32)
    bundle = compile_with_kernels(llama, input_shapes={"input_ids": [1, 6]}, target=_target(target), state="none",
                                  precision=precision)[0]
    feeds = step_feeds(llama, [3, 9, 4, 1, 7, 2], 5)
    got, ref = run_bundle(bundle, feeds)[0], run_onnxruntime(llama, feeds)
    for name in ref:
        assert_close(name, got[name], ref[name], **_tolerance(precision))


@pytest.mark.parametrize("target, precision", TARGETS_PRECISIONS)
def test_chunks_in_state_against_onnxruntime(target, precision):
    """Two chunks of six tokens, the caches kept on the device (the rotary kernel storing K's
    and V's rows into them), then a step: the logits of every run, against onnxruntime fed its
    own caches back."""
    llama = tiny_llama(layers=LAYERS, context=32)
    bundle = compile_model(llama, variants=[{"input_ids": [1, 6]}, {"input_ids": [1, 1]}], target=_target(target),
                           precision=precision)
    sess = ort.InferenceSession(llama.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    caches = {i.name: np.zeros(i.shape, np.float32) for i in sess.get_inputs() if i.name.startswith("past_")}
    position = 0
    with load(bundle) as model:
        for ids in ([3, 9, 4, 1, 7, 2], [8, 6, 5, 0, 2, 9], [4]):
            feeds = {"input_ids": np.array([ids], np.int64), "position": np.array([position], np.int64)}
            want = dict(zip(names, sess.run(None, {**feeds, **caches})))
            caches = {k: want[k.replace("past_", "present_")] for k in caches}
            assert_close("logits", model.run(feeds)["logits"], want["logits"], **_tolerance(precision))
            position += len(ids)
