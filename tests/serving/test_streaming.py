"""Token generation behind Ray Serve (serving/generation.py, serving/streaming.py): a tiny Llama-shaped
decoder whose KV cache is its state (tests/models/fixtures/llama_tiny_optimum.onnx, --max-context)
on one validated lavapipe replica, with a word tokenizer. Streamed tokens over HTTP and through a
handle equal runtime_min.generate's on a directly loaded Model; two concurrent streams take turns;
a client that disconnects stops its generation; bad requests get one-line 4xx answers; a plain
bundle beside it still runs and refuses /generate."""
import json
import threading
import time
from pathlib import Path

import onnx
import pytest
import ray
import requests
from tokenizers import Tokenizer, decoders, models, pre_tokenizers

from benchmarks.serving import client
from compiler import compile_model
from runtime_min import load
from runtime_min.generate import Sampler, generate
from serving import app
from serving.batching import RequestError
from serving.generation import Decoder

FIXTURE = Path(__file__).resolve().parent.parent / "models" / "fixtures" / "llama_tiny_optimum.onnx"
VOCABULARY, CONTEXT = 128, 1024  # the fixture's vocabulary; a cache long enough to disconnect mid-stream
PROMPT = [3, 17, 42, 5, 9, 11, 2]


def word_tokenizer() -> Tokenizer:
    """Token i is the word w<i>; decoding joins words with spaces."""
    tok = Tokenizer(models.WordLevel({f"w{i}": i for i in range(VOCABULARY)}, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")
    return tok


@pytest.fixture(scope="module")
def decoder_bundle(tmp_path_factory):
    path = tmp_path_factory.mktemp("decoder") / "llama.vkb"
    path.write_bytes(compile_model(onnx.load(FIXTURE), target="lavapipe", max_context=CONTEXT, argmax_output="logits",
                                   variants=[{"input_ids": [1, 4]}, {"input_ids": [1, 1]}]))
    return path


@pytest.fixture(scope="module")
def direct(decoder_bundle):
    """Tokens of runtime_min.generate on the bundle loaded here: direct(prompt, n, **sampling)."""
    model = load(decoder_bundle, validation=True)

    def tokens(prompt, n, temperature=0.0, top_k=0, top_p=1.0, seed=None):
        return list(generate(model, prompt, n, sampler=Sampler(temperature, top_k, top_p, seed)))
    yield tokens
    model.close()


@pytest.fixture(scope="module")
def served(decoder_bundle, bundle):
    """(url, handle) of one replica of the decoder at /, and a plain bundle's replica at /plain."""
    from ray import serve
    port = client.free_port()
    try:
        app.connect(num_cpus=2, object_store_memory=100 << 20)
        handle = app.start(app.application(decoder_bundle, tokenizer=word_tokenizer()), port=port)
        serve.run(app.application(bundle, name="Plain"), name="plain", route_prefix="/plain")
        yield f"http://127.0.0.1:{port}/", handle
    finally:
        if ray.is_initialized():
            serve.shutdown()
            ray.shutdown()


def stream(url, body, lines=None):
    """The records of POST url/generate, read as they come (only the first `lines` if given)."""
    with requests.post(url + "generate", json=body, stream=True, timeout=60) as r:
        assert r.status_code == 200 and r.headers["content-type"] == "application/x-ndjson", r.text
        records = []
        for line in r.iter_lines():
            records.append(json.loads(line))
            if lines and len(records) == lines:
                break
        return records


def ids(records):
    return [r["id"] for r in records if "id" in r]


@pytest.mark.timeout(60)
def test_http_stream_equals_direct_generate(served, direct):
    url, _ = served
    want = direct(PROMPT, 24)
    records = stream(url, {"input_ids": PROMPT, "max_new_tokens": 24})
    assert ids(records) == want
    assert [r["text"] for r in records[:2]] == [f" w{want[0]}", f" w{want[1]}"]  # the piece each token adds
    done = records[-1]
    assert done["done"] and done["prompt_tokens"] == 7 and done["new_tokens"] == 24 and done["stop"] == "max_new_tokens"
    assert done["time_to_first_token_ms"] > 0 and done["tokens_per_s"] > 0
    # text in: the tokenizer's ids give the same tokens; an eos ends the stream at its first appearance
    text = stream(url, {"prompt": " ".join(f"w{t}" for t in PROMPT), "max_new_tokens": 24, "eos_token_id": want[5]})
    assert ids(text) == want[:want.index(want[5]) + 1] and text[-1]["stop"] == "eos"
    assert "".join(r["text"] for r in text[:-1]) == "".join(f" w{t}" for t in ids(text))
    # sampled on the host with a seed: the same draws as directly
    sampling = {"temperature": 0.8, "top_k": 20, "top_p": 0.9, "seed": 3}
    assert ids(stream(url, {"input_ids": PROMPT, "max_new_tokens": 12, **sampling})) == direct(PROMPT, 12, **sampling)


@pytest.mark.timeout(60)
def test_handle_stream_equals_direct_generate(served, direct):
    _, handle = served
    records = list(handle.options(stream=True).generate.remote(input_ids=PROMPT, max_new_tokens=16))
    assert ids(records) == direct(PROMPT, 16) and records[-1]["new_tokens"] == 16
    with pytest.raises(ValueError, match="outside the model's vocabulary of 128"):
        list(handle.options(stream=True).generate.remote(input_ids=[1, 128]))


@pytest.mark.timeout(60)
def test_concurrent_streams_take_turns_on_one_replica(served, direct):
    url, _ = served
    prompts = [PROMPT, [7, 7, 1, 99, 64]]
    want = [direct(p, 150) for p in prompts]
    got = [None, None]

    def one(i):
        got[i] = stream(url, {"input_ids": prompts[i], "max_new_tokens": 150})
    threads = [threading.Thread(target=one, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(50)
    assert [ids(g) for g in got] == want
    # one ran while the other waited for its turn
    assert max(g[-1]["queued_ms"] for g in got) > 0.5 * min(g[-1]["new_tokens"] / g[-1]["tokens_per_s"] * 1e3
                                                          for g in got)


@pytest.mark.timeout(60)
def test_a_client_that_disconnects_stops_its_generation(served, direct):
    url, handle = served
    asked = CONTEXT - len(PROMPT)  # about 3.5 s of tokens on lavapipe
    before = handle.info.remote().result()
    assert len(stream(url, {"input_ids": PROMPT, "max_new_tokens": asked}, lines=3)) == 3
    deadline, now = time.perf_counter() + 20, before
    while now["served"]["stopped_generations"] == before["served"]["stopped_generations"] \
            and time.perf_counter() < deadline:
        time.sleep(0.1)
        now = handle.info.remote().result()
    assert now["served"]["stopped_generations"] == before["served"]["stopped_generations"] + 1, now["served"]
    # the runner stopped producing: far fewer tokens than asked, and none since
    produced = now["generate"]["produced"] - before["generate"]["produced"]
    assert produced < asked // 2, produced
    print(f"\n{produced} of {asked} tokens produced before the disconnect stopped the runner")
    time.sleep(0.5)
    assert handle.info.remote().result()["generate"]["produced"] == now["generate"]["produced"]
    assert ids(stream(url, {"input_ids": PROMPT, "max_new_tokens": 8})) == direct(PROMPT, 8)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("body, status, message", [
    ({"max_new_tokens": 4}, 400, "give the prompt as \"input_ids\": [ids] or as \"prompt\": text"),
    ({"input_ids": [1], "prompt": "w1"}, 400, "one of them"),
    ({"input_ids": []}, 400, "input_ids must be a non-empty list of token ids"),
    ({"input_ids": [1, 2.5]}, 400, "input_ids must be a non-empty list of token ids (integers), not [1, 2.5]"),
    ({"input_ids": [5, 200]}, 400, "input_ids holds token id 200, outside the model's vocabulary of 128"),
    ({"input_ids": [-1]}, 400, "input_ids holds token id -1"),
    ({"input_ids": PROMPT, "max_new_tokens": CONTEXT}, 400,
     f"7 prompt tokens + {CONTEXT} new ones exceed the {CONTEXT} rows of the model's cache; ask for fewer tokens"),
    ({"input_ids": [1], "max_new_tokens": -2}, 400, "max_new_tokens must be >= 0, not -2"),
    ({"input_ids": [1], "temperature": -1}, 400, "temperature -1.0 must be >= 0, top_k 0 >= 0 and top_p 1.0 in (0, 1]"),
    ({"input_ids": [1], "top_p": 0}, 400, "top_p 0.0 in (0, 1]"),
    ({"input_ids": [1], "top_k": "all"}, 400, "top_k must be an integer, not 'all'"),
    ({"input_ids": [1], "max_tokens": 4}, 400, "unknown field 'max_tokens'; a generation request takes input_ids"),
    ({"prompt": "   "}, 400, "the prompt encodes to no tokens"),
    ([1, 2], 400, "a generation request is {\"input_ids\""),
], ids=["no-prompt", "both", "empty", "fractions", "past-vocabulary", "negative", "past-context", "negative-new",
        "temperature", "top-p", "top-k-type", "unknown-field", "empty-text", "not-a-mapping"])
def test_bad_requests_get_one_line(served, body, status, message):
    url, _ = served
    r = requests.post(url + "generate", json=body, timeout=30)
    assert r.status_code == status and message in r.json()["error"], r.text
    assert "\n" not in r.json()["error"]


@pytest.mark.timeout(60)
def test_wrong_doors(served, bundle):
    url, _ = served
    r = requests.post(url + "generate", data=b"{", headers={"content-type": "application/json"}, timeout=30)
    assert r.status_code == 400 and "the body is not JSON" in r.json()["error"]
    r = requests.post(url + "generate", data=b"1", headers={"content-type": "application/x-npy"}, timeout=30)
    assert r.status_code == 415 and "a generation request is JSON" in r.json()["error"]
    r = requests.post(url, json={"inputs": {"input_ids": [[1]], "position": [0]}}, timeout=30)
    assert r.status_code == 400 and "served by POST .../generate alone" in r.json()["error"]
    health = requests.get(url + "health", timeout=30).json()
    assert health["generate"]["context"] == CONTEXT and health["generate"]["vocabulary"] == VOCABULARY
    assert health["generate"]["tokenizer"]
    # a bundle that is not a decoder: /generate is refused, its plain door still runs
    r = requests.post(url + "plain/generate", json={"input_ids": [1]}, timeout=30)
    assert r.status_code == 404 and "this bundle is not a decoder" in r.json()["error"]
    r = requests.post(url + "plain/", json={"inputs": {"x": [[0.5] * 16]}}, timeout=30)
    assert r.status_code == 200 and len(r.json()["outputs"]["y"][0]) == 8


def test_a_prompt_needs_a_tokenizer(decoder_bundle):
    with load(decoder_bundle) as model:
        decoder = Decoder.of(model)
        assert decoder.check({"input_ids": [1, 2]}).ids == [1, 2]
        with pytest.raises(RequestError, match="\"prompt\" needs a tokenizer, and this deployment has none: put "
                                               "tokenizer.json beside the bundle or start it with `vkc serve "
                                               "--tokenizer PATH`"):
            decoder.check({"prompt": "w1 w2"})


@pytest.mark.timeout(60)
def test_generation_metrics_are_exported(served):
    """Last: Ray exports every few seconds. The streams above counted their tokens (as many as the
    replica says it generated), first-token times and rates."""
    served_now = served[1].info.remote().result()["served"]
    port, found = ray.nodes()[0]["MetricsExportPort"], {}
    names = ("ray_vkc_generated_tokens", "ray_vkc_time_to_first_token_ms_count", "ray_vkc_tokens_per_s_count",
             "ray_vkc_generations")
    deadline = time.perf_counter() + 30
    while found.get(names[0]) != served_now["generated_tokens"] and time.perf_counter() < deadline:
        time.sleep(1)
        found = {}
        for line in requests.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text.splitlines():
            name = next((n for n in names if line.startswith((n + "{", n + "_total{"))), None)  # counters: _total
            if name and 'deployment="BundleServer"' in line:  # summed over the tags (kind, end)
                found[name] = found.get(name, 0) + float(line.rsplit(" ", 1)[1])
    assert set(found) == set(names), found
    assert found[names[0]] == served_now["generated_tokens"] > 100, found
    assert found["ray_vkc_generations"] == served_now["generations"] and found["ray_vkc_tokens_per_s_count"] >= 5


def test_vkc_serve_refuses_a_missing_tokenizer(decoder_bundle, tmp_path):
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-m", "compiler.cli", "serve", str(decoder_bundle), "--tokenizer",
                        str(tmp_path / "none.json")], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "none.json: no such file" in r.stderr and r.stderr.count("\n") == 1, r.stderr
