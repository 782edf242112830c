"""The attention kernel (vkc.Attention) against onnxruntime running the unfused ONNX chain:
MatMul(Q, Kᵀ) -> scale -> Add mask -> Softmax -> MatMul(·, V) over batch, heads, sequence
lengths (1, 7, 64, 128, 197 as in ViT, and others no block size divides) and head sizes (6 to
128), with padding, causal and no masks, rows whose every key is masked (finfo.min: V averaged;
-inf: NaN, as onnxruntime gives), in float32 and float16.

Kernels: the tiled GPU kernel (attention_tiled.comp.j2) of the generic and nvidia profiles, and
the texel kernel (attention.comp.j2) of lavapipe; lavapipe runs them all. The nvidia profile's
tiles are taken within lavapipe's 32 KiB of shared memory ("nvidia-32k": the same choices, key
blocks halved where nvidia's 48 KiB would hold more). Its row groups of 16 lanes are wider than
lavapipe's subgroups of 8, so they exchange row maxima and sums through shared memory there, as on
a device with narrow subgroups; test_row_groups_by_shuffle runs the shuffles with narrower groups.
float16 on a device with cooperative matrices takes attention_coopmat.comp.j2 (its own test files:
test_attention_coopmat.py, and test_coopmat_emulation.py, which runs it here).
"""
from dataclasses import replace

import numpy as np
import pytest

from tests.attention_models import causal_mask, core_attention, padding_mask, window_attention, window_block
from tests.harness import (check_against_onnxruntime, compile_cached, declared_shared_bytes,
                     function_local_variables, random_feeds, run_bundle, run_onnxruntime)

import compiler.lower.attention as attention
from compiler.codegen import render
from compiler.compile import compile_with_kernels
from compiler.errors import CompileError
from compiler.targets import TARGETS as PROFILES

# (without its cooperative matrices, which lavapipe lacks: test_attention_coopmat.py has that kernel)
NVIDIA_32K = replace(PROFILES["nvidia"], name="nvidia-32k", max_shared_memory=32768,
                     cooperative_matrix=())
TARGETS = {"generic": "generic", "nvidia-32k": NVIDIA_32K, "lavapipe": "lavapipe"}


def _feeds(model, mask=None, seed=0):
    feeds = {k: v for k, v in random_feeds(model, seed).items() if k != "mask"}
    if mask is not None:
        feeds["mask"] = mask
    return feeds


def _fused(model, target="generic"):
    kernels = compile_with_kernels(model, target=target)[1]
    assert [k.template for k in kernels] == ["attention" if target == "lavapipe"
                                             else "attention_tiled"]
    return kernels[0]


def _mask_kw(b, s, mask):
    """core_attention's mask arguments and the mask to feed (None: random) for a CASES mask."""
    if mask == "padding":
        return dict(mask_shape=[b, 1, 1, s]), padding_mask(b, s, [max(1, s - 3 * i)
                                                               for i in range(b)])
    if mask == "causal":
        return dict(mask_const=causal_mask(s, s)), None
    if mask == "full":
        return dict(mask_shape=[1, 1, s, s]), None
    return {}, None


# (B, H, S, D, mask): mask None, "padding" ([B, 1, 1, S] input of 0 / finfo.min), "causal" (a
# constant [1, 1, S, S] of 0 / finfo.min), "full" (a random [1, 1, S, S] input).
CASES = [
    pytest.param(1, 1, 1, 64, None, id="b1-h1-s1-d64"),
    pytest.param(2, 4, 7, 32, "padding", id="b2-h4-s7-d32-padding"),
    pytest.param(1, 4, 64, 64, "causal", id="b1-h4-s64-d64-causal"),
    pytest.param(2, 2, 128, 64, "padding", id="b2-h2-s128-d64-padding"),
    pytest.param(1, 3, 197, 64, None, id="b1-h3-s197-d64-vit"),
    pytest.param(2, 3, 7, 16, "full", id="b2-h3-s7-d16-full-mask"),
    pytest.param(1, 2, 33, 128, "causal", id="b1-h2-s33-d128-causal"),
    pytest.param(2, 2, 45, 80, "padding", id="b2-h2-s45-d80-padding"),
    pytest.param(3, 2, 70, 32, "full", id="b3-h2-s70-d32-full-mask"),
    pytest.param(2, 1, 13, 6, "causal", id="b2-h1-s13-d6-causal"),
]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("b,h,s,d,mask", CASES)
def test_attention(b, h, s, d, mask, target):
    kw, feed_mask = _mask_kw(b, s, mask)
    model = core_attention(b, h, s, d, **kw)
    _fused(model, TARGETS[target])
    check_against_onnxruntime(model, target=TARGETS[target], feeds=_feeds(model, feed_mask)
                              if feed_mask is not None else None)


