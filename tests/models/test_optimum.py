"""Decoders as optimum exports them (tests/models/fixtures/make_optimum.py: tiny Llama, sdpa and
eager, Qwen2, Phi-3, Gemma, Mistral, Qwen3, Gemma-2, sdpa and eager, Gemma-3, Granite, OLMo, OLMo-2,
StableLM, GPT-NeoX, Phi, SmolLM3, GPT-2, OPT, Falcon and Cohere; past_key_values in, present =
Concat(past, new) out) compiled with
max_context to a fixed cache kept as state (compiler/growing_cache.py): Model.generate's greedy
tokens equal onnxruntime's own loop over the same file, fed the growing past as optimum feeds it;
logits at every step; a float16 cache; the command line."""
from pathlib import Path

import numpy as np
import onnx
import pytest

from tests.harness import assert_close
from tests.models.onnxruntime_loops import OnnxruntimeLoop

from compiler.compile import compile_model
from runtime_min import load

FIXTURES = Path(__file__).resolve().parent / "fixtures"
PROMPT = [3, 17, 42, 5, 9, 11, 2]   # longer than the prefill variant: chunks of 4, 1, 1, 1
STEPS = 33
CONTEXT = 160   # past 64 keys: decode steps and the prefill chunk take split-KV attention
VARIANTS = [{"input_ids": [1, 4]}, {"input_ids": [1, 1]}]


def kv_heads_and_head_size(path: Path) -> tuple[int, int]:
    """The K/V heads and head size of the export's caches (make_optimum.py: fewer heads than the
    queries' where the family groups them; heads of 16 in the Llama, Qwen2 and Phi-3 fixtures, of 8
    or 16 in the narrower ones)."""
    past = next(i for i in onnx.load(path, load_external_data=False).graph.input if i.name.startswith("past_"))
    dims = past.type.tensor_type.shape.dim
    return dims[1].dim_value, dims[3].dim_value


@pytest.mark.parametrize("name, target", [("llama_tiny_optimum", "lavapipe"), ("llama_tiny_optimum_eager", "lavapipe"),
                                          ("qwen2_tiny_optimum", "lavapipe"), ("phi3_tiny_optimum", "lavapipe"),
                                          ("phi3_tiny_optimum", "generic"), ("mistral_tiny_optimum", "lavapipe"),
                                          ("qwen3_tiny_optimum", "lavapipe"), ("granite_tiny_optimum", "lavapipe"),
                                          ("olmo_tiny_optimum", "lavapipe"), ("stablelm_tiny_optimum", "lavapipe"),
                                          ("gpt_neox_tiny_optimum", "lavapipe"), ("phi_tiny_optimum", "lavapipe")])
def test_greedy_tokens_equal_onnxruntime(name, target):
    """Model.generate's greedy tokens equal onnxruntime's loop (the generic profile: the GPUs'
    decode kernels). Mistral's sliding window of 8 keys hides keys from the ninth token on."""
    path = FIXTURES / f"{name}.onnx"
    bundle = compile_model(path, variants=VARIANTS, target=target, max_context=CONTEXT)
    want = OnnxruntimeLoop(path).greedy(PROMPT, STEPS)
    assert len(set(want)) > 3  # the loop is no constant token
    with load(bundle) as model:
        assert [t.name for t in model.inputs] == ["input_ids", "position"]
        heads, size = kv_heads_and_head_size(path)
        assert [s.shape for s in model.state] == [(1, heads, CONTEXT, size)] * 4
        assert list(model.generate(PROMPT, STEPS)) == want


@pytest.mark.parametrize("name, target", [("llama_tiny_optimum", "lavapipe"), ("gemma_tiny_optimum", "lavapipe"),
                                          ("llama_tiny_optimum", "generic"), ("gemma_tiny_optimum", "generic"),
                                          ("gemma2_tiny_optimum", "lavapipe"), ("gemma2_tiny_optimum_eager", "lavapipe"),
                                          ("gemma2_tiny_optimum_eager", "generic"), ("gemma3_tiny_optimum", "lavapipe"),
                                          ("olmo2_tiny_optimum", "lavapipe"),
                                          ("smollm3_tiny_optimum", "lavapipe"), ("gpt2_tiny_optimum", "lavapipe"),
                                          ("opt_tiny_optimum", "lavapipe"), ("falcon_tiny_optimum", "lavapipe"),
                                          ("cohere_tiny_optimum", "lavapipe")])
