"""passes/rotary_in_attention.py: a decode step's rotary embedding folded into its tiled
attention, which rotates Q and the step's K row as it reads them from the packed projection and
stores the step's K and V rows into the caches itself.

The kernels (no rotary dispatch where the attention is the tiled kernel, split-KV or not; the
two kernels as before on a texel profile and under cooperative-matrix attention), and the step's logits and
both caches (every row: the stored one and the untouched ones) against onnxruntime's, with the
step's row in the first chunk, in a later chunk and at a chunk's first key, float32 and float16,
on the generic profile and on nvidia's choices within lavapipe's shared memory; pairs of
neighbours (interleaved) and a rotation of part of each head.

Tolerances, float32: rel L2 < 1e-4 and every element within 1e-5 + 1e-4 |ref|; float16 against
onnxruntime's float32: rel L2 < 1e-2 and within 2e-2 + 2e-2 |ref|.
"""
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from compiler.compile import compile_model, compile_with_kernels
from compiler.targets import TARGETS as PROFILES
from tests.harness import assert_close, run_bundle, run_onnxruntime
from tests.llm_models import step_feeds, tiny_llama

NVIDIA_32K = replace(PROFILES["nvidia"], name="nvidia-32k", max_shared_memory=32768, cooperative_matrix=())
F32 = dict(rtol_l2=1e-4, rtol=1e-4, atol=1e-5)
F16 = dict(rtol_l2=1e-2, rtol=2e-2, atol=2e-2)
CONTEXT = 256
OPTIMUM = Path(__file__).resolve().parents[2] / "models" / "fixtures" / "llama_tiny_optimum.onnx"


@pytest.fixture(scope="module")
def llama():
    return tiny_llama(layers=2, context=CONTEXT)


def _templates(model, target, shapes={"input_ids": [1, 1]}, **kw):
    return Counter(k.template for k in compile_with_kernels(model, input_shapes=shapes, target=target, **kw)[1])


@pytest.mark.parametrize("target", ["generic", "nvidia"])
def test_no_rotary_dispatch_in_a_split_step(llama, target):
    kinds = _templates(llama, target, precision="fp16" if target == "nvidia" else "fp32")
    assert kinds["rotary"] == 0 and kinds["attention_tiled"] == 2


def test_two_kernels_where_attention_cannot_rotate(llama):
    """lavapipe's texel attention, and nvidia's float16 cooperative-matrix attention (optimum's
    export over a cache too short to split): the rotary kernel stays."""
    assert _templates(llama, "lavapipe")["rotary"] == 2
    short = _templates(OPTIMUM, "nvidia", precision="fp16", max_context=64)
    assert short["rotary"] == 2 and short["attention_coopmat"] == 2


def test_unsplit_attention_rotates_too():
    """A cache of 64 rows, one chunk: the one-pass tiled kernel rotates and stores the rows."""
    model = tiny_llama(layers=2, context=64)
    kinds = _templates(model, "generic")
    assert kinds["rotary"] == 0 and kinds["attention_tiled"] == 2
    bundle = compile_model(model, input_shapes={"input_ids": [1, 1]}, target="generic", state="none")
    feeds = step_feeds(model, [7], 40)
    got, want = run_bundle(bundle, feeds)[0], run_onnxruntime(model, feeds)
    for name in want:
        assert_close(name, got[name], want[name], **F32)


@pytest.mark.parametrize("target, position, precision", [
    ("generic", 5, "fp32"), ("generic", 64, "fp32"), ("generic", 150, "fp32"), ("generic", 64, "fp16"),
    (NVIDIA_32K, 150, "fp16"), (NVIDIA_32K, 5, "fp32")],
    ids=["generic-5-fp32", "generic-64-fp32", "generic-150-fp32", "generic-64-fp16", "nvidia-32k-150-fp16",
         "nvidia-32k-5-fp32"])
def test_step_against_onnxruntime(llama, target, position, precision):
    bundle = compile_model(llama, input_shapes={"input_ids": [1, 1]}, target=target, state="none",
                           precision=precision)
    feeds = step_feeds(llama, [7], position)
    got, want = run_bundle(bundle, feeds)[0], run_onnxruntime(llama, feeds)
    for name in want:  # logits, and both caches of every layer
        assert_close(name, got[name], want[name], **(F16 if precision == "fp16" else F32))


@pytest.mark.parametrize("form", [dict(interleaved=1), dict(rotary_dim=4), dict(interleaved=1, rotary_dim=4)],
                         ids=["interleaved", "partial", "interleaved-partial"])
def test_rotary_forms_against_onnxruntime(form):
    model = tiny_llama(layers=2, context=CONTEXT, **form)
    bundle = compile_model(model, input_shapes={"input_ids": [1, 1]}, target="generic", state="none")
    assert "rotary" not in {k.template for k in compile_with_kernels(model, input_shapes={"input_ids": [1, 1]},
                                                                      target="generic")[1]}
    feeds = step_feeds(model, [7], 150)
    got, want = run_bundle(bundle, feeds)[0], run_onnxruntime(model, feeds)
    for name in want:
        assert_close(name, got[name], want[name], **F32)