# float16 storage (computed in float32): the tiled kernel on every profile (texel buffers hold
# float32 only, so lavapipe takes it too). Tolerances: tests/models/test_fp16.py's.
FP16_CASES = [c for c in CASES if c.id in ("b2-h4-s7-d32-padding", "b1-h4-s64-d64-causal",
                                           "b1-h3-s197-d64-vit", "b2-h2-s45-d80-padding",
                                           "b3-h2-s70-d32-full-mask")]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("b,h,s,d,mask", FP16_CASES)
def test_attention_fp16(b, h, s, d, mask, target):
    kw, feed_mask = _mask_kw(b, s, mask)
    model = core_attention(b, h, s, d, **kw)
    [kernel] = [k for k in compile_with_kernels(model, target=TARGETS[target],
                                                precision="fp16")[1]
                if k.template.startswith("attention")]
    assert kernel.template == "attention_tiled" and kernel.params["T"].name == "float16"
    check_against_onnxruntime(model, target=TARGETS[target], precision="fp16",
                              feeds=_feeds(model, feed_mask) if feed_mask is not None else None,
                              rtol_l2=1e-2, rtol=2e-2, atol=2e-2)


SHUFFLE_CASES = [c for c in CASES if c.id in ("b2-h4-s7-d32-padding", "b1-h3-s197-d64-vit",
                                             "b1-h2-s33-d128-causal", "b3-h2-s70-d32-full-mask")]


@pytest.mark.parametrize("lanes", [8, 4])
@pytest.mark.parametrize("b,h,s,d,mask", SHUFFLE_CASES)
def test_row_groups_by_shuffle(b, h, s, d, mask, lanes, monkeypatch):
    """nvidia's row groups exchange block maxima and row sums by subgroup shuffles where they fit
    the device's subgroups: with 8 or 4 lanes a row they fit lavapipe's 8, one or two groups to
    a subgroup."""
    monkeypatch.setattr(attention, "LANES", (lanes,))
    target = replace(NVIDIA_32K, name=f"nvidia-32k-lanes{lanes}")
    kw, feed_mask = _mask_kw(b, s, mask)
    model = core_attention(b, h, s, d, **kw)
    kernel = _fused(model, target)
    assert kernel.params["SHUFFLE"] and kernel.params["TX"] == lanes
    check_against_onnxruntime(model, target=target, feeds=_feeds(model, feed_mask)
                              if feed_mask is not None else None)


# K rows as the exporters' projections give them ([B, H, S, D], whole vec4s) and V rows of whole
# vec4s per lane: the next key block is fetched into registers while one is computed.
PREFETCH_CASES = [
    pytest.param(1, 3, 197, 64, None, 16, id="b1-h3-s197-d64-vit"),
    pytest.param(2, 2, 70, 64, "padding", 16, id="b2-h2-s70-d64-padding"),
    pytest.param(1, 2, 45, 32, "causal", 8, id="b1-h2-s45-d32-causal-8-lanes"),
]


@pytest.mark.parametrize("target", ["generic", "nvidia-32k"])
@pytest.mark.parametrize("b,h,s,d,mask,lanes", PREFETCH_CASES)
def test_next_key_block_prefetched(b, h, s, d, mask, lanes, target, monkeypatch):
    monkeypatch.setattr(attention, "LANES", (lanes,))
    kw, feed_mask = _mask_kw(b, s, mask)
    model = core_attention(b, h, s, d, k_transposed=False, **kw)
    profile = replace(TARGETS[target], name=f"{target}-lanes{lanes}") if target != "generic" else \
        replace(PROFILES["generic"], name=f"generic-lanes{lanes}")
    kernel = _fused(model, profile)
    assert kernel.params["VEC_READS"] == ["Q", "K", "V"] and kernel.params["PREFETCH_KV"]
    assert "k_next" in render(kernel)
    check_against_onnxruntime(model, target=profile, feeds=_feeds(model, feed_mask)
                              if feed_mask is not None else None)


FORMS = {
    "scale-mul": dict(scale="mul"),
    "scale-on-q-and-k": dict(scale="pre"),
    "no-scale": dict(scale=None),
    "k-transposed-in-graph": dict(k_transposed=False),
    "output-transposed": dict(out_transpose=True),
    "cross-sk20-dv32": dict(sk=20, dv=32),
    "cross-padding": dict(sk=20, mask_shape=[2, 1, 1, 20]),
    "opset11-softmax": dict(opset=11),
    "causal-with-past-keys": dict(sk=20, mask_const=causal_mask(9, 20)),
    "causal-minus-1e4-added": dict(mask_const=causal_mask(9, 9, -1e4)),
}
# The forms differ in the pass's strides and modes, which both targets' kernels read alike:
# all on generic, the ones that change the texel kernel's structure on lavapipe too (each
# lavapipe kernel takes seconds to build).
LAVAPIPE_FORMS = ["k-transposed-in-graph", "output-transposed", "cross-sk20-dv32",
                  "causal-with-past-keys"]


