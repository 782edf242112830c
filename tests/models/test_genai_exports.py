"""Decoders as onnxruntime-genai's model builder writes them (tests/models/fixtures/make_genai.py:
tiny Llama, Qwen2, Gemma, Gemma-2, Phi-3 and Phi-4-mini, float32 and int4; com.microsoft GroupQueryAttention, Skip/SimplifiedLayerNormalization,
MatMulNBits; inputs input_ids and attention_mask) compiled at their cache's length: the caches
are bundle state, attention_mask is [1, N] with N the cache's rows, and Model.generate feeds it
(ones for the rows filled and the run's). Its greedy tokens equal onnxruntime's own loop over the
same file, fed the growing past as onnxruntime-genai feeds it without a shared buffer (Gemma's
library-init greedy loop is one token over and over: its logits are what is compared); logits at
every step, float32 and with a float16 cache."""
from pathlib import Path

import numpy as np
import pytest

from tests.harness import assert_close
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
    ("llama_tiny_genai_fp32", "generic", True), ("llama_tiny_genai_int4", "generic", True),
    ("qwen2_tiny_genai_fp32", "lavapipe", True), ("qwen2_tiny_genai_int4", "generic", False)])
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


def logits_every_step(name: str | Path, bundle: bytes, cache_dtype, tolerance: dict, context: int = CONTEXT) -> None:
    """A prompt of 7 in chunks of 4, 1, 1, 1, then decode steps, the mask fed as generate feeds
    it: logits against onnxruntime's at every run (over the fixture `name`, or the file)."""
    ref = GenaiLoop(name if isinstance(name, Path) else FIXTURES / f"{name}.onnx")
    chunks = [PROMPT[:4], PROMPT[4:5], PROMPT[5:6], PROMPT[6:7]]
    with load(bundle) as model:
        assert model.read_state("past_key_values.0.key").dtype == cache_dtype
        filled = 0
        for step in range(12):
            ids = chunks[step] if step < len(chunks) else [token]
            want = ref.run(ids)
            mask = np.zeros((1, context), np.int64)
            mask[0, :filled + len(ids)] = 1
            got = model.run({"input_ids": np.array([ids], np.int64), "attention_mask": mask})
            assert_close("logits", got["logits"], want["logits"], **tolerance)
            filled += len(ids)
            token = int(np.argmax(want["logits"][0, -1]))


@pytest.mark.parametrize("name, target, precision", [
    ("llama_tiny_genai_fp32", "lavapipe", "fp32"), ("llama_tiny_genai_int4", "generic", "fp32"),
    ("llama_tiny_genai_fp32", "lavapipe", "fp16"), ("llama_tiny_genai_int4", "generic", "fp16"),
    ("qwen2_tiny_genai_int4", "lavapipe", "fp32"), ("gemma_tiny_genai_fp32", "lavapipe", "fp32"),
    ("gemma_tiny_genai_int4", "generic", "fp32"), ("gemma_tiny_genai_fp32", "generic", "fp16")])
def test_logits_every_step(name, target, precision):
    """float32 to 1e-4 (rel L2), with a float16 cache (--precision fp16) to 1e-2."""
    tolerance = dict(rtol_l2=1e-4, rtol=1e-3, atol=1e-5) if precision == "fp32" else dict(rtol_l2=1e-2, rtol=1e9, atol=1e9)
    logits_every_step(name, genai_bundle(name, target, precision=precision),
                      np.float32 if precision == "fp32" else np.float16, tolerance)


@pytest.mark.parametrize("name, target, precision", [("llama_tiny_genai_fp32", "lavapipe", "fp32"),
                                                     ("qwen2_tiny_genai_int4", "generic", "fp16"),
                                                     ("gemma2_tiny_genai_int4", "lavapipe", "fp16")])
def test_int8_cache(name, target, precision):
    """--kv-cache int8 on GroupQueryAttention's caches: logits at every step within 3e-2 (rel L2) of
    onnxruntime's float cache (the rounding's own cost: the same rounding is checked exactly on
    ONNX's forms, tests/compiler/passes/test_int8_cache.py)."""
    logits_every_step(name, genai_bundle(name, target, precision=precision, kv_cache="int8"), np.int8,
                      dict(rtol_l2=3e-2, rtol=1e9, atol=1e9))


