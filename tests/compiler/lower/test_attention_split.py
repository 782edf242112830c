"""Split-KV attention (compiler/lower/attention_split.py) against onnxruntime: a few query rows
over a long key range, the keys in chunks over more workgroups, combined by the last of them
(tiled) or by a combine pass (texel). ONNX
Attention's external cache (nonpad_kv_seqlen: a run-time key count) with grouped-query and
multi-head attention, causal both ways, float and bool masks, softcap; the exporters' unfused
chain with rows masked entirely; float32 and float16; the texel first pass (lavapipe) and the
tiled one (generic, and nvidia's choices within lavapipe's shared memory). Run-time key counts
of 1, of a chunk's boundary, of the whole cache and between; cache rows past the count hold NaN,
so a read of them (or of a chunk's record the first pass did not write: the arena starts NaN)
shows. The rule's choices (split for a decode step, not for a prefill) on the bundles' kernels.

Tolerances, float32: rel L2 < 1e-4 and every element within 1e-5 + 1e-4 |ref| (outputs are
averages of V rows of unit scale); float16 (stored, computed in float32) against onnxruntime's
float32: rel L2 < 1e-2 and within 2e-2 + 2e-2 |ref|.
"""
from dataclasses import replace

import numpy as np
import pytest

from tests.attention_models import core_attention
from tests.compiler.passes.test_onnx_attention import attention_model, feeds_for
from tests.harness import assert_close, check_against_onnxruntime, compile_cached, run_bundle, run_onnxruntime
from tests.llm_models import onnxruntime_greedy, tiny_llama

from bundles import read_bundle
from bundles.manifest import variant_views
import compiler.lower.attention as attention
from compiler.codegen import render
from compiler.compile import compile_model, compile_with_kernels
from compiler.lower.attention_split import CHUNK_STEP, split_kv
from compiler.targets import TARGETS as PROFILES
from runtime_min import load

NVIDIA_32K = replace(PROFILES["nvidia"], name="nvidia-32k", max_shared_memory=32768, cooperative_matrix=())
TARGETS = {"lavapipe": "lavapipe", "generic": "generic", "nvidia-32k": NVIDIA_32K}
FIRST_PASS = {"lavapipe": "attention", "generic": "attention_tiled", "nvidia-32k": "attention_tiled"}
F32 = dict(rtol_l2=1e-4, rtol=1e-4, atol=1e-5)
F16 = dict(rtol_l2=1e-2, rtol=2e-2, atol=2e-2)


def _split_kernels(model, target, **kw):
    """The attention kernels, asserting the split form: the tiled first pass combines the chunks
    itself (one dispatch), the texel one is followed by the combine kernel."""
    kernels = [k for k in compile_with_kernels(model, target=target, **kw)[1] if k.template.startswith("attention")]
    combines = kernels[0].template == "attention_tiled"
    assert kernels[0].params["split"] and kernels[0].params.get("combines", False) == combines, kernels
    assert [k.template for k in kernels][1:] == ([] if combines else ["attention_combine"]), kernels
    return kernels


def _check(model, target, lengths, *, precision="fp32", tol=F32):
    feeds = feeds_for(model, lengths=lengths)
    for i, n in enumerate(lengths):  # rows past the count: never read
        feeds["k"][i, ..., n:, :] = np.nan
        feeds["v"][i, ..., n:, :] = np.nan
    want = run_onnxruntime(model, {k: np.nan_to_num(v) for k, v in feeds.items()})
    got = run_bundle(compile_cached(model, target=target, precision=precision), feeds)[0]
    assert not np.isnan(got["y"]).any()
    assert_close("y", got["y"], want["y"], **tol)


