"""Fuzz the .vkb readers with mutations of a real compiled bundle (Gemm + Relu + Softmax): the
single-variant bundle (4 KiB and 16 KiB weights alignment) and a format 1.2 bundle of two variants
(profiles generic and lavapipe, sharing modules and weights).

Seeded and reproducible: VKC_FUZZ_SEED (default 1), VKC_FUZZ_N mutations (default 10,000),
VKC_FUZZ_RUNS distinct accepted bundles run on the device at most (default 400, more than the
default seed needs), in VKC_FUZZ_RUNNERS child processes (default 2).

Every mutation must
1. make the Python reader (`read_bundle`) raise BundleError or return a bundle: no other exception;
2. get the same verdict from the C reader (`vkb_reader.h`, built with the system compiler, with
   AddressSanitizer + UBSan where available) as from the Python container checks
   (`check_container`): both accept, or both reject naming the same check; when both accept, the
   C reader hands out the same manifest, module and weights ranges;
3. when accepted, run correctly: loaded by runtime_min (its defaults: robustBufferAccess on; a
   private pipeline cache) with the validation layer on and run once, in a child process,
   it raises nothing and the layer reports nothing; and if the mutation left everything the
   runtime computes with unchanged (`runtime_view` below: only informational fields, JSON
   formatting, table order, flags, reserved bits, minor version or weights alignment changed) the
   outputs are bit-identical to the unmutated bundle's. Other accepted bundles (a weight changed and
   re-sealed, a specialization constant or a dispatch's groups set to another valid value) are
   different valid models: they must run cleanly, their outputs may differ. The one allowed refusal
   is the runtime's device check (VkcRuntimeError "... can run this bundle: device ... lacks: ..."),
   for a valid bundle that asks more of the device than it has (e.g. a 4 GiB arena); it is
   counted apart. Accepted bundles with the same runtime_view are run once (the runtime sees the
   same input, so it does the same thing).

Mutation families: raw byte edits (bit flips, random bytes, truncation, extension, header and table
fields set to edge values, section-table entries swapped, slices moved), the same edits re-sealed
(checksums recomputed so the deeper checks see them), manifest edits re-sealed (fields set to huge,
negative or wrongly typed values, nudged by small amounts, deleted, duplicated, swapped,
requirements understated, unknown keys added), and weights edits re-sealed.
Re-sealing never re-seals a SPIR-V section whose bytes are not one of the original modules: the
reader checks SPIR-V framing and its interface with the manifest, but it is not spirv-val, so a
re-sealed arbitrary module is code we cannot vouch for and it never reaches the driver.
"""
import copy
import hashlib
import json
import os
import random
import struct
import subprocess
import sys
import time
import zlib
from pathlib import Path

import numpy as np
import pytest
from onnx import helper

from tests.bundles import c_reader
from bundles import BundleError, read_bundle, write_bundle
from bundles.manifest import variant_views

SEED = int(os.environ.get("VKC_FUZZ_SEED", "1"))
N = int(os.environ.get("VKC_FUZZ_N", "10000"))
SPIRV_N = int(os.environ.get("VKC_FUZZ_SPIRV_N", "150"))   # SPIR-V word edits (test_spirv_edits_refused)
RUN_CAP = int(os.environ.get("VKC_FUZZ_RUNS", "400"))
RUNNERS = int(os.environ.get("VKC_FUZZ_RUNNERS", "2"))      # device runs in this many child processes
HERE = Path(__file__).resolve().parent

HEADER_FIELDS = [(8, "H"), (10, "H"), (12, "I"), (16, "I"), (20, "I"), (24, "Q")]
ENTRY_FIELDS = [(0, "I"), (4, "I"), (8, "Q"), (16, "Q"), (24, "I"), (28, "I")]
JUNK = [None, True, False, -1, -4096, -2**31 - 1, 0, 1, 3, 2**31, 2**32, 2**48, 2**53 + 1, 2**63, 2**64,
        10**30, 10**400, 1.5, -0.0, float("nan"), float("inf"), "", "x", "float32", "weights", "arena",
        [], [0], [1, 1, 1], [2**31, 1, 1], [-1], {}, {"name": "x"}, "\u00e9\U0001F600"]


