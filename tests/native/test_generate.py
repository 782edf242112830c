"""vkc_generate (native/src/generate.c) on tests/llm_models.py's tiny Llama-shaped decoder, its KV
cache the bundle's state, compiled as tests/runtime_min/test_generate.py compiles it (a prefill
variant of 4 tokens and the decode step), through the C API (tests/native/api_check.c): greedy
tokens identical to runtime_min's Model.generate for float32 and float16 bundles (and an int8 KV cache), with and without
--argmax-output logits (whose greedy steps never copy the logits back), the 7-token prompt split
4 + 1 + 1 + 1; the callback sees each token as it comes and can stop the sequence; sampling is
reproducible by seed, top_k=1 and a tiny top_p are greedy, top_k=3 draws only the 3 likeliest,
and with --top-k-output the device's top K give the row's draws without copying it back;
what is refused, in one line; under ASan + UBSan; the validation layer silent. A bundle that
takes attention_mask instead of position (onnxruntime-genai's model builder) is fed the mask."""
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.skipif(shutil.which(os.environ.get("CC", "cc")) is None, reason="no C compiler")

PROMPT = [3, 17, 42, 5, 9, 11, 2]
IDS = ",".join(map(str, PROMPT))
STEPS = 33
VARIANTS = [{"input_ids": [1, 4]}, {"input_ids": [1, 1]}]
ASAN_ENV = {"ASAN_OPTIONS": "detect_leaks=0", "UBSAN_OPTIONS": "halt_on_error=1"}


@pytest.fixture(scope="module")
def llama():
    from tests.llm_models import tiny_llama
    return tiny_llama(layers=2, context=64)


@pytest.fixture(scope="module")
def llama_bundles(llama, tmp_path_factory):
    """(precision, argmax, kv_cache) -> bundle path, compiled on first use."""
    from compiler.compile import compile_model
    folder, made = tmp_path_factory.mktemp("llama"), {}

    def get(precision, argmax, kv_cache=None):
        key = (precision, argmax, kv_cache)
        if key not in made:
            path = folder / f"llama-{precision}-{argmax}-{kv_cache}.vkb"
            path.write_bytes(compile_model(llama, variants=VARIANTS, target="lavapipe", precision=precision,
                                           argmax_output="logits" if argmax else None, kv_cache=kv_cache))
            made[key] = path
        return made[key]
    return get


@pytest.fixture(scope="module")
def api_check(build, c_program, tmp_path_factory):
    return c_program("api_check.c", build, tmp_path_factory.mktemp("api_check"))


def steps(exe, bundle, *args, env=None):
    """api_check's lines for `args`, the validation layer on; the last line must say it was silent."""
    r = subprocess.run([str(exe), str(bundle), *map(str, args)], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "VKC_VALIDATION": "1", **(env or {})})
    assert r.returncode == 0, r.stdout + r.stderr[-4000:]
    lines = r.stdout.splitlines()
    assert lines[-1] == "validation 0", r.stdout + r.stderr[-4000:]
    return lines[:-1]


def tokens(line):
    """The callback's tokens and the array's, of an "ok generate" line; both must agree."""
    assert line.startswith("ok generate"), line
    seen, _, kept = line[len("ok generate"):].partition("|")
    assert seen.split() == kept.split(), line
    return [int(t) for t in kept.split()]


def reference(bundle, n=STEPS, **kw):
    from runtime_min import load
    with load(str(bundle)) as model:
        return list(model.generate(PROMPT, n, **kw))


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("argmax", [False, True], ids=["host-argmax", "device-argmax"])
def test_greedy_tokens_equal_runtime_min(api_check, llama_bundles, precision, argmax):
    """Twice (each call a new sequence); with the logits_argmax output the logits never come back
    from the device, which sampling needs (its steps copy them)."""
    bundle = llama_bundles(precision, argmax)
    lines = steps(api_check, bundle, "poison", "generate", IDS, STEPS, "-", "untouched", "logits",
                  "generate", IDS, STEPS, "-", "poison", "generate", IDS, 3, "temperature=1,seed=1",
                  "untouched", "logits")
    want = reference(bundle)
    assert len(want) == STEPS and tokens(lines[1]) == want and tokens(lines[3]) == want
    assert lines[2] == ("ok untouched logits" if argmax else "error: output logits was copied back")
    assert lines[6] == "error: output logits was copied back"


def test_int8_cache_tokens_equal_runtime_min(api_check, llama_bundles):
    """--kv-cache int8: the caches and their scales are state the C runtime keeps as runtime_min does."""
    bundle = llama_bundles("fp16", True, "int8")
    lines = steps(api_check, bundle, "generate", IDS, STEPS, "-", "generate", IDS, STEPS, "-")
    want = reference(bundle)
    assert len(want) == STEPS and tokens(lines[0]) == want and tokens(lines[1]) == want


