"""The memory plan: every intermediate gets an offset in one arena from its liveness.

Events are dispatch indices. A tensor lives from the dispatch that writes it (graph inputs: from
the start) to the last dispatch that reads it or any view of it (graph outputs: to the end).
At each step the outputs are placed first, best-fit among freed blocks, and only then the
tensors read for the last time are freed, so no dispatch writes over its own inputs.
"""
from __future__ import annotations

from dataclasses import dataclass

from .ir import Value

ALIGNMENT = 256  # Vulkan's largest minStorageBufferOffsetAlignment


def align(n: int, a: int = ALIGNMENT) -> int:
    return -(-n // a) * a


@dataclass
class MemoryPlan:
    offsets: dict[int, int]          # id(root Value) -> arena offset
    arena_bytes: int
    intermediates_sum_bytes: int
    lower_bound_bytes: int


def plan_memory(kernels, graph_inputs: list[Value], graph_outputs: list[Value]) -> MemoryPlan:
    end = len(kernels)
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    roots: dict[int, Value] = {}

    def touch(v: Value, step: int, writing: bool) -> None:
        r = v.root()
        if r.is_constant:
            return
        roots[id(r)] = r
        if writing:
            first.setdefault(id(r), step)
        last[id(r)] = max(last.get(id(r), step), step)

    for v in graph_inputs:
        touch(v, -1, True)
    for step, k in enumerate(kernels):
        for i, v in enumerate(k.bindings):
            touch(v, step, i in k.writes)
    for v in graph_outputs:
        touch(v, end, False)

    sizes = {rid: align(max(r.nbytes, 4)) for rid, r in roots.items()}
    starts: dict[int, list[int]] = {}
    ends: dict[int, list[int]] = {}
    for rid in roots:
        starts.setdefault(first.get(rid, -1), []).append(rid)
        ends.setdefault(last[rid], []).append(rid)

    free: list[tuple[int, int]] = []  # (offset, size) blocks below `top`, sorted by offset
    top = 0
    offsets: dict[int, int] = {}
    for step in range(-1, end + 1):
        for rid in sorted(starts.get(step, []), key=lambda r: -sizes[r]):
            offsets[rid], top = _best_fit(free, top, sizes[rid])
        for rid in ends.get(step, []):
            _release(free, offsets[rid], sizes[rid])
        # A free block touching the top shrinks the arena instead.
        if free and free[-1][0] + free[-1][1] == top:
            top = free.pop()[0]
    arena = max((offsets[r] + sizes[r] for r in offsets), default=0)
    lower = max((sum(sizes[r] for r in roots if first.get(r, -1) <= s <= last[r])
                 for s in range(-1, end + 1)), default=0)
    return MemoryPlan(offsets, arena, sum(sizes.values()), lower)


def _best_fit(free, top, size) -> tuple[int, int]:
    best = None
    for i, (off, sz) in enumerate(free):
        if sz >= size and (best is None or sz < free[best][1]):
            best = i
    if best is None:
        return top, top + size
    off, sz = free.pop(best)
    if sz > size:
        free.append((off + size, sz - size))
        free.sort()
    return off, top


def _release(free, offset, size) -> None:
    free.append((offset, size))
    free.sort()
    merged = [free[0]]
    for off, sz in free[1:]:
        if merged[-1][0] + merged[-1][1] == off:
            merged[-1] = (merged[-1][0], merged[-1][1] + sz)
        else:
            merged.append((off, sz))
    free[:] = merged