# ---- the base bundle -------------------------------------------------------------------------

class Base:
    def __init__(self, data: bytes):
        self.data = data
        with read_bundle(data) as b:
            self.manifest = b.manifest
            self.modules = [bytes(m) for m in b.spirv]
            self.weights = bytes(b.weights)
            self.weights_alignment = b.sections[-1].alignment
            self.sections = b.sections
        self.spirv_ranges = [(s.offset, s.end) for s in self.sections if s.kind == 2]
        self.weights_range = next((s.offset, s.end) for s in self.sections if s.kind == 3)
        self.table_end = 32 + 32 * len(self.sections)


def tiny_model():
    from tests.onnx_builders import init, make_model, tensor_info
    rng = np.random.default_rng(0)
    w, b = rng.standard_normal((16, 8)).astype(np.float32), rng.standard_normal(8).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["x", "W", "B"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
         helper.make_node("Softmax", ["r"], ["y"], axis=1)],
        "tiny", [tensor_info("x", [2, 16])], [tensor_info("y", [2, 8])], [init("W", w), init("B", b)])
    return make_model(graph)


@pytest.fixture(scope="module")
def bases():
    from compiler import compile_model
    data = compile_model(tiny_model(), target="generic")
    base = Base(data)
    page16 = Base(write_bundle(base.manifest, base.modules, base.weights, weights_alignment=16384))
    variants = Base(compile_model(tiny_model(), target="generic,lavapipe"))
    assert variants.manifest["variants"]
    return [base, page16, variants]


# ---- mutations -------------------------------------------------------------------------------