def test_callback_streams_and_stops(api_check, llama_bundles):
    """The callback sees every token as it comes; a nonzero return ends the sequence there; eos
    ends it after that token."""
    bundle = llama_bundles("fp32", False)
    want = reference(bundle, 8)
    lines = steps(api_check, bundle, "generate", IDS, 8, "stop=3", "generate", IDS, 8, f"eos={want[4]}",
                  "generate", IDS, 0, "-")
    assert tokens(lines[0]) == want[:3]
    assert tokens(lines[1]) == want[:want.index(want[4]) + 1]
    assert tokens(lines[2]) == []


def test_sampling(api_check, llama_bundles, llama):
    """Seeded draws repeat; top_k=1 and top_p=0.001 leave the argmax alone; the first token drawn
    with top_k=3 (hot: temperature 5) over 40 seeds is always one of the prompt's 3 likeliest
    next tokens (onnxruntime's logits) and each of them comes up."""
    from tests.harness import run_onnxruntime
    bundle = llama_bundles("fp16", False)
    greedy = reference(bundle, 12)
    lines = steps(api_check, bundle, *[x for opts in ("temperature=0.8,top_k=5,seed=7", "temperature=0.8,top_k=5,seed=7",
                                                      "temperature=0.8,top_k=5,seed=8", "temperature=2,top_k=1,seed=3",
                                                      "temperature=2,top_p=0.001,seed=3")
                                       for x in ("generate", IDS, 12, opts)])
    drawn = [tokens(line) for line in lines]
    assert drawn[0] == drawn[1] != drawn[2] and drawn[3] == drawn[4] == greedy
    caches = {f"past_{kv}.{i}": np.zeros((1, 2, 64, 8), np.float32) for kv in ("key", "value") for i in range(2)}
    logits = run_onnxruntime(llama, {"input_ids": np.array([PROMPT]), "position": np.array([0]), **caches})["logits"]
    likeliest = set(np.argsort(-logits[0, -1])[:3].tolist())
    lines = steps(api_check, llama_bundles("fp32", False),
                  *[x for seed in range(40) for x in ("generate", IDS, 1, f"temperature=5,top_k=3,seed={seed}")])
    assert {tokens(line)[0] for line in lines} == likeliest


@pytest.mark.parametrize("io", [None, "fp16"], ids=["float32-logits", "float16-logits"])
def test_sampling_from_the_device_top_k(api_check, llama, tmp_path, io):
    """--top-k-output logits:8: sampling with top_k up to 8 copies back the 8 largest logits and
    their ids, never the logits, and draws the tokens the same seeds draw from the logits' row;
    top_k 9 (past K) and 64 (the whole vocabulary) read the row."""
    from compiler.compile import compile_model
    bundle, plain = tmp_path / "top-k.vkb", tmp_path / "plain.vkb"
    for path, option in ((bundle, "logits:8"), (plain, None)):
        path.write_bytes(compile_model(llama, variants=VARIANTS, target="lavapipe", precision="fp16" if io else "fp32",
                                       io=io, top_k_output=option))
    draws = ["temperature=0.8,top_k=8,seed=7", "temperature=2,top_k=5,top_p=0.9,seed=8", "temperature=5,top_k=1,seed=9",
             "temperature=5,top_k=8,seed=10", "temperature=0.8,top_k=9,seed=1", "temperature=0.8,top_k=64,seed=1"]
    lines = steps(api_check, bundle, *[x for d in draws for x in ("poison", "generate", IDS, 12, d, "untouched", "logits")])
    rows = steps(api_check, plain, *[x for d in draws for x in ("generate", IDS, 12, d)])
    assert [tokens(line) for line in lines[1::3]] == [tokens(line) for line in rows]
    assert lines[2::3] == ["ok untouched logits"] * 4 + ["error: output logits was copied back"] * 2
    assert len(set(tokens(lines[10]))) > 3   # hot draws: not the greedy path


@pytest.mark.parametrize("args, phrase", [
    ((IDS, 60, "-"), "7 prompt tokens + 60 new ones exceed the 64 rows of the model's cache; compile it for a "
                     "longer context or ask for fewer tokens."),
    (("", 4, "-"), "input_ids is empty; give at least one prompt token."),
    ((IDS, 4, "temperature=-1"), "temperature -1 must be >= 0, top_k 0 >= 0 and top_p 0 in (0, 1]."),
    ((IDS, 4, "top_p=1.5"), "top_p 1.5 in (0, 1]"),
    ((IDS, 4, "ids=tokens"), "generate needs a bundle with state, inputs 'tokens' and 'position' (or 'attention_mask') and output "
                             "'logits'; this one has inputs ['input_ids', 'position'], outputs ['logits'] and 4 "
                             "state tensor(s)."),
    ((IDS, 4, "context=8"), "exceed the 8 rows"),
])
def test_refused(api_check, llama_bundles, args, phrase):
    line, = steps(api_check, llama_bundles("fp32", False), "generate", *args)
    assert line.startswith("error: ") and phrase in line, line