PHI3_CONTEXT = 64   # its original context: the short factors' tables serve every position


@pytest.mark.parametrize("name, target", [("phi3_tiny_genai_fp32", "lavapipe"), ("phi3_tiny_genai_int4", "generic")])
def test_phi3_at_its_original_context(name, target):
    """Phi-3's long-context export (an If picks the rotary tables by attention_mask's length): at a
    cache of its original context the If decides the same for every length, the short tables;
    greedy tokens equal onnxruntime's loop, logits at every step to 1e-4 (float16 cache: 1e-2)."""
    path = FIXTURES / f"{name}.onnx"
    variants = [{"input_ids": [1, 4]}, {"input_ids": [1, 1]}]
    bundle = compile_model(path, variants=variants, target=target, max_context=PHI3_CONTEXT)
    want = GenaiLoop(path).greedy(PROMPT, STEPS)
    assert len(set(want)) > 3
    with load(bundle) as model:
        assert list(model.generate(PROMPT, STEPS)) == want
    logits_every_step(name, bundle, np.float32, dict(rtol_l2=1e-4, rtol=1e-3, atol=1e-5), PHI3_CONTEXT)
    half = compile_model(path, variants=variants, target=target, max_context=PHI3_CONTEXT, precision="fp16")
    logits_every_step(name, half, np.float16, dict(rtol_l2=1e-2, rtol=1e9, atol=1e9), PHI3_CONTEXT)


def test_phi3_past_its_original_context_is_refused():
    """Past it, the pinned mask would give every sequence the long tables, which onnxruntime-genai
    uses only once the sequence is longer (recomputing the cache): refused, naming the If, for
    compile and check alike."""
    import onnx

    from compiler.check import check_model
    from compiler.errors import CompileError
    path = FIXTURES / "phi3_tiny_genai_fp32.onnx"
    message = "If '/model/rope_caches_subgraph/If' chooses its branch from attention_mask's length"
    with pytest.raises(CompileError, match=message):
        compile_model(path, variants=[{"input_ids": [1, 1]}], target="lavapipe", max_context=CONTEXT)
    with pytest.raises(CompileError, match=message):
        check_model(onnx.load(path), {"input_ids": [1, 1]}, "generic", max_context=CONTEXT)
    assert check_model(onnx.load(path), {"input_ids": [1, 1]}, "generic", max_context=PHI3_CONTEXT).ok
    # a condition vkc cannot bound by its two ends (not a comparison: Equal) is refused at any length
    model = onnx.load(path)
    next(n for n in model.graph.node if n.op_type == "Greater").op_type = "Equal"
    with pytest.raises(CompileError, match="decides only a comparison of the length with constants"):
        compile_model(model, variants=[{"input_ids": [1, 1]}], target="lavapipe", max_context=PHI3_CONTEXT)


@pytest.mark.parametrize("name, target", [("phi4mini_tiny_genai_fp32", "lavapipe"), ("phi4mini_tiny_genai_int4", "generic")])
def test_partial_rotary(name, target):
    """Phi-4-mini's form: rotary embedding on the first 3/4 of each head (the tables' width), the
    head size read from the q/k/v projection (not the tables); greedy tokens equal onnxruntime's
    loop (library init: one token over and over), logits at every step to 1e-4."""
    path = FIXTURES / f"{name}.onnx"
    bundle = compile_model(path, variants=[{"input_ids": [1, 4]}, {"input_ids": [1, 1]}], target=target,
                           max_context=PHI3_CONTEXT)
    with load(bundle) as model:
        assert [s.shape for s in model.state] == [(1, 1, PHI3_CONTEXT, 64)] * 4
        assert list(model.generate(PROMPT, STEPS)) == GenaiLoop(path).greedy(PROMPT, STEPS)
    logits_every_step(name, bundle, np.float32, dict(rtol_l2=1e-4, rtol=1e-3, atol=1e-5), PHI3_CONTEXT)