def seal(buf: bytearray, base: Base, *, file_size=False) -> bytes:
    """Recompute section checksums (except a SPIR-V section that is not an original module) and
    the header checksum, so a mutation reaches the checks behind them."""
    if len(buf) < 32:
        return bytes(buf)
    if file_size:
        struct.pack_into("<Q", buf, 24, len(buf))
    count = struct.unpack_from("<I", buf, 16)[0]
    for i in range(min(count, (len(buf) - 32) // 32)):
        at = 32 + 32 * i
        kind, _, offset, size = struct.unpack_from("<IIQQ", buf, at)
        if offset + size <= len(buf):
            payload = bytes(buf[offset:offset + size])
            if kind == 2 and payload not in base.modules:
                continue
            struct.pack_into("<I", buf, at + 24, zlib.crc32(payload))
    table = bytes(buf[32:32 + 32 * count])
    struct.pack_into("<I", buf, 20, zlib.crc32(table, zlib.crc32(bytes(buf[:20]))))
    return bytes(buf)


def _edge_values(rng, original: int, length: int, width: int) -> int:
    choice = rng.choice([0, 1, 2, 3, 4, 5, 8, 15, 16, 17, 255, 256, 4095, 4096, 4097, 16384, 2**31 - 1, 2**31,
                         2**32 - 1, 2**32, 2**63, 2**64 - 1, length, length - 1, length + 1,
                         original + 1, original - 1, original + 16, original - 16, original * 2, original // 2])
    return choice % (1 << (8 * width))


def byte_edit(rng: random.Random, base: Base, resealable: bool) -> tuple[str, bytearray]:
    buf = bytearray(base.data)
    count = len(base.sections)

    def position():
        if rng.random() < 0.5:
            return rng.randrange(base.table_end)
        at = rng.randrange(len(buf))
        if resealable and any(a <= at < b for a, b in base.spirv_ranges) and rng.random() < 0.8:
            at = rng.randrange(base.spirv_ranges[0][0])  # mostly spend re-sealed edits outside SPIR-V
        return at

    op = rng.choice(["bitflip", "bytes", "truncate", "extend", "field", "swap", "kindswap", "slice"])
    if op == "bitflip":
        for _ in range(rng.randint(1, 8)):
            buf[position()] ^= 1 << rng.randrange(8)
    elif op == "bytes":
        for _ in range(rng.randint(1, 4)):
            buf[position()] = rng.randrange(256)
    elif op == "truncate":
        del buf[rng.choice([rng.randrange(len(buf)), len(buf) - rng.randint(1, 16), rng.randrange(64)]):]
    elif op == "extend":
        extra = rng.choice([bytes(rng.randint(1, 4096)), bytes(rng.randrange(256) for _ in range(rng.randint(1, 64)))])
        buf += extra
    elif op == "field":
        if rng.random() < 0.3:
            at, fmt = rng.choice(HEADER_FIELDS)
        else:
            off, fmt = rng.choice(ENTRY_FIELDS)
            at = 32 + 32 * rng.randrange(count) + off
        width = struct.calcsize(fmt)
        original = struct.unpack_from("<" + fmt, buf, at)[0]
        struct.pack_into("<" + fmt, buf, at, _edge_values(rng, original, len(buf), width))
    elif op == "swap":
        i, j = rng.sample(range(count), 2)
        a, b = bytes(buf[32 + 32 * i:64 + 32 * i]), bytes(buf[32 + 32 * j:64 + 32 * j])
        buf[32 + 32 * i:64 + 32 * i], buf[32 + 32 * j:64 + 32 * j] = b, a
    elif op == "kindswap":
        i, j = rng.sample(range(count), 2)
        ki, kj = (struct.unpack_from("<I", buf, 32 + 32 * k)[0] for k in (i, j))
        struct.pack_into("<I", buf, 32 + 32 * i, kj)
        struct.pack_into("<I", buf, 32 + 32 * j, ki)
    else:
        a, b = sorted(rng.randrange(len(buf)) for _ in range(2))
        to = rng.randrange(len(buf))
        buf[to:to] = buf[a:b]
    return op, buf


def _paths(tree, path=()):
    yield path, tree
    items = tree.items() if isinstance(tree, dict) else enumerate(tree) if isinstance(tree, list) else ()
    for key, child in items:
        yield from _paths(child, path + (key,))


INFORMATIONAL = [("model", "name"), ("model", "producer"), ("model", "source_sha256"), ("target", "name"),
                 ("memory", "intermediates_sum_bytes"), ("memory", "lower_bound_bytes")]


def manifest_edit(rng: random.Random, base: Base) -> tuple[str, bytes]:
    m = copy.deepcopy(base.manifest)
    ops = []
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        nodes = [p for p, _ in _paths(m) if p]
        path = rng.choice(nodes)
        parent = m
        for key in path[:-1]:
            parent = parent[key]
        key, value = path[-1], parent[path[-1]]
        r = rng.random()
        if r < 0.38:
            ops.append("junk")
            parent[key] = copy.deepcopy(rng.choice(JUNK))
        elif r < 0.62:
            ints = [(p, v) for p, v in _paths(m) if p and isinstance(v, int) and not isinstance(v, bool)]
            path, value = rng.choice(ints)
            parent = m
            for k in path[:-1]:
                parent = parent[k]
            ops.append("nudge")
            parent[path[-1]] = rng.choice([value + 1, value - 1, value + 4, value - 4, value + 256, value - 256,
                                           value * 2, value // 2, -value, value + 2**32])
        elif r < 0.69 and isinstance(parent, dict):
            ops.append("delete")
            del parent[key]
        elif r < 0.75 and isinstance(parent, list):
            ops.append("duplicate")
            parent.insert(rng.randrange(len(parent) + 1), copy.deepcopy(value))
        elif r < 0.80 and isinstance(parent, list) and len(parent) > 1:
            ops.append("swap")
            i, j = rng.sample(range(len(parent)), 2)
            parent[i], parent[j] = parent[j], parent[i]
        elif r < 0.86:
            ops.append("understate")
            req = m.get("requirements") if isinstance(m.get("requirements"), dict) else {}
            if req:
                k = rng.choice(sorted(req))
                v = req[k]
                if isinstance(v, int) and not isinstance(v, bool):
                    req[k] = rng.choice([0, 1, v // 2, v - 1])
                elif isinstance(v, list) and v and all(isinstance(x, int) for x in v):
                    req[k] = [max(x // 2, 1) for x in v]
        elif r < 0.93:
            ops.append("unknown-key")
            dicts = [d for _, d in _paths(m) if isinstance(d, dict)]
            rng.choice(dicts)[rng.choice(["future", "x_vendor", "layout", "_comment"])] = rng.choice(JUNK[:20])
        else:
            ops.append("informational")
            where = rng.choice(INFORMATIONAL)
            if isinstance(m.get(where[0]), dict):
                m[where[0]][where[1]] = rng.choice(["renamed", "", "\u00e9t\u00e9", 12345, 0]) \
                    if "bytes" not in where[1] else rng.choice([0, 7, 2**40])
    style = rng.choice([{"separators": (",", ":")}, {"indent": 1}, {"sort_keys": True}, {"ensure_ascii": False}])
    text = json.dumps(m, **style).encode("utf-8")
    sections = [(1, 8, text)] + [(2, 16, mod) for mod in base.modules] + [(3, base.weights_alignment, base.weights)]
    return "manifest:" + "+".join(ops), assemble(sections)


def weights_edit(rng: random.Random, base: Base) -> tuple[str, bytes]:
    weights = bytearray(base.weights)
    for _ in range(rng.randint(1, 8)):
        at = rng.randrange(len(weights) // 4) * 4
        value = rng.choice([0.0, -1.0, 1e30, -1e30, float("inf"), float("nan"), rng.gauss(0, 3)])
        struct.pack_into("<f", weights, at, value)
    sections = [(1, 8, json.dumps(base.manifest).encode())] + [(2, 16, mod) for mod in base.modules]
    return "weights", assemble(sections + [(3, base.weights_alignment, bytes(weights))])


def assemble(sections) -> bytes:
    """A bundle laid out from FORMAT.md (independent of bundles.write_bundle, which refuses bad manifests)."""
    pos, table, pieces = 32 + 32 * len(sections), [], []
    for kind, align, data in sections:
        offset = -(-pos // align) * align
        pieces += [bytes(offset - pos), data]
        table.append(struct.pack("<IIQQII", kind, align, offset, len(data), zlib.crc32(data), 0))
        pos = offset + len(data)
    table = b"".join(table)
    head = struct.pack("<8sHHII", b"VKCBNDL\0", 1, 0, 0, len(sections))
    checksum = zlib.crc32(table, zlib.crc32(head))
    return head + struct.pack("<IQ", checksum, pos) + table + b"".join(pieces)


# ---- SPIR-V word edits, re-sealed: code the reader cannot vouch for -----------------------------
# Each edit makes the module invalid by construction, so both loaders must refuse every one: the
# reader (framing, interface) or the runtime's SPIR-V validation, before a driver sees it.
OP_TYPE_FIRST, OP_TYPE_LAST = 19, 38   # OpTypeVoid .. OpTypePipe: result id in word 1, no result type
UNASSIGNED_OPCODES = (0x7FFF, 0xA000, 0xBEEF, 0xFFFF)


def _instructions(words) -> list[tuple[int, int, int]]:
    """(word index, word count, opcode) of each instruction after the 5-word header."""
    out, i = [], 5
    while i < len(words) and words[i] >> 16:
        out.append((i, words[i] >> 16, words[i] & 0xFFFF))
        i += words[i] >> 16
    return out


def spirv_edit(rng: random.Random, base: Base) -> tuple[str, bytes]:
    """One module's words edited (an opcode made unassigned, a type's result id made a duplicate,
    the id bound made too small, an instruction's word count broken), every checksum recomputed."""
    k = rng.randrange(len(base.modules))
    words = list(struct.unpack(f"<{len(base.modules[k]) // 4}I", base.modules[k]))
    insts = _instructions(words)
    op = rng.choice(["opcode", "duplicate-id", "bound", "word-count"])
    if op == "opcode":
        at = rng.choice(insts)[0]
        words[at] = (words[at] & 0xFFFF0000) | rng.choice(UNASSIGNED_OPCODES)
    elif op == "duplicate-id":
        types = [i for i, n, code in insts if OP_TYPE_FIRST <= code <= OP_TYPE_LAST and n >= 2]
        first, second = sorted(rng.sample(types, 2))
        words[second + 1] = words[first + 1]
    elif op == "bound":
        words[3] = rng.choice([1, 2, max(words[3] // 2, 1), words[3] - 1])
    else:
        at, count, code = rng.choice(insts)
        words[at] = (rng.choice([0, 1]) if count > 1 else 0) << 16 | code
    modules = list(base.modules)
    modules[k] = struct.pack(f"<{len(words)}I", *words)
    sections = [(1, 8, json.dumps(base.manifest).encode())] + [(2, 16, mod) for mod in modules]
    return f"spirv:{op}", assemble(sections + [(3, base.weights_alignment, base.weights)])


BASE_WEIGHTS = {1: (1,), 2: (0.8, 0.2), 3: (0.65, 0.15, 0.2)}


def mutate(rng: random.Random, bases: list[Base]) -> tuple[str, bytes, int]:
    """One mutation that changes at least one byte (edits that happen to change nothing are redrawn),
    and the index of the base it mutated."""
    while True:
        # Mostly the single-variant 4 KiB bundle; then 16 KiB pages, and the two-variant bundle.
        k = rng.choices(range(len(bases)), BASE_WEIGHTS[len(bases)])[0]
        base = bases[k]
        r = rng.random()
        if r < 0.38:
            op, buf = byte_edit(rng, base, resealable=False)
            family, data = f"raw:{op}", bytes(buf)
        elif r < 0.61:
            op, buf = byte_edit(rng, base, resealable=True)
            family, data = f"sealed:{op}", seal(buf, base, file_size=op in ("truncate", "extend", "slice"))
        elif r < 0.98:
            family, data = manifest_edit(rng, base)
        else:
            family, data = weights_edit(rng, base)
        if data != base.data:
            return family, data, k


# ---- what the runtime computes with ----------------------------------------------------------

def runtime_view(bundle) -> str:
    """A digest of everything that decides the runtime's numbers: the manifest without its
    informational parts (FORMAT.md: model, target, names of tensors/modules/kernels, nodes, flops,
    bytes, intermediates_sum_bytes, lower_bound_bytes, requirements, shared_memory_bytes, unknown
    keys), the SPIR-V modules and the weights. In a bundle with variants, each variant's, with its
    target (name and match: they pick the variant that runs)."""
    if "variants" in bundle.manifest:
        views = variant_views(bundle.manifest)
        keep = [[_kept(v), v["target"]] for v in views]
    else:
        keep = _kept(bundle.manifest)
    h = hashlib.sha256(json.dumps(keep, sort_keys=True).encode())
    for module in bundle.spirv:
        h.update(hashlib.sha256(module).digest())
    h.update(hashlib.sha256(bundle.weights).digest())
    return h.hexdigest()


def _kept(m: dict) -> dict:
    """What the runtime computes with, of a flat manifest (or a variant's view)."""
    return {
        "memory": {k: m["memory"][k] for k in ("alignment", "arena_bytes", "weights_bytes")},
        "tensors": [{k: t[k] for k in ("dtype", "shape", "memory", "offset", "nbytes")} for t in m["tensors"]],
        "inputs": [{k: x[k] for k in ("name", "tensor")} for x in m["inputs"]],
        "outputs": [{k: x[k] for k in ("name", "tensor")} for x in m["outputs"]],
        "modules": [{k: x[k] for k in ("bindings", "local_size")} for x in m["modules"]],
        "kernels": [{"module": k["module"], "specialization": [{f: s[f] for f in ("id", "type", "value")}
                                                               for s in k["specialization"]]}
                    for k in m["kernels"]],
        "dispatches": [{k: d[k] for k in ("kernel", "bindings", "groups", "barrier")} for d in m["dispatches"]],
    }


# ---- the test --------------------------------------------------------------------------------

@pytest.mark.timeout(600)  # its runners' limit is 300 s
def test_fuzz(bases, c_checker, tmp_path, fuzz_report):
    exe, c_build = c_checker
    started = time.perf_counter()
    rng = random.Random(SEED)
    original_views = [runtime_view(read_bundle(b.data)) for b in bases]
    modules = {m for b in bases for m in b.modules}
    counts = {"rejected": 0, "accepted": 0}
    by_check: dict[str, int] = {}
    by_family: dict[str, list[int]] = {}    # family -> [tried, rejected]
    python_errors, disagreements = [], []
    agreed = 0
    to_run: dict[str, dict] = {}            # runtime view -> first accepted bundle with it
    accepted_views: list[str] = []
    batch: list[tuple[int, bytes, str]] = []

    def flush():
        nonlocal agreed
        lines = c_reader.run(exe, [data for _, data, _ in batch])
        for (i, data, py), line in zip(batch, lines):
            if c_reader.c_verdict(line) == py:
                agreed += 1
            else:
                disagreements.append(f"mutation {i}: python {py!r} vs C {line[:300]!r}")
        batch.clear()

    for i in range(N):
        family, data, k = mutate(rng, bases)
        stats = by_family.setdefault(family.split("+")[0], [0, 0])
        stats[0] += 1
        try:
            bundle = read_bundle(data)
        except BundleError as e:
            counts["rejected"] += 1
            stats[1] += 1
            by_check[e.check] = by_check.get(e.check, 0) + 1
        except Exception as e:  # noqa: BLE001 - the failure message is the point
            python_errors.append(f"mutation {i} ({family}): {type(e).__name__}: {e}"[:500])
        else:
            counts["accepted"] += 1
            assert all(bytes(m) in modules for m in bundle.spirv), f"mutation {i}: altered SPIR-V accepted"
            view = runtime_view(bundle)
            accepted_views.append(view)
            if view not in to_run:
                to_run[view] = {"id": i, "family": family, "data": data, "base": k,
                                "identical": view == original_views[k]}
            bundle.close()
        batch.append((i, data, c_reader.python_verdict(data)))
        if len(batch) == 1000:
            flush()
    if batch:
        flush()
    check_time = time.perf_counter() - started

    # Run the distinct accepted bundles (those equivalent to the original first), in a child process.
    jobs_dir = tmp_path / "accepted"
    jobs_dir.mkdir()
    for k, base in enumerate(bases):
        (jobs_dir / f"base{k}.vkb").write_bytes(base.data)
    chosen = sorted(to_run.values(), key=lambda j: (not j["identical"], j["id"]))[:RUN_CAP]
    jobs = []
    for job in chosen:
        path = jobs_dir / f"{job['id']}.vkb"
        path.write_bytes(job["data"])
        jobs.append({"id": job["id"], "path": str(path), "identical": job["identical"],
                     "reference": str(jobs_dir / f"base{job['base']}.vkb")})
    specs = []
    for k in range(RUNNERS):
        specs.append(jobs_dir / f"jobs{k}.json")
        specs[-1].write_text(json.dumps({"jobs": jobs[k::RUNNERS]}))
    results, in_flight = run_jobs(specs, timeout=300)
    ran_ok = {r["id"] for r in results if r["status"] == "ran" and not r["messages"]
              and (r["identical"] or not by_id(jobs, r["id"])["identical"])}
    refused = {r["id"] for r in results if r["status"] == "refused" and not r["messages"]}
    run_failures = [r for r in results if r["id"] not in ran_ok | refused]
    id_of_view = {v: j["id"] for v, j in to_run.items()}
    ran_correctly = sum(id_of_view[v] in ran_ok for v in accepted_views)
    device_refused = sum(id_of_view[v] in refused for v in accepted_views)
    not_run = counts["accepted"] - ran_correctly - device_refused - sum(
        id_of_view[v] in {r["id"] for r in run_failures} for v in accepted_views)
    other = len(python_errors) + len(disagreements) + len(run_failures) + len(in_flight or [])

    fuzz_report += [
        f"seed {SEED}: {N} mutations in {time.perf_counter() - started:.1f} s "
        f"(readers {check_time:.1f} s); C reader: {c_build}",
        f"rejected (BundleError) {counts['rejected']}; accepted {counts['accepted']} "
        f"({len(to_run)} distinct runtime views, {len(jobs)} run on the device)",
        f"accepted and ran correctly {ran_correctly} "
        f"(bit-identical: {sum(id_of_view[v] in ran_ok and v in original_views for v in accepted_views)}); "
        f"refused by the runtime's device check {device_refused}; not run (over VKC_FUZZ_RUNS) {not_run}; "
        f"anything else {other}",
        f"C/Python container verdicts agree on {agreed} of {N}",
        "by family (tried/rejected): " + ", ".join(f"{k} {v[0]}/{v[1]}" for k, v in sorted(by_family.items())),
        "rejections by check: " + ", ".join(f"{k} {v}" for k, v in sorted(by_check.items(), key=lambda kv: -kv[1])),
    ]
    problems = python_errors[:10] + disagreements[:10] + [json.dumps(r)[:600] for r in run_failures[:10]]
    if in_flight is not None:
        problems.append(f"a runner crashed or hung while running mutation(s) {in_flight}")
    assert not problems, "\n".join(problems)
    assert agreed == N and other == 0
    assert counts["rejected"] + counts["accepted"] == N
    assert ran_correctly > 0 and counts["rejected"] > N // 2
    assert any(j["identical"] for j in jobs) and any(not j["identical"] for j in jobs)


def test_spirv_edits_refused(bases, tmp_path, fuzz_report):
    """SPIR-V word edits re-sealed (spirv_edit): the reader refuses some (framing, interface); every
    other one reaches runtime_min's load, in a child process, which must refuse it by SPIR-V
    validation, naming the module, before any driver sees it (lavapipe segfaulted on these)."""
    rng = random.Random(SEED)
    by_reader, jobs, seen = {}, [], set()
    jobs_dir = tmp_path / "spirv"
    jobs_dir.mkdir()
    (jobs_dir / "base0.vkb").write_bytes(bases[0].data)
    for i in range(SPIRV_N):
        family, data = spirv_edit(rng, bases[0])
        try:
            read_bundle(data).close()
        except BundleError as e:
            by_reader[e.check] = by_reader.get(e.check, 0) + 1
            continue
        if data not in seen:
            seen.add(data)
            path = jobs_dir / f"{i}.vkb"
            path.write_bytes(data)
            jobs.append({"id": i, "family": family, "path": str(path), "identical": False,
                         "reference": str(jobs_dir / "base0.vkb")})
    specs = []
    for k in range(RUNNERS):
        specs.append(jobs_dir / f"jobs{k}.json")
        specs[-1].write_text(json.dumps({"jobs": jobs[k::RUNNERS]}))
    results, in_flight = run_jobs(specs, timeout=300)
    assert in_flight is None, f"a runner crashed or hung on mutation(s) {in_flight}"
    wrong = [r for r in results if r["status"] != "invalid" or not r["detail"].startswith(
        "bundle check 'spirv validation' failed: module ") or "\n" in r["detail"] or r["messages"]]
    fuzz_report.append(f"SPIR-V word edits (seed {SEED}): {SPIRV_N}, refused by the reader {by_reader}; "
                       f"{len(jobs)} distinct others refused by runtime_min's SPIR-V validation: "
                       f"{sum(r['status'] == 'invalid' for r in results)}")
    assert len(results) == len(jobs) and jobs, (len(results), len(jobs))
    assert not wrong, json.dumps(wrong[:5])[:3000]


def by_id(jobs, i):
    return next(j for j in jobs if j["id"] == i)


def run_jobs(specs: list[Path], timeout: float) -> tuple[list[dict], list[tuple] | None]:
    """Run fuzz_runner.py once per spec, concurrently; returns (results, (job id in flight, exit
    status, stderr) for each runner that crashed or hung, or None)."""
    env = {k: v for k, v in os.environ.items() if k not in ("VKC_VALIDATION", "VKC_ROBUST", "VKC_DEVICE")}
    env["VKC_CACHE_DIR"] = str(specs[0].parent / "cache")  # the runtime's defaults, and a private pipeline cache
    env["PYTHONPATH"] = str(HERE.parents[1])  # the repository root: the runner imports runtime_min
    procs = [subprocess.Popen([sys.executable, str(HERE / "fuzz_runner.py"), str(spec)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env) for spec in specs]
    deadline = time.monotonic() + timeout
    results, in_flight = [], []
    for proc in procs:
        try:
            stdout, stderr = proc.communicate(timeout=max(deadline - time.monotonic(), 1))
            crashed = proc.returncode != 0
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
            crashed, stderr = True, "timed out\n" + stderr
        started, count = None, 0
        for line in stdout.splitlines():
            record = json.loads(line)
            if "start" in record:
                started = record["start"]
            else:
                results.append(record)
                started, count = None, count + 1
        if crashed:
            if started is None and not count:
                pytest.fail(f"a fuzz runner failed before running anything:\n{stderr[-3000:]}")
            in_flight.append((started, proc.returncode, stderr[-1500:]))
    return results, in_flight or None


def test_c_reader_on_valid_bundles(bases, c_checker, tmp_path):
    """Both layouts (4 KiB and 16 KiB weights), from a file path: the C reader accepts them and hands
    out exactly the ranges the Python reader does, and the weights start on their boundary."""
    exe, _ = c_checker
    for base in bases:
        path = tmp_path / f"w{base.weights_alignment}.vkb"
        path.write_bytes(base.data)
        line = subprocess.run([str(exe), str(path)], capture_output=True, text=True, check=True).stdout.strip()
        assert c_reader.c_verdict(line) == c_reader.python_verdict(base.data), line
        assert base.weights_range[0] % base.weights_alignment == 0


def test_c_reader_refuses_newer_major(bases, c_checker):
    exe, _ = c_checker
    buf = bytearray(bases[0].data)
    struct.pack_into("<HH", buf, 8, 2, 3)
    line = c_reader.run(exe, [seal(buf, bases[0])])[0]
    assert line.startswith("REJECT 0 version: the bundle is format version 2.3 but this reader supports 1.2"), line
    with pytest.raises(BundleError, match="format version 2.3 but this reader supports 1.2"):
        read_bundle(seal(buf, bases[0]))
    struct.pack_into("<HH", buf, 8, 1, 7)  # a newer minor of the same major loads
    assert c_reader.run(exe, [seal(buf, bases[0])])[0].startswith("ACCEPT")
    assert read_bundle(seal(buf, bases[0])).version == (1, 7)


# ---- the race the fuzzer found: accepted schedules must be race-free --------------------------

def _sealed_manifest(base: Base, m: dict) -> bytes:
    sections = [(1, 8, json.dumps(m).encode())] + [(2, 16, mod) for mod in base.modules]
    return assemble(sections + [(3, base.weights_alignment, base.weights)])


def test_cleared_barrier_is_refused(bases, c_checker):
    """A needed barrier flag cleared and the bundle re-sealed: the Python reader refuses it naming
    the check; the C reader (container checks only) accepts it, as FORMAT.md says a native reader must
    apply the barrier rule itself."""
    base = bases[0]
    m = copy.deepcopy(base.manifest)
    needed = [i for i, d in enumerate(m["dispatches"]) if d["barrier"]]
    assert needed, "the base bundle has a barrier"
    m["dispatches"][needed[0]]["barrier"] = False
    data = _sealed_manifest(base, m)
    with pytest.raises(BundleError) as e:
        read_bundle(data)
    assert e.value.check == "barriers" and f"dispatches[{needed[0]}].barrier must be true" in e.value.detail
    exe, _ = c_checker
    assert c_reader.c_verdict(c_reader.run(exe, [data])[0]).startswith("ACCEPT")


def test_offsets_edited_into_a_race_are_refused(bases):
    """Fuzz case 2418's family: arena offsets edited so that a later dispatch writes bytes an earlier
    one reads, with no barrier between them (the edit that ran with a WRITE-AFTER-READ hazard)."""
    base = bases[0]
    m = copy.deepcopy(base.manifest)
    for d in m["dispatches"]:
        d["barrier"] = False
    tensors = m["tensors"]
    first, last = m["dispatches"][0], m["dispatches"][-1]
    read = next(t for t in first["bindings"] if tensors[t]["memory"] == "arena")
    written = last["bindings"][-1]
    assert tensors[written]["nbytes"] <= m["memory"]["arena_bytes"] - tensors[read]["offset"]
    tensors[written]["offset"] = tensors[read]["offset"]
    with pytest.raises(BundleError) as e:
        read_bundle(_sealed_manifest(base, m))
    assert e.value.check == "barriers"
    assert f"dispatch {len(m['dispatches']) - 1} binding" in e.value.detail