@pytest.mark.parametrize("name,target", [(n, "generic") for n in FORMS]
                         + [(n, "lavapipe") for n in LAVAPIPE_FORMS])
def test_attention_forms(name, target):
    model = core_attention(2, 2, 9, 16, **FORMS[name])
    _fused(model, target)
    check_against_onnxruntime(model, target=target)


@pytest.mark.parametrize("target,precision", [(t, "fp32") for t in TARGETS] + [("generic", "fp16")])
def test_shifted_windows(target, precision):
    """Swin's shifted-window scores: a relative position bias per head and a window mask per
    window (0 / -100), read as two operands, the mask every 4 batches again (2 images of 4
    windows); at Swin-T's window (N = 49) and head size (32)."""
    model = window_attention(2, 4, 3, 49, 32)
    if precision == "fp32":  # (fp16 adds the Casts of the float32 inputs)
        _fused(model, TARGETS[target])
    tol = dict(rtol_l2=1e-2, rtol=2e-2, atol=2e-2) if precision == "fp16" else {}
    check_against_onnxruntime(model, target=TARGETS[target], precision=precision, **tol)


@pytest.mark.parametrize("target,precision", [(t, "fp32") for t in TARGETS] + [("generic", "fp16")])
def test_windows_in_place(target, precision):
    """A shifted Swin block at Swin-T's window (7 x 7 tokens) and head size (32), 2 images of 2 x 2
    windows: Q, K and V read in the un-partitioned qkv projection, the output written in image
    order, each window and each token at two strides."""
    model = window_block(2, 2, 7, 3, 32, shift=3)
    [kernel] = [k for k in compile_with_kernels(model, target=TARGETS[target], precision=precision)[1]
                if k.template.startswith("attention")]
    assert kernel.params["parts"] == {"batch": ["Q", "K", "V", "MASK", "OUT"], "row": ["Q", "K", "V", "OUT"]}
    tol = dict(rtol_l2=1e-2, rtol=2e-2, atol=2e-2) if precision == "fp16" else {}
    check_against_onnxruntime(model, target=TARGETS[target], precision=precision, **tol)


@pytest.mark.parametrize("shape", [[1, 3, 1, 9, 9], [2, 1, 1, 9, 9]], ids=["per-window", "per-image"])
def test_window_mask_input(shape):
    """A window mask given at run time, one per window (repeating for each image) or one per
    image (the same for its windows)."""
    model = window_attention(2, 3, 2, 9, 16, mask_shape=shape)
    mask = np.where(np.random.default_rng(1).random(shape) < 0.3, -100.0, 0.0)
    _fused(model)
    check_against_onnxruntime(model, feeds=_feeds(model, mask.astype(np.float32)))


@pytest.mark.parametrize("target", TARGETS)
def test_rows_fully_masked_finfo_min(target):
    """Batch 1 masks every key with finfo.min: its softmax is uniform (V averaged), as in
    onnxruntime; finfo.min + score must not overflow to -inf (that would give NaN)."""
    model = core_attention(2, 2, 40, 16, mask_shape=[2, 1, 1, 40])
    mask = padding_mask(2, 40, [25, 0])
    res = check_against_onnxruntime(model, target=TARGETS[target], feeds=_feeds(model, mask))
    assert np.isfinite(res["outputs"]["y"]).all()


@pytest.mark.parametrize("target", TARGETS)
def test_rows_fully_masked_minus_inf(target):
    """A row whose every score is -inf is NaN in onnxruntime's Softmax and here; the other rows,
    including those whose first key block is all -inf, are finite and agree."""
    s = 70  # three key blocks on generic, the first two all -inf for the second half of rows
    model = core_attention(1, 2, s, 16, mask_shape=[1, 1, s, s])
    mask = np.zeros((1, 1, s, s), np.float32)
    mask[..., 35:, :64] = -np.inf   # rows 35.. see only keys 64..69
    mask[..., 10, :] = -np.inf      # row 10 sees nothing
    feeds = _feeds(model, mask)
    want = run_onnxruntime(model, feeds)["y"]
    got = run_bundle(compile_cached(model, target=TARGETS[target]), feeds)[0]["y"]
    assert np.array_equal(np.isnan(got), np.isnan(want)) and np.isnan(want[0, :, 10]).all()
    ok = ~np.isnan(want)
    assert np.abs(got[ok] - want[ok]).max() < 1e-5


