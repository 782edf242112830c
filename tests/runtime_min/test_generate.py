"""Model.generate on a tiny Llama-shaped decoder in ONNX's in-place cache form (tests/llm_models.py):
greedy tokens identical to onnxruntime's own loop over the same file, logits within tolerance at
every step, prompts split over the prefill variants, sampling, and what is refused."""

import numpy as np
import pytest

from tests.harness import assert_close
from tests.llm_models import onnxruntime_greedy, tiny_llama

from compiler.compile import compile_model
from runtime_min import load
from runtime_min.generate import Sampler, _largest

PROMPT = [3, 17, 42, 5, 9, 11, 2]
STEPS = 33


@pytest.fixture(scope="module")
def llama():
    return tiny_llama(layers=2, context=64)


@pytest.fixture(scope="module")
def bundle(llama):
    # prefill chunks of 4, and the decode step
    return compile_model(llama, variants=[{"input_ids": [1, 4]}, {"input_ids": [1, 1]}], target="lavapipe")


def test_greedy_tokens_equal_onnxruntime(llama, bundle):
    with load(bundle) as model:
        tokens = list(model.generate(PROMPT, STEPS))
        assert tokens == onnxruntime_greedy(llama, PROMPT, STEPS)
        assert list(model.generate(PROMPT, STEPS)) == tokens  # a new sequence each call


@pytest.mark.parametrize("weights", ["int8", "int4"])
def test_quantized_weights_greedy_tokens_equal_onnxruntime(llama, weights):
    """--weights: greedy tokens equal onnxruntime's loop over the same quantization written as
    MatMulNBits (tests/quantized_onnx.py); a prompt's logits within the quantization's error of
    the float model's (rel L2: 3e-2 for int8, 0.4 for int4 on this 32-wide toy)."""
    from tests.harness import close_stats, run_onnxruntime
    from bundles import read_bundle
    from tests.quantized_onnx import quantized_onnx
    bundle = compile_model(llama, variants=[{"input_ids": [1, 4]}, {"input_ids": [1, 1]}], target="lavapipe",
                           weights=weights)
    oracle = quantized_onnx(llama, read_bundle(bundle).manifest)
    assert sum(n.op_type == "MatMulNBits" for n in oracle.graph.node) == 15
    with load(bundle) as model:
        assert list(model.generate(PROMPT, STEPS)) == onnxruntime_greedy(oracle, PROMPT, STEPS)
        model.reset_state()
        feeds = {"input_ids": np.array([PROMPT[:4]], np.int64), "position": np.array([0], np.int64)}
        got = model.run(feeds)["logits"]
    caches = {f"past_{kv}.{i}": np.zeros((1, 2, 64, 8), np.float32) for kv in ("key", "value") for i in range(2)}
    floats = run_onnxruntime(llama, {**feeds, **caches})["logits"]
    assert close_stats(got, floats)["rel_l2"] < {"int8": 3e-2, "int4": 0.4}[weights]


@pytest.mark.parametrize("weights", [None, "int8"])
def test_argmax_on_the_device(llama, bundle, weights):
    """--argmax-output logits: greedy tokens equal the host-argmax path's and onnxruntime's loop,
    and no run copies the logits back (the last prefill chunk and each decode step fetch the
    token id alone, earlier chunks nothing)."""
    from bundles import read_bundle
    from tests.quantized_onnx import quantized_onnx
    picked = compile_model(llama, variants=[{"input_ids": [1, 4]}, {"input_ids": [1, 1]}], target="lavapipe",
                           argmax_output="logits", weights=weights)
    oracle = quantized_onnx(llama, read_bundle(picked).manifest) if weights else llama
    with load(picked) as model:
        fetched = []
        run = model.run
        model.run = lambda feeds, outputs=None, fetch=None: fetched.append(fetch) or run(feeds, outputs, fetch)
        tokens = list(model.generate(PROMPT, STEPS))
        # 7 prompt tokens: chunks of 4, 1, 1, 1 (the last fetching the token), then 32 steps
        assert fetched == [[], [], [], ["logits_argmax"]] + [["logits_argmax"]] * (STEPS - 1)
        sampled = list(model.generate(PROMPT, 3, temperature=0.5, seed=1))
        assert fetched[-1] == ["logits"] and len(sampled) == 3
    assert tokens == onnxruntime_greedy(oracle, PROMPT, STEPS)
    if weights is None:
        with load(bundle) as model:
            assert tokens == list(model.generate(PROMPT, STEPS))


