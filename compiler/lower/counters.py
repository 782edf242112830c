"""Counters kernels need zeroed when they run (split-K's per-tile slice counts, lower/matmul.py;
split-KV attention's per-row-block chunk counts, lower/attention.py):
every such binding becomes a slice of one arena tensor that the run's first dispatch zeroes. One
dispatch per run instead of a reduction dispatch per kernel; each kernel keeps its own slice, so
kernels between the same barriers never share a counter (bundles/hazards.py sees disjoint bytes)."""
from __future__ import annotations

import numpy as np

from ..ir import Value
from ..memory import align
from .kernel import Kernel, grid_1d


def zero_counters(kernels: list[Kernel], target) -> list[Kernel]:
    counters = [k.bindings[i] for k in kernels for i in k.zeroed]
    if not counters:
        return kernels
    offsets, total = [], 0
    for v in counters:  # each slice on a binding-alignment boundary
        offsets.append(total)
        total += align(v.nbytes)
    words = total // 4
    root = Value("zeroed_counters", np.dtype(np.uint32), (words,))
    for v, offset in zip(counters, offsets):
        v.alias_of, v.alias_offset = root, offset
    local = target.elementwise_local
    zero = Kernel("zero_fill", dict(LOCAL=local), [("TOTAL", "int32", words)], [root], writes=[0],
                  groups=grid_1d(words, local), local_size=(local, 1, 1),
                  nodes=[f"counters of {len(counters)} kernel(s)"])
    return [zero, *kernels]
