"""`vkc tune`: time the profile's own tiles and candidate tile configurations of every matmul
problem of a model on the actual device and keep the fastest per problem in the tuning cache
(compiler/tuning_cache.py) that `--target host` reads.

Each candidate is applied to every matmul of the model at once; once the GPU is warm
(host.warm_up), profiled runs time all of them, and each problem (M x N x K x batches and B's
layout) keeps its own fastest candidate.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from .codegen import NEWER_GLSL_HINT, newer_toolchain
from .compile import compile_with_kernels
from .lower.matmul import coopmat2_fits
from .host import resolve_target, time_dispatches
from .tuning_cache import store_tuning

# Per Target.matmul: the fields each candidate overrides.
CANDIDATES = {
    "tiled": [dict(tile_m=128, tile_n=64, reg_m=8, reg_n=4), dict(tile_m=64, tile_n=128, reg_m=4, reg_n=8),
              dict(tile_m=64, tile_n=64, reg_m=4, reg_n=4), dict(tile_m=32, tile_n=32, reg_m=4, reg_n=4),
              dict(tile_m=128, tile_n=64, reg_m=8, reg_n=4, min_workgroups=1)],
    "texel": [dict(cpu_rows=8, cpu_cols=2, cpu_lanes=8), dict(cpu_rows=4, cpu_cols=4, cpu_lanes=8),
              dict(cpu_rows=8, cpu_cols=1, cpu_lanes=8), dict(cpu_rows=16, cpu_cols=1, cpu_lanes=8),
              dict(cpu_rows=4, cpu_cols=2, cpu_lanes=8), dict(cpu_rows=8, cpu_cols=2, cpu_lanes=16)],
}


# float16 (fp16, fp16-matmul) on a device with cooperative matrices: each of the profile's
# workgroup tiles alone (the kernel otherwise takes the largest that gives min_workgroups), the
# other K steps, split-K slices of at least 16 steps (short products unsplit), the largest tile
# kept and K split where slices keep 8 steps (deep products), and the other depth of prefetch.
# Each of these wins on some products and loses on others (targets.py), which is what
# per-problem tuning is for.
COOPMAT_K = (16, 32, 64, 128, 256)
# A 128x256 tile (2x4 subgroups of 4x4 accumulators) in K steps of 32 with two in flight: the
# fastest KHR kernel on large squares (benchmarks/RESULTS.md, "float16 GEMM against cuBLAS"), with
# too few workgroups for most of a model's products to take by default.
WIDE_TILE = dict(coopmat_tiles=((2, 4, 4, 4),), coopmat_k=32, coopmat_deep_prefetch=8)
# A 128x128 tile of 2x2 subgroups of 4x4 accumulators, K steps of 32, two in flight: 128
# invocations at 255 registers, so two workgroups share an SM and one's barriers overlap the
# other's products (`python3 -m benchmarks.gpu.coopmat gemm 8192 sweep 17`).
PAIRED_TILE = dict(coopmat_tiles=((2, 2, 4, 4),), coopmat_k=32, coopmat_deep_prefetch=8)
# VK_NV_cooperative_matrix2 workgroup tiles (BM, BN, BK, invocations, K steps a loop iteration),
# where the profile lists its shapes and VKC_COOPMAT2_GLSLC names a compiler for it: each is the
# fastest at some product of BERT, ViT or ResNet-50, 128x256 on large ones, 32x64 on BERT's
# 128x768x768; eight K steps a loop iteration let the driver overlap their loads
# (`python3 -m benchmarks.gpu.coopmat gemm 8192,1576x2304x768 coopmat2`).
COOPMAT2_TILES = ((128, 256, 32, 256, 1), (128, 256, 32, 256, 8), (128, 128, 32, 256, 1),
                  (64, 128, 32, 128, 8), (64, 64, 32, 128, 8), (32, 64, 32, 128, 8))


def candidates(base, precision: str = "fp32", log=print) -> list[dict]:
    """The Target fields each candidate overrides: cooperative-matrix tiles for float16 on a
    profile that lists cooperative-matrix shapes (and coopmat2's workgroup tiles where it lists
    those and their compiler is set up), else the profile's matmul kind's tiles."""
    if precision != "fp32" and base.cooperative_matrix:
        out = ([dict(coopmat_tiles=(tile,)) for tile in base.coopmat_tiles] + [WIDE_TILE, PAIRED_TILE]
               + [dict(coopmat_k=k) for k in COOPMAT_K if k != base.coopmat_k]
               + [dict(coopmat_split_steps=16),
                  dict(coopmat_deep_prefetch=0 if base.coopmat_deep_prefetch else 8)])
        tiles = [t for t in COOPMAT2_TILES if coopmat2_fits(base, t)]
        if tiles and newer_toolchain() is None:
            log(f"not trying VK_NV_cooperative_matrix2 tiles: {NEWER_GLSL_HINT}")
        elif tiles:
            out += [dict(coopmat2_tile=t) for t in tiles]
        return out
    if base.matmul not in CANDIDATES:
        raise ValueError(f"target '{base.name}' tiles its matmuls as '{base.matmul}', which has no tuning "
                         f"candidates; `vkc tune` tunes {' and '.join(sorted(CANDIDATES))} profiles.")
    return CANDIDATES[base.matmul]


PROFILE_OWN = "(the profile's own tiles)"


def measure(model, base, fields_list, *, device=None, input_shapes=None, precision: str = "fp32",
            repeat: int = 5, log=print, max_context: int | None = None):
    """Each candidate applied to every matmul of the model at once and timed (time_dispatches):
    (device name, [{problem: seconds} per candidate]). An empty candidate is the profile's own
    choice."""
    device_name, measured = None, []
    for fields in fields_list:
        # Each candidate's tile as it is (exact_tile), as a tuned problem will get it.
        target = replace(base, **fields, exact_tile=True) if fields else base
        bundle, kernels = compile_with_kernels(model, input_shapes=input_shapes, precision=precision,
                                               target=target, max_context=max_context)
        device_name, times = time_dispatches(bundle, device, repeat)
        per_problem: dict[str, float] = {}
        for kernel, t in zip(kernels, times):
            if kernel.problem:
                per_problem[kernel.problem] = per_problem.get(kernel.problem, 0.0) + t.seconds
        measured.append(per_problem)
        log(f"{fields or PROFILE_OWN}: matmuls {sum(per_problem.values()) * 1e3:.3f} ms")
    return device_name, measured


def tune(model, *, target: str = "host", device=None, input_shapes=None, precision: str = "fp32",
         repeat: int = 5, path: Path | None = None, log=print, max_context: int | None = None) -> dict[str, dict]:
    """Measure the profile's own choice and every candidate, store and return {problem: fastest
    fields} ({} where the profile's own choice is the fastest: what a compile does untuned)."""
    base = replace(resolve_target(target, device), tuned=())
    fields_list = [{}] + candidates(base, precision, log)
    device_name, measured = measure(model, base, fields_list, device=device, input_shapes=input_shapes,
                                    precision=precision, repeat=repeat, log=log, max_context=max_context)
    choice = {}
    for problem in measured[0]:
        times = [(m[problem], i) for i, m in enumerate(measured) if problem in m]
        seconds, best = min(times)
        choice[problem] = fields_list[best]
        log(f"  {problem}: {measured[0][problem] * 1e3:.3f} -> {seconds * 1e3:.3f} ms"
            f" {fields_list[best] or PROFILE_OWN}")
    store_tuning(device_name, choice, path)
    return choice