def test_top_k_sampling_on_the_device(llama, bundle):
    """--top-k-output logits:8: sampling with top_k <= 8 fetches the 8 largest logits and their ids
    (the last prefill chunk and each step, never the logits) and draws the same tokens, seed for
    seed, as the host path drawing from the whole row; top_k above 8, or 0, reads the logits."""
    picked = compile_model(llama, variants=[{"input_ids": [1, 4]}, {"input_ids": [1, 1]}], target="lavapipe",
                           top_k_output="logits:8")
    both = ["logits_topk_values", "logits_topk_indices"]
    with load(picked) as model, load(bundle) as host:
        fetched = []
        run = model.run
        model.run = lambda feeds, outputs=None, fetch=None: fetched.append(fetch) or run(feeds, outputs, fetch)
        for temperature, top_k, top_p, seed in [(0.8, 8, 1.0, 0), (1.5, 5, 0.9, 1), (3.0, 1, 1.0, 2), (5.0, 8, 1.0, 3)]:
            fetched.clear()
            draw = dict(temperature=temperature, top_k=top_k, top_p=top_p, seed=seed)
            tokens = list(model.generate(PROMPT, 16, **draw))
            assert fetched == [[], [], [], both] + [both] * 15
            assert tokens == list(host.generate(PROMPT, 16, **draw))
        assert len(set(tokens)) > 3   # hot draws: not the greedy path
        for top_k in (9, 0):
            fetched.clear()
            assert list(model.generate(PROMPT, 4, temperature=0.8, top_k=top_k, seed=4)) == \
                list(host.generate(PROMPT, 4, temperature=0.8, top_k=top_k, seed=4))
            assert fetched[-1] == ["logits"]