@pytest.mark.parametrize("name, target", [("gemma2_tiny_genai_fp32", "lavapipe"), ("gemma2_tiny_genai_int4", "generic")])
def test_sliding_window_past_the_cache(name, target):
    """Gemma-2's sliding-window layers (local_window_size 4096) with a cache of 160 rows: the
    window holds every key, so it masks nothing; soft-capped scores and logits. Greedy tokens
    equal onnxruntime's loop, logits at every step to 1e-4."""
    bundle = genai_bundle(name, target)
    with load(bundle) as model:
        assert list(model.generate(PROMPT, STEPS)) == GenaiLoop(FIXTURES / f"{name}.onnx").greedy(PROMPT, STEPS)
    logits_every_step(name, bundle, np.float32, dict(rtol_l2=1e-4, rtol=1e-3, atol=1e-5))


@pytest.mark.parametrize("name, target", [("gemma2_tiny_genai_fp32", "lavapipe"), ("gemma2_tiny_genai_int4", "generic")])
def test_sliding_window_shorter_than_the_cache(name, target, tmp_path):
    """Gemma-2's sliding-window layers with their window cut to 8 keys, past which the prompt
    and the tokens run: greedy tokens equal onnxruntime's loop over the same file (its cache
    the sequence's length, sliding_window_cache off), logits at every step to 1e-4."""
    import onnx
    model = onnx.load(FIXTURES / f"{name}.onnx")
    for node in model.graph.node:
        for a in node.attribute:
            if a.name == "local_window_size" and a.i > 0:
                a.i = 8
            if a.name == "sliding_window_cache":
                a.i = 0
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, path)
    want = GenaiLoop(path).greedy(PROMPT, STEPS)
    bundle = compile_model(path, variants=VARIANTS, target=target)
    with load(bundle) as run:
        assert list(run.generate(PROMPT, STEPS)) == want
    logits_every_step(path, bundle, np.float32, dict(rtol_l2=1e-4, rtol=1e-3, atol=1e-5))


@pytest.mark.parametrize("name", ["llama_tiny_genai_int4", "qwen2_tiny_genai_fp32"])
def test_max_context_pins_the_caches_and_the_mask(name):
    """--max-context N alone, as for optimum's exports: the caches [1, kv heads, N, head size]
    and attention_mask [1, N]; the same bundle as pinning them by hand."""
    path = FIXTURES / f"{name}.onnx"
    bundle = compile_model(path, variants=[{"input_ids": [1, 4]}, {"input_ids": [1, 1]}], target="lavapipe",
                           max_context=CONTEXT)
    assert bundle == genai_bundle(name, "lavapipe")
    with load(bundle) as model:
        assert list(model.generate(PROMPT, STEPS)) == GenaiLoop(path).greedy(PROMPT, STEPS)


def test_max_context_on_the_command_line(tmp_path):
    from typer.testing import CliRunner

    from compiler.cli import app
    out = tmp_path / "llama.vkb"
    r = CliRunner().invoke(app, ["compile", str(FIXTURES / "llama_tiny_genai_fp32.onnx"), "-o", str(out),
                                 "--target", "lavapipe", "--max-context", str(CONTEXT), "--variant", "input_ids=1x4",
                                 "--variant", "input_ids=1x1"])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(app, ["generate", str(out), "--prompt-ids", ",".join(map(str, PROMPT)),
                                 "--max-new-tokens", "8"])
    assert r.exit_code == 0, r.output
    want = GenaiLoop(FIXTURES / "llama_tiny_genai_fp32.onnx").greedy(PROMPT, 8)
    assert r.output.splitlines()[0].split() == [str(t) for t in want]


def test_check_agrees_with_compile_at_max_context():
    """vkc check takes --max-context on the builder's export as compile does: nothing refused."""
    import onnx

    from compiler.check import check_model
    report = check_model(onnx.load(FIXTURES / "llama_tiny_genai_int4.onnx"), {"input_ids": [1, 1]}, "generic",
                         max_context=CONTEXT)
    assert report.ops and report.ok, report
