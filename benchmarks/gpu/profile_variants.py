#!/usr/bin/env python3
"""On the GPU machine: whole models compiled with variants of the nvidia profile (Target fields
changed, or a lowering module's constants: MODULE_VARIANTS), each timed host to host (Model.bench, median of 30) and on the GPU (Model.profile, sum of
the dispatches' medians), to decide a profile default on models rather than on one kernel.

    python3 -m benchmarks.gpu.profile_variants fp16 bert:1,gpt2:1,resnet50:1,vit:8 default,no32,mw132,no32-mw132,k32s2
    python3 -m benchmarks.gpu.profile_variants fp32 vit:8,resnet50:32 default,t128x128r8x8,t128x128r8x8k8,t64x128r4x8

Models: a transformers class as benchmarks/gpu/transformers.py builds and exports it at full size
(its MODELS: bert, gpt2, vit, llama, ...), or a tests/models/zoo.py CNN (BN folded), random weights.
A variant that fails to compile or run is reported in its row. One JSON line per (model, variant), with its outputs' rel L2 against the first
variant's (same precision: a variant must not change the numbers past rounding).
"""
import json
import statistics
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np  # noqa: E402

import compiler  # noqa: E402
from benchmarks.cli import exit_on_help  # noqa: E402
from compiler.targets import TARGETS  # noqa: E402
from runtime_min import load  # noqa: E402

NV = TARGETS["nvidia"]
NO_32 = tuple(t for t in NV.coopmat_tiles if t[2] * t[3] >= 4)   # the cooperative-matrix tiles of 64x64 and up
VARIANTS = {
    "default": NV,
    "no32": replace(NV, coopmat_tiles=NO_32),
    "mw132": replace(NV, min_workgroups=132),
    "no32-mw132": replace(NV, coopmat_tiles=NO_32, min_workgroups=132),
    "k32s2": replace(NV, coopmat_k=32, coopmat_stages=2),
    "t128x128r8x8": replace(NV, tile_m=128, tile_n=128, reg_m=8, reg_n=8),
    "t128x128r8x8k8": replace(NV, tile_m=128, tile_n=128, reg_m=8, reg_n=8, tile_k=8),
    "t64x128r4x8": replace(NV, tile_m=64, tile_n=128, reg_m=4, reg_n=8),
    "implicit": replace(NV, im2col_max_bytes=0),
    "wino4": replace(NV, winograd=4),
    "wino2": replace(NV, winograd=2),
    # split-K for 264 or 528 workgroups before tiles shrink, or (0) only after; finished in the
    # kernel where at most 64 sums per invocation (fused) or always by a second dispatch (default)
    "sf264": replace(NV, splitk_workgroups=264),
    "sf792": replace(NV, splitk_workgroups=792),
    "sf528fused": replace(NV, splitk_fused_sums=64),
    "shrink-first": replace(NV, splitk_workgroups=0),
    "shrink-first-fused": replace(NV, splitk_workgroups=0, splitk_fused_sums=64),
    "sk2": replace(NV, splitk_min_steps=2),
    "sk8": replace(NV, splitk_min_steps=8),
    # the 32x32 tile as one subgroup of 2x2 accumulators instead of four of one
    "w1": replace(NV, coopmat_tiles=NV.coopmat_tiles[:-1] + ((1, 1, 2, 2),)),
    "w1-mw528": replace(NV, coopmat_tiles=NV.coopmat_tiles[:-1] + ((1, 1, 2, 2),), min_workgroups=528),
    # and the 32x64 tile as two subgroups of 2x2 instead of four of 1x2
    "w12": replace(NV, coopmat_tiles=NV.coopmat_tiles[:-2] + ((1, 2, 2, 2), (1, 1, 2, 2))),
    # deeper K steps on the cooperative-matrix kernel (fewer steps, each waiting on global memory
    # once); the larger tiles no longer fit shared memory at 256 and drop out
    "ck128": replace(NV, coopmat_k=128),
    "ck256": replace(NV, coopmat_k=256),
    "ck256-mw528": replace(NV, coopmat_k=256, min_workgroups=528),
    "mw528": replace(NV, min_workgroups=528),
    # cooperative-matrix tiles and split-K aimed at 66 workgroups; K steps deepened to 12 steps
    "cw66": replace(NV, coopmat_workgroups=66),
    "ks12": replace(NV, coopmat_k_steps=12),
    "ks3": replace(NV, coopmat_k_steps=3),
    "ks3-cs16": replace(NV, coopmat_k_steps=3, coopmat_split_steps=16),
    "cw66-ks12": replace(NV, coopmat_workgroups=66, coopmat_k_steps=12),
    "cw132-ks12": replace(NV, coopmat_workgroups=132, coopmat_k_steps=12),
    # cooperative-matrix split-K slices of at least 16 K steps (else 4)
    "cs16": replace(NV, coopmat_split_steps=16),
    "cw132": replace(NV, coopmat_workgroups=132),
    "cw132-cs16": replace(NV, coopmat_workgroups=132, coopmat_split_steps=16),
    # cooperative-matrix K steps k + 1 and k + 2 both in flight where a step takes <= 4 / 8 loads
    "pf4": replace(NV, coopmat_deep_prefetch=4),
    "pf8": replace(NV, coopmat_deep_prefetch=8),
}
# Variants of a lowering module's constants instead of the profile: name -> (module, {name: value}).
MODULE_VARIANTS = {
    "ln-reread": ("compiler.lower.layernorm", {"ROW_REGISTERS": 0}),   # every pass re-reads the row
    "ln-few": ("compiler.lower.layernorm", {"FEW_LANES": True}),       # one subgroup a row (D <= 1024)
    "att-tiled": ("compiler.lower.attention", {"COOPMAT_MAX_HEAD": 0}),  # float16 attention off the tensor cores
}


