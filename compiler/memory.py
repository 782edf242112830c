"""The memory plan: every intermediate gets an offset in one arena from its liveness.

Events are dispatch indices. A tensor lives from the dispatch that writes it (graph inputs: from
the start) to the last dispatch that reads it or any view of it (graph outputs: to the end), both
ends included, so no dispatch writes over its own inputs. Views are planned with their root: a
Concat input written in place is a slice of the Concat's output, which therefore lives from the
first write into any of its slices. Lifetimes are all known at compile time, so placement is
offline: largest tensor first, each at the lowest offset that no tensor alive at the same time
occupies (TFLite's greedy-by-size). A bundle state's bytes (compiler/state.py) live across runs:
they are not in the arena but in the state buffer, one after another.
"""
from __future__ import annotations

from dataclasses import dataclass, field

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
    state_offsets: dict[int, int] = field(default_factory=dict)   # id(root Value) -> state offset
    state_bytes: int = 0

    def memory_of(self, v: Value) -> str:
        """"state" or "arena": where a non-constant Value's bytes are."""
        return "state" if id(v.root()) in self.state_offsets else "arena"

    def offset_of(self, v: Value) -> int:
        """Offset of a non-constant Value in its buffer: its root's, plus where it starts in the root."""
        root = id(v.root())
        offsets = self.state_offsets if root in self.state_offsets else self.offsets
        return offsets[root] + v.root_offset()


def plan_memory(kernels, graph_inputs: list[Value], graph_outputs: list[Value], state=()) -> MemoryPlan:
    """`state`: the Values held between runs (their roots get state bytes, not arena bytes)."""
    state_offsets, state_bytes = {}, 0
    for v in state:
        state_offsets[id(v.root())] = state_bytes
        state_bytes += align(max(v.root().nbytes, 4))
    end = len(kernels)
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    roots: dict[int, Value] = {}

    def touch(v: Value, step: int, writing: bool) -> None:
        r = v.root()
        if r.is_constant or id(r) in state_offsets:
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
    live = {rid: (first.get(rid, -1), last[rid]) for rid in roots}
    # Greedy by size: the biggest tensors are placed first, each at the lowest offset where it
    # overlaps no placed tensor whose lifetime meets its own.
    placed: list[tuple[int, int, int]] = []  # (offset, end, rid)
    offsets: dict[int, int] = {}
    for rid in sorted(roots, key=lambda r: (-sizes[r], live[r])):
        lo, hi = live[rid]
        busy = sorted((o, e) for o, e, other in placed
                      if live[other][0] <= hi and lo <= live[other][1])
        offset = 0
        for b0, b1 in busy:
            if b0 - offset >= sizes[rid]:
                break
            offset = max(offset, b1)
        offsets[rid] = offset
        placed.append((offset, offset + sizes[rid], rid))
    arena = max((offsets[r] + sizes[r] for r in offsets), default=0)
    lower = max((sum(sizes[r] for r in roots if first.get(r, -1) <= s <= last[r])
                 for s in range(-1, end + 1)), default=0)
    return MemoryPlan(offsets, arena, sum(sizes.values()), lower, state_offsets, state_bytes)
