"""Decoders as onnxruntime-genai's model builder writes them (tests/models/fixtures/make_genai.py:
tiny Llama, float32 and int4; com.microsoft GroupQueryAttention, Skip/SimplifiedLayerNormalization,
MatMulNBits; inputs input_ids and attention_mask) compiled at their cache's length: the caches
are bundle state, attention_mask is [1, N] with N the cache's rows, and Model.generate feeds it
(ones for the rows filled and the run's). Its greedy tokens equal onnxruntime's own loop over the
same file, fed the growing past as onnxruntime-genai feeds it without a shared buffer."""
from pathlib import Path

import pytest

from tests.models.onnxruntime_loops import GenaiLoop

from compiler.compile import compile_model
from runtime_min import load

FIXTURES = Path(__file__).resolve().parent / "fixtures"
PROMPT = [3, 17, 42, 5, 9, 11, 2]   # longer than the prefill variant: chunks of 4, 1, 1, 1
STEPS = 33
CONTEXT = 160
PAST = {f"past_key_values.{layer}.{kv}": [1, 2, CONTEXT, 16] for layer in range(2) for kv in ("key", "value")}
VARIANTS = [{"input_ids": [1, 4], "attention_mask": [1, CONTEXT], **PAST},
            {"input_ids": [1, 1], "attention_mask": [1, CONTEXT], **PAST}]


def genai_bundle(name: str, target: str, **options) -> bytes:
    return compile_model(FIXTURES / f"{name}.onnx", variants=VARIANTS, target=target, **options)


@pytest.mark.parametrize("name, target, argmax", [
    ("llama_tiny_genai_fp32", "lavapipe", False), ("llama_tiny_genai_int4", "lavapipe", False),
    ("llama_tiny_genai_fp32", "generic", True), ("llama_tiny_genai_int4", "generic", True)])
def test_greedy_tokens_equal_onnxruntime(name, target, argmax):
    """The generic profile runs the GPUs' decode kernels; the argmax output copies back one id
    a step."""
    bundle = genai_bundle(name, target, argmax_output="logits" if argmax else None)
    want = GenaiLoop(FIXTURES / f"{name}.onnx").greedy(PROMPT, STEPS)
    assert len(set(want)) > 3  # the loop is no constant token
    with load(bundle) as model:
        assert [t.name for t in model.inputs] == ["input_ids", "attention_mask"]
        assert [s.shape for s in model.state] == [(1, 2, CONTEXT, 16)] * 4
        assert list(model.generate(PROMPT, STEPS)) == want


def test_sequence_past_the_mask_is_refused():
    with load(genai_bundle("llama_tiny_genai_fp32", "lavapipe")) as model:
        with pytest.raises(ValueError, match=f"exceed the {CONTEXT} rows"):
            list(model.generate(PROMPT, CONTEXT))


def test_mask_of_another_length_in_a_variant_is_refused():
    variants = [dict(VARIANTS[0], attention_mask=[1, CONTEXT - 8]), VARIANTS[1]]
    bundle = compile_model(FIXTURES / "llama_tiny_genai_fp32.onnx", variants=variants, target="lavapipe")
    with load(bundle) as model:
        with pytest.raises(ValueError, match="the same in every variant"):
            list(model.generate(PROMPT, 4))
