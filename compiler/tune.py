"""`vkc tune`: time candidate tile configurations of every matmul problem of a model on the
actual device and keep the fastest per problem in a tuning cache that `--target host` reads.

Each candidate is applied to every matmul of the model at once; one profiled run then times all
of them, and each problem (M x N x K x batches and B's layout) keeps its own fastest candidate.
The cache is JSON: {device name: {problem: {Target field: value}}}.
"""
from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import numpy as np

from .targets import get_target

CANDIDATES = {
    "tiled": [dict(tile_m=128, tile_n=64, reg_m=8, reg_n=4), dict(tile_m=64, tile_n=128, reg_m=4, reg_n=8),
              dict(tile_m=64, tile_n=64, reg_m=4, reg_n=4), dict(tile_m=32, tile_n=32, reg_m=4, reg_n=4),
              dict(tile_m=128, tile_n=64, reg_m=8, reg_n=4, min_workgroups=1)],
    "register": [dict(cpu_rows=8, cpu_cols=2, cpu_lanes=16), dict(cpu_rows=4, cpu_cols=2, cpu_lanes=8),
                 dict(cpu_rows=8, cpu_cols=1, cpu_lanes=8), dict(cpu_rows=4, cpu_cols=4, cpu_lanes=8),
                 dict(cpu_rows=2, cpu_cols=2, cpu_lanes=8)],
    "texel": [dict(cpu_rows=8, cpu_cols=2, cpu_lanes=8), dict(cpu_rows=4, cpu_cols=4, cpu_lanes=8),
              dict(cpu_rows=8, cpu_cols=1, cpu_lanes=8), dict(cpu_rows=16, cpu_cols=1, cpu_lanes=8),
              dict(cpu_rows=4, cpu_cols=2, cpu_lanes=8), dict(cpu_rows=8, cpu_cols=2, cpu_lanes=16)],
}


def tuning_path() -> Path:
    """Beside the SPIR-V cache; VKC_CACHE_DIR=off turns caching off, not tuning."""
    configured = os.environ.get("VKC_CACHE_DIR")
    base = configured if configured and configured != "off" else os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "vkc")
    return Path(base) / "tuning.json"


def load_tuning(device_name: str, path: Path | None = None) -> tuple:
    """The stored choices for a device as Target.tuned; a missing or unreadable file is empty."""
    try:
        entries = json.loads((path or tuning_path()).read_text()).get(device_name, {})
        return tuple((problem, tuple(sorted(fields.items()))) for problem, fields in entries.items())
    except (OSError, ValueError, AttributeError):
        return ()


def tune(model, *, target: str = "host", device=None, input_shapes=None, repeat: int = 5,
         path: Path | None = None, log=print) -> dict[str, dict]:
    """Measure every candidate, store and return {problem: fastest fields}."""
    from runtime_min import load

    from .compile import compile_with_kernels

    base = replace(get_target(target, device), tuned=())
    best: dict[str, tuple[float, dict]] = {}
    device_name = None
    for fields in CANDIDATES[base.matmul]:
        bundle, kernels = compile_with_kernels(model, input_shapes=input_shapes,
                                               target=replace(base, **fields))
        with load(bundle, device=device) as m:
            device_name = m.device_name
            rng = np.random.default_rng(0)
            feeds = {t.name: rng.standard_normal(t.shape).astype(t.dtype) for t in m.inputs}
            times = m.profile(feeds, repeat=repeat)
        per_problem: dict[str, float] = {}
        for kernel, t in zip(kernels, times):
            if kernel.problem:
                per_problem[kernel.problem] = per_problem.get(kernel.problem, 0.0) + t.seconds
        for problem, seconds in per_problem.items():
            if problem not in best or seconds < best[problem][0]:
                best[problem] = (seconds, fields)
        log(f"{fields}: matmuls {sum(per_problem.values()) * 1e3:.3f} ms")
    choice = {problem: fields for problem, (_, fields) in best.items()}
    path = path or tuning_path()
    try:
        stored = json.loads(path.read_text())
    except (OSError, ValueError):
        stored = {}
    stored.setdefault(device_name, {}).update(choice)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(stored, indent=1, sort_keys=True))
    tmp.replace(path)
    return choice
