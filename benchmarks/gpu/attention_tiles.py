#!/usr/bin/env python3
"""On the GPU machine: the tiled attention kernel (templates/attention_tiled.comp.j2) alone, at the
attention shapes of BERT-base / GPT-2 small (12 heads, seq 128, head 64, an additive [B,1,S,S]
mask) and ViT-B/16 (12 heads, 197 tokens, head 64, no mask), batch 1 and 8, for the tile
choices of compiler/lower/attention.py and variants of them: GPU time per dispatch from
Model.profile, GFLOP/s counting 4*B*H*S^2*D, and the rel L2 error against numpy.

    source benchmarks/gpu/setup.sh
    python3 -m benchmarks.gpu.attention_tiles                       # every variant, nvidia
    python3 -m benchmarks.gpu.attention_tiles --variants default,bk32 --target generic
    python3 -m benchmarks.gpu.attention_tiles --precision fp16 --shapes bert-b1,vit-b8

A variant overrides the module constants tiled_tiles() chooses from (BLOCK_KEYS, ROWS, LANES,
THREADS, ROW_GROUPS, SHUFFLE_ROWS), or coopmat_tiles()'s (COOPMAT_*: float16 on the tensor
cores; "tiled" keeps float16 off them); "default" overrides nothing.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path


import numpy as np

import compiler
import compiler.lower.attention as attention
from tests.attention_models import core_attention

VARIANTS = {
    "default": {},
    "bk32": {"BLOCK_KEYS": (32, 16, 8, 4)},
    "bk16": {"BLOCK_KEYS": (16, 8, 4)},
    "rows1": {"ROWS": (1,)},
    "rows2": {"ROWS": (2,)},
    "rows4": {"ROWS": (4,)},
    "lanes8": {"LANES": (8, 4)},
    "threads64": {"THREADS": 64, "ROW_GROUPS": 4},
    "threads256": {"THREADS": 256, "ROW_GROUPS": 16},
    "noshuffle": {"SHUFFLE_ROWS": False},
    "rows3": {"ROWS": (3,)},
    "noprefetch": {"PREFETCH_KV": False},
    "workgroup-p": {"SUBGROUP_P": False},
    # float16 on the cooperative-matrix kernel (attention_coopmat.comp.j2), or kept off it
    "tiled": {"COOPMAT_MAX_HEAD": 0},
    "cm_wq1": {"COOPMAT_SUBGROUPS": (1,)},
    "cm_wq2": {"COOPMAT_SUBGROUPS": (2,)},
    "cm_wq4": {"COOPMAT_SUBGROUPS": (4,)},
    "cm_bk32": {"COOPMAT_BLOCK_KEYS": (32,)},
    "cm_noprefetch": {"COOPMAT_PREFETCH_REGS": 0},
    "cm_prefetch": {"COOPMAT_PREFETCH_REGS": 64},
}
SHAPES = {  # name: (B, H, S, D, mask)
    "bert-b1": (1, 12, 128, 64, True), "bert-b8": (8, 12, 128, 64, True),
    "vit-b1": (1, 12, 197, 64, False), "vit-b8": (8, 12, 197, 64, False),
}


def reference(q, k, v, mask, scale):
    s = np.einsum("bhqd,bhkd->bhqk", q.astype(np.float64), k.astype(np.float64)) * scale
    if mask is not None:
        s = s + mask
    p = np.exp(s - s.max(-1, keepdims=True))
    return np.einsum("bhqk,bhkd->bhqd", p / p.sum(-1, keepdims=True), v)


def run(shape, target, repeat, precision):
    from runtime_min import load
    b, h, s, d, masked = shape
    # K as [B, H, S, D], rows of whole vec4s, as the models' projections give it (fused attention)
    model = core_attention(b, h, s, d, k_transposed=False, mask_shape=[b, 1, s, s] if masked else None)
    rng = np.random.default_rng(0)
    feeds = {"q": rng.standard_normal((b, h, s, d), np.float32),
             "k": rng.standard_normal((b, h, s, d), np.float32),
             "v": rng.standard_normal((b, h, s, d), np.float32)}
    mask = None
    if masked:  # a padded tail, as the BERT benchmark's
        mask = np.zeros((b, 1, s, s), np.float32)
        mask[..., s - s // 8:] = np.finfo(np.float32).min
        feeds["mask"] = mask
    bundle, kernels = compiler.compile.compile_with_kernels(model, target=target,
                                                            precision=precision)
    [kernel] = [k for k in kernels if k.template.startswith("attention")]
    t = kernel.params
    if kernel.template == "attention_coopmat":
        tiles = f"coopmat WQ{t['WQ']} BK{t['BK']}{' prefetch' if t['PREFETCH'] else ''}"
    else:
        tiles = (f"TX{t.get('TX')} TY{t.get('TY')} RQ{t.get('RQ')} BK{t.get('BK')} VW{t.get('VW')}"
                 f"{' sh' if t.get('SHUFFLE') else ''}")
    m = load(bundle, validation=False)
    try:
        got = m.run(feeds)["y"]
        err = float(np.linalg.norm(got - reference(feeds["q"], feeds["k"], feeds["v"], mask,
                                                   d ** -0.5)) / np.linalg.norm(got))
        times = [sum(x.seconds for x in m.profile(feeds, repeat=1) if x.kernel.startswith("attention"))
                 for _ in range(repeat)]
    finally:
        m.close()
    sec = statistics.median(times)
    return tiles, kernel.shared_memory_bytes, sec, 4 * b * h * s * s * d / sec / 1e9, err


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--target", default="nvidia")
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--precision", default="fp32", choices=["fp32", "fp16"])
    args = ap.parse_args()
    defaults = {name: getattr(attention, name) for name in
                {k for v in VARIANTS.values() for k in v}}
    print(f"{args.precision}, target {args.target}")
    print(f"{'variant':11s} {'shape':8s} {'tiles':28s} {'smem':>6s} {'us':>8s} {'GFLOP/s':>8s} "
          f"{'rel L2':>8s}", flush=True)
    for variant in args.variants.split(","):
        for name, value in {**defaults, **VARIANTS[variant]}.items():
            setattr(attention, name, value)
        for shape in args.shapes.split(","):
            try:
                tiles, smem, sec, gflops, err = run(SHAPES[shape], args.target, args.repeat,
                                                     args.precision)
                print(f"{variant:11s} {shape:8s} {tiles:28s} {smem:6d} {sec * 1e6:8.1f} "
                      f"{gflops:8.0f} {err:8.1e}", flush=True)
            except Exception as exc:  # noqa: BLE001  one variant's failure leaves the others
                print(f"{variant:11s} {shape:8s} failed: {type(exc).__name__}: {str(exc)[:200]}",
                      flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
