"""The memory planner, checked from outside: tensors alive at the same dispatch never share
bytes, offsets are aligned, the arena holds every tensor, and the reported figures are right.

Two independent sources of lifetimes, neither of them compiler/memory.py's:
- real models: the schedule as the bundle records it (manifest dispatches, bindings = tensor
  ids, inputs and outputs); which manifest tensors are views of one another comes from the IR
  (Value.alias_of), since the manifest cannot tell a view from a tensor that reuses dead bytes;
- random programs: kernels and Values generated with a seeded RNG, whose lifetimes the
  generator records as it builds them; a brute-force pairwise check judges plan_memory's plan.
"""
from __future__ import annotations
from pathlib import Path

import numpy as np
import pytest

from bundles import read_bundle
from compiler.compile import compile_with_kernels
from compiler.frontend import to_ir
from compiler.ir import Value
from compiler.lower.kernel import Kernel
from compiler.memory import ALIGNMENT, plan_memory
from compiler.passes import fold_constants, run_passes
from tests.onnx_builders import light_model, mlp, mobilenetv2_block, small_cnn

from tests.models.zoo import resnet18  # noqa: E402

MODELS = {"mlp": lambda: mlp(64, 128, 10), "small_cnn": small_cnn, "mobilenetv2_block": mobilenetv2_block,
          "resnet18": lambda: resnet18(resolution=64), "light_squeezenet": lambda: light_model("squeezenet")}