def test_tiles_fit_the_target():
    """GPUs: workgroups of up to 256 invocations (16 row groups of 16 lanes; fewer for short
    sequences and on smaller profiles), 1 to 4 query rows per lane (the most that still give the
    profile's min_workgroups), tiles within the profile's shared memory up to head size 256.
    Texel profiles: several rows per invocation, no shared memory."""
    bert_b1 = _fused(core_attention(1, 12, 128, 64), PROFILES["nvidia"])
    assert bert_b1.local_size == (256, 1, 1) and bert_b1.params["RQ"] == 1
    assert bert_b1.groups == (8, 12, 1) and bert_b1.params["BK"] == 64
    bert_b8 = _fused(core_attention(8, 12, 128, 64), PROFILES["nvidia"])
    assert bert_b8.params["RQ"] == 2 and bert_b8.groups == (4, 96, 1)
    mobile = _fused(core_attention(1, 12, 128, 64), PROFILES["mobile"])
    assert mobile.local_size == (128, 1, 1) and mobile.params["TX"] == 16
    for shape in [(1, 12, 128, 64), (1, 4, 128, 128), (1, 2, 16, 256), (2, 3, 197, 80)]:
        for profile in ("generic", "mobile", "nvidia"):
            k = _fused(core_attention(*shape), PROFILES[profile])
            assert k.shared_memory_bytes == declared_shared_bytes(render(k))
            assert k.shared_memory_bytes <= PROFILES[profile].max_shared_memory
            assert k.local_size[0] <= PROFILES[profile].max_invocations
            assert k.params["BK"] % k.params["TX"] == 0
    generic = _fused(core_attention(1, 12, 128, 64))
    assert generic.local_size == (256, 1, 1) and generic.params["BK"] == 16
    assert _fused(core_attention(1, 1, 1, 64)).local_size == (16, 1, 1)
    lavapipe = _fused(core_attention(1, 4, 128, 64), "lavapipe")
    assert lavapipe.params["R"] == 8 and lavapipe.local_size == (16, 1, 1)
    assert lavapipe.groups == (1, 4, 1) and lavapipe.texel_buffers
    assert lavapipe.shared_memory_bytes == 0
    assert _fused(core_attention(1, 4, 128, 128), "lavapipe").params["R"] == 4
    assert _fused(core_attention(1, 1, 7, 64), "lavapipe").local_size == (8, 1, 1)


def test_vector_reads():
    """The tiled kernel reads Q, K and V rows four elements at a time where they are whole,
    aligned vec4s (contiguous along D, offset and strides multiples of 4), else one at a time:
    K given as Kᵀ [B, H, D, S] is strided along D; V rows of 80 are read into VW = 1 tiles; a
    head size of 6 is no whole vec4s. The cases run against onnxruntime above."""
    def reads(*shape, **kw):
        [k] = [k for k in compile_with_kernels(core_attention(*shape, **kw))[1]]
        return k.params["VEC_READS"]
    assert reads(2, 2, 9, 16, k_transposed=False) == ["Q", "K"]
    assert reads(1, 12, 128, 64) == ["Q", "V"]
    assert reads(2, 2, 45, 80) == ["Q"]
    assert reads(2, 1, 13, 6) == []


@pytest.mark.parametrize("profile", ["generic", "nvidia"])
def test_tiled_kernel_keeps_no_array_in_local_memory(profile):
    """o, the scores, the running maxima and sums stay in registers: every loop over them unrolls
    (no `continue` or `break`, no multiplying induction variable, no array passed to a function),
    with and without shuffles, whole and partial vec4 columns, 1 to 4 rows a lane, with the next
    key block fetched into registers (K rows of whole vec4s) or not."""
    for shape, kw in [((8, 12, 197, 64), {}), ((8, 12, 197, 64), dict(k_transposed=False)),
                      ((1, 12, 128, 64), dict(mask_shape=[1, 1, 128, 128])),
                      ((2, 2, 45, 80), dict(mask_shape=[2, 1, 1, 45])), ((1, 2, 33, 128), {})]:
        bundle = compile_cached(core_attention(*shape, **kw), target=profile)
        found = function_local_variables(bundle, "attention_tiled")
        assert found and not any(found.values()), (shape, found)


def test_head_size_limit():
    with pytest.raises(CompileError, match="head size 320"):
        compile_with_kernels(core_attention(1, 1, 4, 320))
    tiny = replace(PROFILES["generic"], name="tiny", max_shared_memory=4096)
    with pytest.raises(CompileError, match="no tile .* head size 256 fits tiny's 4096 bytes"):
        compile_with_kernels(core_attention(1, 1, 4, 256), target=tiny)