def variant_target(name):
    """The profile a variant compiles for, with its module constants set (and the others reset)."""
    import importlib
    for module, values in MODULE_VARIANTS.values():
        mod = importlib.import_module(module)
        saved = mod.__dict__.setdefault("_profile_variants_saved", {})
        for k in values:
            setattr(mod, k, saved.setdefault(k, getattr(mod, k)))
    if name in MODULE_VARIANTS:
        module, values = MODULE_VARIANTS[name]
        for k, v in values.items():
            setattr(importlib.import_module(module), k, v)
        return NV
    return VARIANTS[name]


def model_and_feeds(name, batch):
    from benchmarks.gpu import transformers as T
    if name in T.MODELS:
        case = T.build(name, batch)
        return T.export(case), case.feeds
    from benchmarks.gpu import coopmat
    m = coopmat.zoo_model(name, batch)
    return m, coopmat.feeds_for(m)


def main(precision, specs, names):
    for spec in specs.split(","):
        name, batch = spec.split(":")
        m, feeds = model_and_feeds(name, int(batch))
        first = None
        for v in names.split(","):
            row = dict(model=name, batch=int(batch), precision=precision, variant=v)
            try:
                bundle = compiler.compile_model(m, target=variant_target(v), precision=precision)
                with load(bundle) as vm:
                    got = vm.run(feeds)
                    first = first or got
                    row["rel_l2_vs_first"] = max(float(np.linalg.norm(got[k].astype(np.float64) - first[k])
                                                       / max(np.linalg.norm(first[k].astype(np.float64)), 1e-30))
                                                 for k in got)
                    row["vkc_ms"] = round(statistics.median(vm.bench(feeds, warmup=5, repeat=30)) * 1e3, 4)
                    row["gpu_ms"] = round(sum(p.seconds for p in vm.profile(feeds, repeat=5)) * 1e3, 4)
            except Exception as e:  # noqa: BLE001  one variant's failure is its row
                row["error"] = repr(e)[:200]
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    exit_on_help(__doc__)
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    main(*sys.argv[1:])