# (query heads, K/V heads, query rows, cache rows, head size, run-time key counts of the two
# batches): 200 and 300 rows are no whole number of chunks; counts of 1, a chunk (64), one past
# it, the cache. Head size 64: the tiled pass reads K and V rows as vec4s and fetches the next
# block while computing one.
CACHE_CASES = [
    pytest.param(8, 2, 1, 256, 16, [1, 256], id="gqa-decode-1-and-full"),
    pytest.param(8, 2, 1, 200, 16, [64, 65], id="gqa-decode-chunk-boundary"),
    pytest.param(8, 2, 1, 200, 64, [200, 129], id="gqa-decode-d64"),
    pytest.param(4, 4, 1, 300, 16, [300, 130], id="mha-decode"),
    pytest.param(8, 2, 3, 200, 16, [3, 200], id="gqa-3-rows"),
    pytest.param(4, 1, 8, 256, 16, [128, 77], id="mqa-8-rows"),
]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("hq,hkv,sq,cache,d,lengths", CACHE_CASES)
def test_external_cache(hq, hkv, sq, cache, d, lengths, target):
    model = attention_model(b=2, hq=hq, hkv=hkv, sq=sq, skv=cache, d=d, causal=1, lengths=True)
    first = _split_kernels(model, TARGETS[target])[0]
    assert first.template == FIRST_PASS[target]
    if first.template == "attention_tiled":
        assert ("k_next" in render(first)) == (d == 64)
    _check(model, TARGETS[target], lengths)


@pytest.mark.parametrize("target", ["lavapipe", "generic"])
def test_external_cache_float16(target):
    """float16 Q, K, V and output at Llama's head size; the first pass's records float32. Both
    targets take the tiled kernel (texel buffers hold float32 only)."""
    model = attention_model(b=2, hq=8, hkv=2, sq=1, skv=200, d=64, causal=1, lengths=True)
    first, = _split_kernels(model, target, precision="fp16")
    records = next(v for v in first.bindings if v.name.endswith("/split_kv_partials"))
    assert first.template == "attention_tiled" and first.params["TO"].name == "float16"
    assert records.dtype == np.float32 and first.params["VEC_READS"] == ["Q", "K", "V"]
    _check(model, target, [131, 200], precision="fp16", tol=F16)


def test_row_groups_by_shuffle(monkeypatch):
    """nvidia's row groups of 8 lanes fit lavapipe's subgroups: block maxima and sums by shuffles."""
    monkeypatch.setattr(attention, "LANES", (8,))
    target = replace(NVIDIA_32K, name="nvidia-32k-lanes8")
    model = attention_model(b=2, hq=8, hkv=2, sq=2, skv=200, d=64, causal=1, lengths=True)
    first = _split_kernels(model, target)[0]
    assert first.params["SHUFFLE"] and first.params["TX"] == 8
    _check(model, target, [200, 70])


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("kw", [
    pytest.param(dict(layout=3, hq=4, hkv=2, sq=2, skv=150, mask="bool"), id="3d-bool-mask"),
    pytest.param(dict(hq=2, hkv=2, sq=3, skv=150, mask="float", causal=1), id="float-mask-causal-top-left"),
    pytest.param(dict(hq=4, hkv=2, sq=1, skv=150, softcap=2.5), id="softcap"),
])
def test_masks(kw, target):
    model = attention_model(b=2, **kw)
    _split_kernels(model, TARGETS[target])
    check_against_onnxruntime(model, target=TARGETS[target], feeds=feeds_for(model), full_check=False, **F32)


@pytest.mark.parametrize("target", TARGETS)
def test_rows_masked_entirely(target):
    """The unfused chain (its softmax gives NaN for a row of -inf scores) of one query row over
    300 keys: batch 0 masks every key with -inf (NaN, as onnxruntime), batch 1 all but the last
    chunk's keys (finite: the chunks whose maxima are -inf weigh nothing), batch 2 every key
    with finfo.min (V averaged, as onnxruntime)."""
    model = core_attention(3, 2, 1, 16, sk=300, mask_shape=[3, 1, 1, 300])
    _split_kernels(model, TARGETS[target])
    mask = np.zeros((3, 1, 1, 300), np.float32)
    mask[0] = -np.inf
    mask[1, ..., :280] = -np.inf
    mask[2] = np.finfo(np.float32).min
    feeds = {**feeds_for(model), "mask": mask}
    want = run_onnxruntime(model, feeds)["y"]
    got = run_bundle(compile_cached(model, target=TARGETS[target]), feeds)[0]["y"]
    assert np.isnan(want[0]).all() and np.isnan(got[0]).all()
    assert np.isfinite(got[1:]).all()
    assert_close("y", got[1:], want[1:], **F32)