def _allocation(nbytes: int, alignment: int) -> int:
    """The bytes a tensor owns (bundles/FORMAT.md: at least 4, padded to the alignment)."""
    return -(-max(nbytes, 4) // alignment) * alignment


def _overlapping_pairs(items):
    """(a, b) for every two items (key, (first, last), (start, end)) alive at one dispatch whose
    byte ranges meet. Brute force over all pairs."""
    bad = []
    for i, (a, (fa, la), (sa, ea)) in enumerate(items):
        for b, (fb, lb), (sb, eb) in items[i + 1:]:
            if fa <= lb and fb <= la and sa < eb and sb < ea:
                bad.append((a, b))
    return bad


def _peak(items) -> int:
    """The most bytes alive at any one dispatch: no plan can use less."""
    steps = {s for _, (f, last), _ in items for s in (f, last)}
    return max((sum(e - s for _, (f, last), (s, e) in items if f <= step <= last) for step in steps), default=0)


# ---- real models: the bundle's own record ---------------------------------------------------------

def _groups_from_bundle(model, target):
    """{root name: {"first", "last", "offset", "end", "members"}} for the arena tensors of the
    compiled bundle, a group being a tensor and its views (Concat inputs written in place among
    them); plus the manifest."""
    bundle, kernels = compile_with_kernels(model, target=target)
    manifest = read_bundle(bundle).manifest
    tensors, dispatches = manifest["tensors"], manifest["dispatches"]
    assert len(dispatches) == len(kernels)
    n = len(dispatches)

    # Which tensor each manifest id stands for, and its root, from the IR: a dispatch's bindings
    # are its Kernel's Values in order; the inputs and outputs no dispatch binds (a Reshape at
    # the end) are looked up by name in the graph the compiler builds.
    # A view's place is (root name, where it starts in the root, the root's bytes).
    def place(v):
        return v.root().name, v.root_offset(), v.root().nbytes

    root_of: dict[int, tuple] = {}
    for d, k in zip(dispatches, kernels):
        assert len(d["bindings"]) == len(k.bindings)
        for tid, v in zip(d["bindings"], k.bindings):
            assert tensors[tid]["name"] == v.name
            assert root_of.setdefault(tid, place(v)) == place(v), v.name
    graph = run_passes(fold_constants(to_ir(model)))
    by_name = {v.name: v for v in graph.values()}
    for io in manifest["inputs"] + manifest["outputs"]:
        root_of.setdefault(io["tensor"], place(by_name[tensors[io["tensor"]]["name"]]))

    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for step, d in enumerate(dispatches):
        for tid in d["bindings"]:
            first.setdefault(tid, step)
            last[tid] = step
    for io in manifest["inputs"]:
        first[io["tensor"]] = -1  # written by the copy-in before the first dispatch
        last.setdefault(io["tensor"], -1)
    for io in manifest["outputs"]:
        first.setdefault(io["tensor"], n)
        last[io["tensor"]] = n  # read by the copy-out after the last one

    alignment = manifest["memory"]["alignment"]
    groups: dict[str, dict] = {}
    for tid, t in enumerate(tensors):
        if t["memory"] != "arena":
            continue
        assert tid in first, f"arena tensor {t['name']!r} is bound by no dispatch and is no input or output"
        root, inside, root_bytes = root_of[tid]
        g = groups.setdefault(root, {"first": first[tid], "last": last[tid], "offset": t["offset"] - inside,
                                     "end": t["offset"] - inside + _allocation(root_bytes, alignment),
                                     "members": []})
        # A view sits where the IR puts it in its source (a Reshape at 0, a Concat input at its
        # slice); a view and its source are one allocation.
        assert t["offset"] - inside == g["offset"], (t["name"], root)
        assert t["offset"] + t["nbytes"] <= g["end"], (t["name"], root)
        g["first"], g["last"] = min(g["first"], first[tid]), max(g["last"], last[tid])
        g["members"].append(tid)

    # A tensor first touched by a dispatch is written there: the dispatch writes a member.
    for name, g in groups.items():
        if g["first"] >= 0 and g["first"] < n:
            k, d = kernels[g["first"]], dispatches[g["first"]]
            assert any(d["bindings"][i] in g["members"] for i in k.writes), \
                f"{name!r} is first touched by dispatch {g['first']}, which only reads it"
    return groups, manifest


@pytest.mark.parametrize("target", ["generic", "lavapipe"])
@pytest.mark.parametrize("name", MODELS)
def test_bundle_plan_never_overlaps_live_tensors_and_meets_the_bound(name, target):
    groups, manifest = _groups_from_bundle(MODELS[name](), target)
    mem = manifest["memory"]
    assert mem["alignment"] == ALIGNMENT
    items = [(root, (g["first"], g["last"]), (g["offset"], g["end"])) for root, g in groups.items()]
    assert len(items) >= 3
    for root, _, (start, end) in items:
        assert start % mem["alignment"] == 0, (root, start)
        assert end <= mem["arena_bytes"], (root, end, mem["arena_bytes"])
    assert not _overlapping_pairs(items)
    peak = _peak(items)
    assert mem["lower_bound_bytes"] == peak
    assert mem["intermediates_sum_bytes"] == sum(e - s for _, _, (s, e) in items)
    assert peak <= mem["arena_bytes"] <= mem["intermediates_sum_bytes"]
    # Greedy by size reaches the bound on these graphs for the generic profile (measured; a
    # regression shows here). On lavapipe's (im2col and Winograd buffers) it does not everywhere:
    # small_cnn 425984 vs 360448 bytes (+18%), light_squeezenet 4647936 vs 4485376 (+3.6%).
    if target == "generic":
        assert mem["arena_bytes"] == peak
    else:
        assert mem["arena_bytes"] <= 1.25 * peak


# ---- random programs ---------------------------------------------------------------------------

DTYPES = [np.float32, np.float16, np.int8, np.uint8, np.int32, np.int64]


def _random_program(rng):
    """Kernels over random Values: random sizes and dtypes (odd byte counts too), reads of any
    earlier value in any order, views (chains of them too) of inputs and intermediates, a
    constant, outputs that may be inputs or views, and Concats written in place: slices of one
    root (nested ones too), each written by a kernel of its own at some later step, read on
    their own once written, the whole once every slice is. Returns (kernels, inputs, outputs,
    truth) where truth maps id(root) -> (root, first dispatch alive, last dispatch alive) as the
    generator saw it: inputs from -1, outputs to len(kernels), a Concat's root from the first
    write into any of its slices."""
    counter = iter(range(10**6))

    def new(kind: str) -> Value:
        n = int(np.exp(rng.uniform(0, np.log(40000))))
        return Value(f"{kind}{next(counter)}", np.dtype(DTYPES[rng.integers(len(DTYPES))]), (n,))

    const = Value("w", np.dtype(np.float32), (64,), data=np.zeros(64, np.float32))
    inputs = [new("in") for _ in range(rng.integers(1, 4))]
    truth = {id(v): [v, -1, -1] for v in inputs}
    readable = list(inputs)
    kernels = []
    steps = int(rng.integers(1, 40))
    pending: list[Value] = []           # slices not written yet, in the order kernels write them
    wholes: list[tuple[Value, list[Value]]] = []  # (a Concat output, its slices), readable once all are written
    for step in range(steps):
        if not pending and rng.random() < 0.2:
            whole, slices = _random_concat(rng, counter)
            pending += slices
            wholes += [(whole, slices)]
        if rng.random() < 0.3:  # a view (Reshape-like) of something readable
            src = readable[rng.integers(len(readable))]
            size = int(rng.integers(1, src.size + 1)) if rng.random() < 0.5 else src.size
            readable.append(Value(f"view{next(counter)}", src.dtype, (size,), alias_of=src))
        reads = [readable[i] for i in rng.choice(len(readable), size=min(len(readable), int(rng.integers(1, 4))),
                                                 replace=False)]
        if rng.random() < 0.3:
            reads.append(const)
        out = pending.pop(rng.integers(len(pending))) if pending and rng.random() < 0.7 else new("t")
        at = int(rng.integers(len(reads) + 1))
        bindings = reads[:at] + [out] + reads[at:]
        kernels.append(Kernel("random", {}, [], bindings, [at], (1, 1, 1), (1, 1, 1)))
        for v in reads:
            if not v.root().is_constant:
                truth[id(v.root())][2] = step
        truth.setdefault(id(out.root()), [out.root(), step, step])[2] = step
        readable.append(out)
        for whole, slices in list(wholes):
            if not any(p in slices for p in pending):
                readable.append(whole)
                wholes.remove((whole, slices))
    outputs = [readable[i] for i in rng.choice(len(readable), size=min(len(readable), int(rng.integers(1, 3))),
                                               replace=False)]
    for v in outputs:
        truth[id(v.root())][2] = steps
    return kernels, inputs, outputs, truth


def _random_concat(rng, counter) -> tuple[Value, list[Value]]:
    """A float32 Concat output and its slices as place_concat_inputs makes them: views at
    ALIGNMENT-multiple offsets, the last of any size; one slice, sometimes, a nested Concat's
    output with slices of its own (only those leaves are written). Returns (output, leaves)."""
    words = ALIGNMENT // 4

    def sizes(n):
        return [words * int(rng.integers(1, 40)) for _ in range(n - 1)] + [int(rng.integers(1, 40 * words))]

    parts = sizes(int(rng.integers(1, 4)))
    whole = Value(f"cat{next(counter)}", np.dtype(np.float32), (sum(parts),))
    leaves, offset = [], 0
    for n in parts:
        part = Value(f"slice{next(counter)}", whole.dtype, (n,), alias_of=whole, alias_offset=4 * offset)
        if rng.random() < 0.3 and n % words == 0 and n > words:
            first = words * int(rng.integers(1, n // words))
            inner = [first, n - first]
            leaves += [Value(f"slice{next(counter)}", whole.dtype, (m,), alias_of=part, alias_offset=4 * o)
                       for m, o in zip(inner, (0, inner[0]))]
        else:
            leaves.append(part)
        offset += n
    return whole, leaves


def _check_plan(plan, truth) -> list[str]:
    """Everything wrong with a plan, judged by brute force against the generator's lifetimes."""
    problems = []
    if set(plan.offsets) != set(truth):
        problems.append(f"planned {len(plan.offsets)} tensors, expected {len(truth)}")
        return problems
    items = []
    for rid, (v, first, last) in truth.items():
        start = plan.offsets[rid]
        if start % ALIGNMENT:
            problems.append(f"{v.name} at {start}, not a multiple of {ALIGNMENT}")
        items.append((v.name, (first, last), (start, start + _allocation(v.nbytes, ALIGNMENT))))
    problems += [f"{a} and {b} are alive together and share bytes" for a, b in _overlapping_pairs(items)]
    end = max(e for _, _, (_, e) in items)
    if plan.arena_bytes != end:
        problems.append(f"arena_bytes {plan.arena_bytes} != the last tensor's end {end}")
    peak = _peak(items)
    if plan.lower_bound_bytes != peak:
        problems.append(f"lower_bound_bytes {plan.lower_bound_bytes} != the peak of live bytes {peak}")
    if not peak <= plan.arena_bytes:
        problems.append(f"arena_bytes {plan.arena_bytes} below the peak of live bytes {peak}")
    total = sum(e - s for _, _, (s, e) in items)
    if plan.intermediates_sum_bytes != total:
        problems.append(f"intermediates_sum_bytes {plan.intermediates_sum_bytes} != {total}")
    return problems


def test_random_programs_never_overlap_live_tensors():
    rng = np.random.default_rng(20261203)
    checked_pairs = 0
    for case in range(300):
        kernels, inputs, outputs, truth = _random_program(rng)
        plan = plan_memory(kernels, inputs, outputs)
        problems = _check_plan(plan, truth)
        assert not problems, f"random program {case}:\n  " + "\n  ".join(problems)
        lives = [(f, last) for _, f, last in truth.values()]
        checked_pairs += sum(a[0] <= b[1] and b[0] <= a[1] for i, a in enumerate(lives) for b in lives[i + 1:])
    assert checked_pairs > 1000  # the programs do keep many tensors alive together


def test_the_random_check_catches_a_broken_plan():
    """The checker itself: plans that put live tensors on one another, misalign, or misreport
    the arena are rejected."""
    from dataclasses import replace

    rng = np.random.default_rng(7)
    kernels, inputs, outputs, truth = _random_program(rng)
    while len(truth) < 4:
        kernels, inputs, outputs, truth = _random_program(rng)
    plan = plan_memory(kernels, inputs, outputs)
    assert not _check_plan(plan, truth)
    assert _check_plan(replace(plan, offsets={r: 0 for r in plan.offsets}), truth)
    assert _check_plan(replace(plan, offsets={r: o + 4 for r, o in plan.offsets.items()}), truth)
    assert _check_plan(replace(plan, arena_bytes=plan.arena_bytes + ALIGNMENT), truth)