def test_refused_bundles(api_check, llama, tmp_path):
    """A bundle without state, or without a decode variant: refused by name before anything runs."""
    from compiler.compile import compile_model
    from tests.runtime_min.test_fetch import relu_argmax_bundle
    stateless = tmp_path / "relu.vkb"
    stateless.write_bytes(relu_argmax_bundle())
    line, = steps(api_check, stateless, "generate", IDS, 4, "-")
    assert line == ("error: generate needs a bundle with state, inputs 'input_ids' and 'position' (or 'attention_mask') and output "
                    "'logits'; this one has inputs ['x'], outputs ['logits', 'logits_argmax'] and 0 state tensor(s)."), line
    prefill = tmp_path / "prefill.vkb"
    prefill.write_bytes(compile_model(llama, input_shapes={"input_ids": [1, 4]}, target="lavapipe"))
    line, = steps(api_check, prefill, "generate", IDS, 4, "-")
    assert line == ("error: generate needs a decode variant of input_ids=1x1; this bundle has input_ids lengths [4] "
                    "(compile with --variant input_ids=1x1 as well)."), line


def test_generate_under_asan(asan_build, c_program, llama, llama_bundles, tmp_path):
    """float16 logits read on the host, sampled and greedy, a refusal, and sampling from the
    device's float16 top K, under ASan + UBSan."""
    exe = c_program("api_check.c", asan_build, tmp_path)
    bundle = llama_bundles("fp16", False)
    lines = steps(exe, bundle, "generate", IDS, 8, "-", "generate", IDS, 8, "temperature=0.7,top_k=4,top_p=0.9,seed=2",
                  "generate", IDS, 80, "-", env=ASAN_ENV)
    assert tokens(lines[0]) == reference(bundle, 8) and len(tokens(lines[1])) == 8
    assert "exceed the 64 rows" in lines[2]
    from compiler.compile import compile_model
    top_k = tmp_path / "top-k.vkb"
    top_k.write_bytes(compile_model(llama, variants=VARIANTS, target="lavapipe", precision="fp16", io="fp16",
                                    top_k_output="logits:8"))
    line, = steps(exe, top_k, "generate", IDS, 8, "temperature=0.7,top_k=4,top_p=0.9,seed=2", env=ASAN_ENV)
    assert len(tokens(line)) == 8


# ---- vkcrun --generate -------------------------------------------------------------------------

def vkcrun(binary, bundle, *args, env=None):
    return subprocess.run([str(binary / "vkcrun"), str(bundle), *map(str, args)], capture_output=True, text=True,
                          timeout=300, env={**os.environ, **(env or {})})


@pytest.mark.parametrize("argmax", [False, True], ids=["host-argmax", "device-argmax"])
def test_vkcrun_generate(build, llama_bundles, argmax):
    """The tokens on one line, as runtime_min's; then the prefill and decode rates and where the
    tokens were picked, as `vkc generate` prints them; the validation layer silent."""
    bundle = llama_bundles("fp32", argmax)
    r = vkcrun(build, bundle, "--generate", IDS, "--max-new-tokens", 12, env={"VKC_VALIDATION": "1"})
    assert r.returncode == 0 and "validation" not in r.stderr, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert [int(t) for t in lines[0].split()] == reference(bundle, 12)
    assert lines[1].startswith("prefill 7 tokens in ") and ", decode " in lines[1] and " tokens/s on " in lines[1]
    assert lines[1].endswith("; argmax on the device" if argmax else "; argmax on the host (compile with "
                             "--argmax-output logits to pick on the device)"), lines[1]
    r = vkcrun(build, bundle, "--generate", IDS, "--max-new-tokens", 5, "--temperature", "0.7", "--top-k", 5,
               "--top-p", "0.9", "--seed", 3, "--eos", 63)
    assert r.returncode == 0 and r.stdout.splitlines()[1].endswith("; sampled on the host"), r.stdout + r.stderr
    assert 1 <= len(r.stdout.split("\n")[0].split()) <= 5