def test_logits_and_cache_every_step(name, target):
    """A prompt of 7 in chunks of 4, 1, 1, 1, then decode steps: logits and the cache's filled
    rows against onnxruntime's logits and present at every run. Gemma's export takes no
    position_ids (it counts them from the past's length), and its library-init greedy loop is
    one token over and over, so its logits are what is compared. The generic profile runs the
    GPUs' decode kernels (GEMV products that add the residual in their store and RMS-normalize
    their input as they read it). The other families here repeat one or two tokens too: Gemma-2
    (a sliding window of 8 keys every other layer; the eager export also soft-caps the scores, which
    the CLI's sdpa export leaves out), Gemma-3 (a sliding layer whose rotary has another base than the
    full layer's), OLMo-2, SmolLM3 (no rotary in its second layer), GPT-2 and
    OPT (learned positions), Falcon (one K/V head) and Cohere (interleaved rotary pairs, whose
    angles the export repeats to the run's length)."""
    path = FIXTURES / f"{name}.onnx"
    bundle = compile_model(path, variants=VARIANTS, target=target, max_context=CONTEXT)
    ref = OnnxruntimeLoop(path)
    chunks = [PROMPT[:4], PROMPT[4:5], PROMPT[5:6], PROMPT[6:7]]
    with load(bundle) as model:
        filled = 0
        for step in range(12):
            ids = chunks[step] if step < len(chunks) else [token]
            want = ref.run(ids)
            got = model.run({"input_ids": np.array([ids], np.int64), "position": np.array([filled], np.int64)})
            assert_close("logits", got["logits"], want["logits"], rtol_l2=1e-4, rtol=1e-3, atol=1e-5)
            filled += len(ids)
            token = int(np.argmax(want["logits"][0, -1]))
        for name in ("past_key_values.0.key", "past_key_values.1.value"):
            np.testing.assert_allclose(model.read_state(name)[:, :, :filled], ref.past[name], rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("name, target", [("qwen2_tiny_optimum", "lavapipe"), ("gemma_tiny_optimum", "lavapipe"),
                                          ("qwen2_tiny_optimum", "generic")])
def test_float16_cache_logits(name, target):
    """--precision fp16: a float16 cache; logits within 1e-2 (rel L2) of onnxruntime's float32."""
    path = FIXTURES / f"{name}.onnx"
    bundle = compile_model(path, variants=[{"input_ids": [1, len(PROMPT)]}, {"input_ids": [1, 1]}],
                           target=target, max_context=CONTEXT, precision="fp16")
    ref = OnnxruntimeLoop(path)
    ids, filled = PROMPT, 0
    with load(bundle) as model:
        assert model.read_state("past_key_values.0.key").dtype == np.float16
        for _ in range(10):
            want = ref.run(ids)
            got = model.run({"input_ids": np.array([ids], np.int64), "position": np.array([filled], np.int64)})
            assert_close("logits", got["logits"], want["logits"], rtol_l2=1e-2, rtol=1e9, atol=1e9)
            filled += len(ids)
            ids = [int(np.argmax(want["logits"][0, -1]))]


def test_cli_compile_and_generate(tmp_path):
    from typer.testing import CliRunner
    from compiler.cli import app
    path, out = FIXTURES / "llama_tiny_optimum.onnx", tmp_path / "llama.vkb"
    r = CliRunner().invoke(app, ["compile", str(path), "-o", str(out), "--target", "lavapipe", "--max-context",
                                 str(CONTEXT), "--variant", "input_ids=1x4", "--variant", "input_ids=1x1",
                                 "--argmax-output", "logits"])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(app, ["generate", str(out), "--prompt-ids", ",".join(map(str, PROMPT)),
                                 "--max-new-tokens", "8"])
    assert r.exit_code == 0, r.output
    assert r.output.splitlines()[0].split() == [str(t) for t in OnnxruntimeLoop(path).greedy(PROMPT, 8)]
    r = CliRunner().invoke(app, ["compile", str(path), "-o", str(tmp_path / "x.vkb"), "--target", "lavapipe",
                                 "--variant", "input_ids=1x1"])
    assert r.exit_code != 0 and "--max-context N" in r.output and "Traceback" not in r.output