@pytest.mark.parametrize("target", ["lavapipe", "generic"])
def test_no_keys_gives_zero(target):
    """ONNX Attention's row that sees no key (a key count of 0) is 0, as onnxruntime's: on the
    tiled kernel chunk 0 alone writes the rows, of no key."""
    model = attention_model(b=2, hq=4, hkv=2, sq=1, skv=200, d=16, causal=1, lengths=True)
    _split_kernels(model, target)
    feeds = feeds_for(model, lengths=[0, 150])
    want = run_onnxruntime(model, feeds)["y"]
    got = run_bundle(compile_cached(model, target=target), feeds)[0]["y"]
    assert np.array_equal(got[0], want[0]) and not want[0].any()
    assert_close("y", got[1], want[1], **F32)


def test_rule():
    """Chunks: enough workgroups for the profile's min_workgroups (nvidia: 2 per SM, 264), no
    more than CHUNK_STEP-key chunks over the cache, at least 2; a workgroup serves the query
    heads of a K/V head up to 16 rows; more than 8 query rows keep the one kernel."""
    nvidia, lavapipe = PROFILES["nvidia"], PROFILES["lavapipe"]
    # Llama-3.2-1B's decode step: 32 query heads over 8 K/V heads, a 2304-row cache
    assert split_kv(1, 32, 1, 2304, 4, nvidia) == (4, 33)
    assert split_kv(1, 32, 4, 2304, 4, nvidia) == (4, 33)
    assert split_kv(1, 32, 8, 2304, 4, nvidia) == (2, 17)
    assert split_kv(8, 32, 1, 2304, 4, nvidia) == (4, 5)
    assert split_kv(1, 32, 16, 2304, 4, nvidia) is None      # a prefill
    assert split_kv(1, 32, 1, CHUNK_STEP, 4, nvidia) is None  # one chunk's worth of cache
    assert split_kv(1, 32, 1, 2 * CHUNK_STEP, 4, nvidia) == (4, 2)
    assert split_kv(1, 4, 1, 2048, 2, lavapipe) == (2, 8)
    assert split_kv(1, 64, 1, 2048, 1, lavapipe) is None      # 64 workgroups already


def _dispatched(bundle):
    """{variant name: the kernel name of each dispatch}."""
    return {v["name"]: [v["kernels"][d["kernel"]]["name"] for d in v["dispatches"]]
            for v in variant_views(read_bundle(bundle).manifest)}


@pytest.fixture(scope="module")
def llama():
    return tiny_llama(layers=2, context=512)


@pytest.fixture(scope="module")
def bundle(llama):
    return compile_model(llama, variants=[{"input_ids": [1, 16]}, {"input_ids": [1, 1]}], target="lavapipe")


def test_chosen_for_decode_not_prefill(bundle):
    """The bundle's kernels: the decode step's attention is the split pass and its combine, the
    prefill chunk's (16 rows) the one kernel."""
    names = _dispatched(bundle)
    prefill, decode = names["lavapipe input_ids=1x16,position=1"], names["lavapipe input_ids=1x1,position=1"]
    assert [n for n in prefill if n.startswith("attention")] == ["attention"] * 2
    assert [n for n in decode if n.startswith("attention")] == ["attention_split_kv", "attention_combine"] * 2


def test_generate_equals_onnxruntime(llama, bundle):
    """Greedy tokens from a 100-token prompt (6 prefill chunks, then single steps) over a 512-row
    cache: decode steps attend 97 to 132 keys, two or three chunks of 64."""
    prompt = [int(x) for x in np.random.default_rng(1).integers(0, 64, 100)]
    with load(bundle) as model:
        assert list(model.generate(prompt, 32)) == onnxruntime_greedy(llama, prompt, 32)