@pytest.mark.parametrize("args, phrase", [
    (["--generate", "1,x"], "--generate takes the prompt's token ids, ID,ID,... (whole numbers >= 0), not '1,x'"),
    (["--generate", ""], "--generate takes the prompt's token ids"),
    (["--generate", "1,-2"], "not '1,-2'"),
    (["--generate", IDS, "--max-new-tokens", "-3"], "--max-new-tokens takes a number of tokens from 0 to 1000000"),
    (["--generate", IDS, "--top-p", "0"], "--top-p takes a probability in (0, 1], not '0'"),
    (["--generate", IDS, "--temperature", "nan"], "--temperature takes a number >= 0 (0: greedy), not 'nan'"),
    (["--generate", IDS, "--seed", "1.5"], "--seed takes a whole number >= 0"),
    (["--temperature", "0.5"], "--temperature applies to --generate; add --generate ID,ID,..."),
    (["--generate", IDS, "--input", "x=y.npy"], "--generate feeds the model itself; drop --input"),
    (["--generate", IDS, "--bench", "3"], "--generate feeds the model itself; drop --bench"),
    (["--generate"], "--generate needs a value"),
])
def test_vkcrun_generate_bad_arguments(build, llama_bundles, args, phrase):
    r = vkcrun(build, llama_bundles("fp32", False), *args)
    assert r.returncode == 1 and r.stdout == "", r.stdout + r.stderr
    assert len(r.stderr.splitlines()) == 1 and r.stderr.startswith("vkcrun: ") and phrase in r.stderr, r.stderr


def test_vkcrun_generate_refusals(build, llama_bundles, tmp_path):
    """What vkc_generate refuses: one line, exit status 2."""
    from tests.runtime_min.test_fetch import relu_argmax_bundle
    stateless = tmp_path / "relu.vkb"
    stateless.write_bytes(relu_argmax_bundle())
    for bundle, args, phrase in ((stateless, [], "generate needs a bundle with state"),
                                 (llama_bundles("fp32", False), ["--max-new-tokens", 58], "exceed the 64 rows")):
        r = vkcrun(build, bundle, "--generate", IDS, *args)
        assert r.returncode == 2 and r.stdout == "", r.stdout + r.stderr
        assert len(r.stderr.splitlines()) == 1 and phrase in r.stderr, r.stderr


def test_vkcrun_generate_under_asan(asan_build, llama_bundles):
    r = vkcrun(asan_build, llama_bundles("fp16", True), "--generate", IDS, "--max-new-tokens", 6, "--temperature", 1,
               "--top-k", 3, "--seed", 1, env=ASAN_ENV)
    assert r.returncode == 0 and len(r.stdout.splitlines()[0].split()) == 6, r.stdout + r.stderr[-4000:]


def test_jni_generate(jni_lib, llama_bundles):
    """The JNI calls VkcModel.generate and resetState make, from Java (tests/native/JniCheck.java):
    greedy tokens runtime_min's; a LongPredicate sees each token and ends the sequence by returning
    false; seeded draws repeat; a sequence past the cache is a VkcException in vkc's words."""
    java = shutil.which("java")
    assert java, "no java on PATH: bash .ci/setup installs default-jdk-headless"
    bundle = llama_bundles("fp32", True)
    r = subprocess.run([java, str(Path(__file__).with_name("JniCheck.java")), str(jni_lib), "generate", str(bundle),
                        IDS, "6"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    want = reference(bundle, 6)
    listed = "[" + ", ".join(map(str, want)) + "]"
    assert r.stdout.splitlines() == [
        f"tokens {listed}", f"streamed {listed}", f"stopped [{want[0]}]", "sampled same 6", "reset ok",
        "error VkcException: 7 prompt tokens + 1000 new ones exceed the 64 rows of the model's cache; compile it for "
        "a longer context or ask for fewer tokens."], r.stdout


def test_attention_mask_bundle_equals_runtime_min(api_check, tmp_path):
    """A bundle of onnxruntime-genai's model builder (tests/models/test_genai_exports.py) takes
    attention_mask [1, N] instead of position: vkc_generate feeds it as runtime_min does."""
    from tests.models.test_genai_exports import genai_bundle
    bundle = tmp_path / "genai.vkb"
    bundle.write_bytes(genai_bundle("llama_tiny_genai_int4", "lavapipe"))
    lines = steps(api_check, bundle, "generate", IDS, STEPS, "-")
    assert tokens(lines[0]) == reference(bundle)


def test_rotating_attention_tokens_equal_runtime_min(api_check, tmp_path):
    """The generic profile's decode step over a cache of 256 rows: its split-KV attention rotates Q
    and K as it reads them and stores the step's K and V rows itself (passes/rotary_in_attention.py),
    binding each cache twice (read, and written in the step's row)."""
    from compiler.compile import compile_model
    from tests.llm_models import tiny_llama
    bundle = tmp_path / "llama-rotating.vkb"
    bundle.write_bytes(compile_model(tiny_llama(layers=2, context=256), variants=VARIANTS, target="generic",
                                     precision="fp16", argmax_output="logits"))
    lines = steps(api_check, bundle, "generate", IDS, STEPS, "-")
    assert tokens(lines[0]) == reference(bundle)
