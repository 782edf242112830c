"""The static schedule: dispatches in order, a barrier only where one is needed.

A barrier goes before a dispatch that reads bytes written since the last barrier (read after
write), or writes bytes read or written since then (the arena reuses memory, so write after read
and write after write matter too).
"""
from __future__ import annotations


def _overlaps(a, ranges) -> bool:
    return any(a[0] < e and s < a[1] for s, e in ranges)


def place_barriers(accesses) -> list[bool]:
    """accesses: per dispatch, (read ranges, write ranges) as [start, end) arena bytes."""
    barriers, reads, writes = [], [], []
    for r, w in accesses:
        need = any(_overlaps(x, writes) for x in r) or any(_overlaps(x, reads + writes) for x in w)
        if need:
            reads, writes = [], []
        barriers.append(need)
        reads += r
        writes += w
    return barriers