def test_logits_every_step(llama):
    """Prefill of the whole prompt at once, then decode steps: logits against onnxruntime's."""
    import onnxruntime as ort
    sess = ort.InferenceSession(llama.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    caches = {i.name: np.zeros((1, 2, 64, 8), np.float32) for i in sess.get_inputs() if i.name.startswith("past_")}
    bundle = compile_model(llama, variants=[{"input_ids": [1, len(PROMPT)]}, {"input_ids": [1, 1]}],
                           target="lavapipe")
    feed, position = np.array([PROMPT], np.int64), 0
    with load(bundle) as model:
        for _ in range(6):
            run = {"input_ids": feed, "position": np.array([position], np.int64)}
            ref = dict(zip(names, sess.run(None, {**run, **caches})))
            got = model.run(run)["logits"]
            assert_close("logits", got, ref["logits"], rtol_l2=1e-4, rtol=1e-3, atol=1e-4)
            caches = {n: ref[n.replace("past_", "present_")] for n in caches}
            position += feed.shape[1]
            feed = np.array([[int(np.argmax(ref["logits"][0, -1]))]], np.int64)
        np.testing.assert_allclose(model.read_state("past_key.1")[:, :, :position],
                                   caches["past_key.1"][:, :, :position], rtol=1e-4, atol=1e-5)


def test_float16_cache_logits(llama):
    """--precision fp16: a float16 cache; logits within 1e-2 (rel L2) of onnxruntime's float32."""
    import onnxruntime as ort
    sess = ort.InferenceSession(llama.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    caches = {i.name: np.zeros((1, 2, 64, 8), np.float32) for i in sess.get_inputs() if i.name.startswith("past_")}
    bundle = compile_model(llama, variants=[{"input_ids": [1, len(PROMPT)]}, {"input_ids": [1, 1]}],
                           target="lavapipe", precision="fp16")
    feed, position = np.array([PROMPT], np.int64), 0
    with load(bundle) as model:
        assert model.read_state("past_key.0").dtype == np.float16
        for _ in range(8):
            run = {"input_ids": feed, "position": np.array([position], np.int64)}
            ref = dict(zip(names, sess.run(None, {**run, **caches})))
            assert_close("logits", model.run(run)["logits"], ref["logits"], rtol_l2=1e-2, rtol=1e9, atol=1e9)
            caches = {n: ref[n.replace("past_", "present_")] for n in caches}
            position += feed.shape[1]
            feed = np.array([[int(np.argmax(ref["logits"][0, -1]))]], np.int64)


def test_sampling_is_reproducible_and_within_top_k(bundle):
    with load(bundle) as model:
        a = list(model.generate(PROMPT, 12, temperature=0.8, top_k=5, seed=7))
        b = list(model.generate(PROMPT, 12, temperature=0.8, top_k=5, seed=7))
    assert a == b and len(a) == 12


def test_sampler_rules():
    logits = np.array([0.0, 3.0, 1.0, 2.0])
    assert Sampler()(logits) == 1
    assert {Sampler(1.0, top_k=2, seed=s)(logits) for s in range(50)} == {1, 3}
    assert {Sampler(1.0, top_p=0.01, seed=s)(logits) for s in range(20)} == {1}


@pytest.mark.parametrize("ties", [False, True])
def test_top_k_is_a_stable_sorts_first_k(ties):
    """The top-k candidates come in a stable sort's order without sorting the vocabulary: ties
    (many at the k-th value) to the lower index, infinities included."""
    rng = np.random.default_rng(int(ties))
    for _ in range(100):
        n = int(rng.integers(1, 300))
        x = rng.integers(-3, 4, n).astype(np.float64) if ties else rng.standard_normal(n)
        x[rng.integers(0, n, 2)] = [np.inf, -np.inf]
        for k in (1, int(rng.integers(1, n + 1)), n, n + 2):
            assert np.array_equal(_largest(x, k), np.argsort(-x, kind="stable")[:k])


def test_eos_stops(bundle, llama):
    first = onnxruntime_greedy(llama, PROMPT, 3)
    with load(bundle) as model:
        assert list(model.generate(PROMPT, 10, eos_token_id=first[1])) == first[:2]


@pytest.mark.parametrize("kw, phrase", [
    (dict(max_new_tokens=60), "exceed the 64 rows"),
    (dict(input_ids=[]), "empty"),
    (dict(max_new_tokens=-1), ">= 0"),
])
def test_refused(bundle, kw, phrase):
    args = {"input_ids": PROMPT, "max_new_tokens": 4, **kw}
    with load(bundle) as model, pytest.raises(ValueError, match=phrase):
        list(model.generate(args.pop("input_ids"), args.pop("max_new_tokens")))


def test_needs_a_decode_variant(llama):
    bundle = compile_model(llama, input_shapes={"input_ids": [1, 4]}, target="lavapipe")
    with load(bundle) as model, pytest.raises(ValueError, match="decode variant"):
        list(model.generate(PROMPT, 2))


def test_cli_generate(bundle, llama, tmp_path):
    from typer.testing import CliRunner
    from compiler.cli import app
    path = tmp_path / "llama.vkb"
    path.write_bytes(bundle)
    r = CliRunner().invoke(app, ["generate", str(path), "--prompt-ids", ",".join(map(str, PROMPT)),
                                 "--max-new-tokens", "8"])
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert lines[0].split() == [str(t) for t in onnxruntime_greedy(llama, PROMPT, 8)]
    assert "prefill 7 tokens" in lines[1] and "decode" in lines[1] and "tokens/s" in lines[1]
    assert "argmax on the host (compile with --argmax-output logits" in " ".join(r.output.split())
    r = CliRunner().invoke(app, ["generate", str(path), "--prompt-ids", "1,x"])
    assert r.exit_code != 0 and "not a list of integers" in r.output
