"""Split-K (lower/matmul.py): the slices of K of each output tile write partial sums, then either
the last slice to finish adds them up and applies the epilogue (fused: common.glsl.j2
splitk_finish; the run's first dispatch zeroes every matmul's tile counters, lower/counters.py),
or, where that would leave the last slice many sums to add, a second dispatch does. Both checked
against onnxruntime over several runs of one loaded bundle (a counter left dirty by a run would
break the next). The generic profile splits these matmuls 16 ways (the separate pass); with a
lower few-workgroup threshold they split 3 ways (fused)."""
import numpy as np
import pytest

from tests.harness import assert_close, random_feeds, run_onnxruntime
from tests.onnx_builders import GraphBuilder

from dataclasses import replace

from compiler import compile_model
from compiler.compile import compile_with_kernels
from compiler.targets import TARGETS

RUNS = 3
TARGETS_BY_FINISH = {"fused": replace(TARGETS["generic"], name="generic-3", min_workgroups=3),
                     "separate": "generic"}


def _two_heads():
    """Two Gemms of one input with long K (they split K) and nothing between them, one with a
    GELU-like epilogue, and a batched MatMul by a constant weight with a residual Add."""
    g = GraphBuilder("split_k", seed=3)
    x = g.input("x", [5, 1536])
    a = g.node("Relu", [g.gemm(x, 1536, 24)], out="a")
    g.gemm(x, 1536, 40, name="b")
    g.nodes[-1].output[0] = "b"
    y = g.input("y", [3, 7, 1024])
    w = g.const("w", g.rng.standard_normal((1024, 20)).astype(np.float32) / 32)
    r = g.input("r", [3, 7, 20])
    g.node("Add", [g.node("MatMul", [y, w]), r], out="c")
    return g.build([a, "b", "c"])


@pytest.mark.parametrize("finish", TARGETS_BY_FINISH)
def test_split_k_matmuls_match_onnxruntime_run_after_run(finish):
    from runtime_min import clear_validation_messages, load, validation_messages

    model = _two_heads()
    bundle = compile_model(model, target=TARGETS_BY_FINISH[finish])
    clear_validation_messages()
    loaded = load(bundle, validation=True)
    try:
        for run in range(RUNS):
            feeds = random_feeds(model, seed=run)
            got = loaded.run({k: v.copy() for k, v in feeds.items()})
            want = run_onnxruntime(model, feeds)
            for name in want:
                assert_close(f"run {run} {name}", got[name], want[name], rtol_l2=1e-4)
    finally:
        loaded.close()
    assert not list(validation_messages())


def test_one_dispatch_per_matmul_and_disjoint_counters():
    model = _two_heads()
    _, kernels = compile_with_kernels(model, target=TARGETS_BY_FINISH["fused"])
    split = [k for k in kernels if k.params.get("split_k")]
    assert len(split) == 3 and all(k.params["splitk_fused"] for k in split)
    assert kernels[0].template == "zero_fill" and not any("reduce" in k.template for k in kernels)
    # Every split matmul's counters are its own aligned slice of the one tensor zeroed first.
    counts = [k.bindings[k.zeroed[0]] for k in split]
    assert all(c.root() is kernels[0].bindings[0] for c in counts)
    spans = sorted((c.root_offset(), c.root_offset() + c.nbytes) for c in counts)
    assert all(s % 256 == 0 for s, _ in spans)
    assert all(e <= s2 for (_, e), (s2, _) in zip(spans, spans[1:]))


def test_deep_splits_add_up_in_a_second_dispatch():
    """16 slices of 32x32 tiles would leave each invocation of the last slice 256 sums to add."""
    _, kernels = compile_with_kernels(_two_heads(), target="generic")
    split = [k for k in kernels if k.params.get("split_k")]
    assert len(split) == 3 and not any(k.params["splitk_fused"] for k in split)
    assert [k.template for k in kernels].count("splitk_reduce") == 3
    assert "zero_fill" not in [k.template for k in kernels]


def test_no_split_no_zeroing():
    g = GraphBuilder("small", seed=1)
    x = g.input("x", [64, 32])
    g.gemm(x, 32, 64)
    g.nodes[-1].output[0] = "y"
    _, kernels = compile_with_kernels(g.build(["y"]), target="generic")
    assert [k.template for k in kernels] == ["matmul_tiled"]


def _matmul(m: int, k: int, n: int):
    g = GraphBuilder(f"matmul_{m}x{k}x{n}", seed=5)
    x = g.input("x", [m, k])
    w = g.const("w", (g.rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32))
    g.node("MatMul", [x, w], out="y")
    return g.build(["y"])


def _tiles_and_split(kernels) -> list[tuple]:
    spec = lambda k, name: next((v for n, _, v in k.spec if n == name), 1)  # noqa: E731
    return [(k.params["BM"], k.params["BN"], spec(k, "SPLIT"), k.params["splitk_fused"])
            for k in kernels if k.template == "matmul_tiled"]


def test_deep_reductions_keep_the_tile_and_split_k():
    """splitk_workgroups (the nvidia profile): where the profile's tile gives too few workgroups
    and splitting K can give splitk_workgroups, the tile stays and K splits, the sums added by a
    second dispatch (ViT-B/16's FFN down-projection at batch 8: 1576x768x3072 on 128x64 tiles in
    4 slices); a shallow K shrinks the tiles instead, as the profile without the option does."""
    nvidia = TARGETS["nvidia"]
    shrink_first = replace(nvidia, splitk_workgroups=0)
    deep, shallow = _matmul(1576, 3072, 768), _matmul(1576, 128, 768)
    _, kernels = compile_with_kernels(deep, target=nvidia)
    assert _tiles_and_split(kernels) == [(128, 64, 4, False)]
    assert [k.template for k in kernels] == ["matmul_tiled", "splitk_reduce"]
    assert _tiles_and_split(compile_with_kernels(deep, target=shrink_first)[1]) == [(64, 64, 1, False)]
    for target in (nvidia, shrink_first):
        assert _tiles_and_split(compile_with_kernels(shallow, target=target)[1]) == [(64, 64, 1, False)]


def test_kept_tile_split_k_matches_onnxruntime():
    """The same rule on the generic profile, run here: 64x64 tiles over a 100x96 output in 16
    slices of K = 2048, against onnxruntime."""
    from runtime_min import load
    model = _matmul(100, 2048, 96)
    target = replace(TARGETS["generic"], name="generic-split-first", splitk_workgroups=64, splitk_fused_sums=0)
    bundle, kernels = compile_with_kernels(model, target=target)
    assert _tiles_and_split(kernels) == [(64, 64, 16, False)]
    feeds = random_feeds(model, seed=1)
    with load(bundle, validation=True) as loaded:
        assert_close("y", loaded.run(feeds)["y"], run_onnxruntime(model, feeds)["y"], rtol_l2=1e-5)
