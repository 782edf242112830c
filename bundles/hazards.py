"""Barriers: where a schedule needs one (FORMAT.md, "Barriers"). One rule, two users: the compiler
places barriers with `required_barriers`, and the reader refuses a bundle whose `barrier` flags do
not cover it (`check_barriers`), so the two cannot disagree.

A barrier before dispatch i is a compute -> compute execution and memory dependency: everything the
dispatches before it read or wrote is done and visible before dispatch i starts. Between two
barriers nothing is ordered, so a dispatch needs one before it when, since the last barrier (or the
start of the schedule), an earlier dispatch

- wrote bytes it reads (read after write),
- read bytes it writes (write after read), or
- wrote bytes it writes (write after write),

where "bytes" are exactly the ranges the runtime binds (`bound_range`) of the same buffer (the arena
or the weights) and "writes" is every binding the module's SPIR-V may write (`Module.written_bindings`:
storage buffers not declared NonWritable), never what the manifest or the compiler says.
Only the standard library here (bundles may import stdlib + numpy).
"""
from __future__ import annotations

from typing import NamedTuple

from .manifest import BundleError

EMPTY_BINDING_BYTES = 4  # a zero-length descriptor range is invalid: an empty tensor binds these
KINDS = {(True, False): "read after write", (False, True): "write after read", (True, True): "write after write"}


def bound_range(tensor: dict) -> tuple[int, int]:
    """[start, end) of the bytes of its buffer that a runtime binds for a (validated) tensor: its own
    bytes, or for an empty tensor the first EMPTY_BINDING_BYTES of its buffer (never touched by a
    kernel, as the tensor has no elements, but bound, and so seen by synchronization validation)."""
    n = tensor["nbytes"]
    return (tensor["offset"], tensor["offset"] + n) if n else (0, EMPTY_BINDING_BYTES)


class Access(NamedTuple):
    """One binding of one dispatch: which bytes of which buffer, and whether it may write them."""
    dispatch: int
    binding: int
    tensor: int
    memory: str          # "arena" or "weights"
    start: int
    end: int
    write: bool


class Hazard(NamedTuple):
    """`later` touches bytes `earlier` touched, one of them writing, with no barrier between."""
    earlier: Access
    later: Access

    @property
    def kind(self) -> str:
        return KINDS[(self.earlier.write, self.later.write)]

    def describe(self, tensors: list | None = None) -> str:
        def side(a: Access, verb: str) -> str:
            name = f" {str(tensors[a.tensor].get('name', ''))[:60]!r}" if tensors else ""
            return (f"dispatch {a.dispatch} binding {a.binding} (tensor {a.tensor}{name}, {a.memory} bytes "
                    f"[{a.start}, {a.end})) {verb}")
        e, l = self.earlier, self.later
        return (f"{side(l, 'writes' if l.write else 'reads')} bytes that {side(e, 'wrote' if e.write else 'read')}, "
                f"with no barrier between them ({self.kind}): dispatches[{l.dispatch}].barrier must be true")


def dispatch_accesses(manifest: dict, written: list) -> list[list[Access]]:
    """Per dispatch, its bindings as Accesses. `manifest` has passed validate_manifest (tensors,
    kernels, modules and dispatches are consistent); `written[m]` is the set of bindings module m may
    write (from its SPIR-V)."""
    tensors, kernels = manifest["tensors"], manifest["kernels"]
    out = []
    for i, d in enumerate(manifest["dispatches"]):
        writes = written[kernels[d["kernel"]]["module"]]
        row = []
        for b, t in enumerate(d["bindings"]):
            start, end = bound_range(tensors[t])
            row.append(Access(i, b, t, tensors[t]["memory"], start, end, b in writes))
        out.append(row)
    return out


class _SinceBarrier:
    """The accesses made since the last barrier, per buffer."""

    def __init__(self):
        self.by_memory: dict[str, list[Access]] = {}

    def hazard(self, accesses: list[Access]) -> Hazard | None:
        for a in accesses:
            for p in self.by_memory.get(a.memory, ()):
                if (a.write or p.write) and p.start < a.end and a.start < p.end:
                    return Hazard(p, a)
        return None

    def add(self, accesses: list[Access]) -> None:
        for a in accesses:
            self.by_memory.setdefault(a.memory, []).append(a)


def required_barriers(accesses: list[list[Access]]) -> list[bool]:
    """The fewest barrier flags that cover the rule for these dispatches (a barrier only where one is
    needed; the first dispatch never needs one)."""
    since, flags = _SinceBarrier(), []
    for row in accesses:
        need = since.hazard(row) is not None
        if need:
            since = _SinceBarrier()
        flags.append(need)
        since.add(row)
    return flags


def uncovered(accesses: list[list[Access]], barriers: list[bool]) -> list[Hazard]:
    """Every dispatch's first hazard that the given barrier flags leave uncovered (a flag on the
    first dispatch changes nothing: nothing runs before it in the schedule)."""
    since, found = _SinceBarrier(), []
    for i, (row, barrier) in enumerate(zip(accesses, barriers)):
        if barrier and i:
            since = _SinceBarrier()
        else:
            h = since.hazard(row)
            if h is not None:
                found.append(h)
        since.add(row)
    return found


def check_barriers(manifest: dict, written: list) -> None:
    """Raise BundleError('barriers') if the manifest's barrier flags do not cover the rule."""
    found = uncovered(dispatch_accesses(manifest, written), [d["barrier"] for d in manifest["dispatches"]])
    if found:
        more = f"; and {len(found) - 3} more dispatch(es)" if len(found) > 3 else ""
        raise BundleError("barriers", "; ".join(h.describe(manifest["tensors"]) for h in found[:3]) + more)
