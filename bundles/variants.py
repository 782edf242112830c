"""Format 1.2: several variants in one bundle (FORMAT.md, "Variants").

A variant is a kernel set + schedule + memory plan for one (device profile, input shapes) pair.
`combine` merges single-variant bundles of one model into one bundle whose variants share the
SPIR-V modules and the weight bytes that are identical; `pick_profile` is the rule that says which
profile runs on a device (the runtime and the C reader implement the same rule); a run then takes
the variant of that profile whose `input_shapes` equal the inputs' shapes.
Only the standard library here (bundles may import stdlib + numpy).
"""
from __future__ import annotations

import hashlib
import json
from typing import NamedTuple

from .format import MIN_WEIGHTS_ALIGNMENT, read_bundle, write_bundle
from .manifest import DEVICE_TYPES, OPTIONAL_VARIANT_KEYS, VARIANT_KEYS, used_modules, variant_views


class Part(NamedTuple):
    """A single-variant bundle as its writer holds it: what `write_bundle` takes. `combine` takes
    these as they are (the combined bundle is checked as a whole when written), which spares a
    compiler that made them a write and a read per part."""
    manifest: dict
    spirv: list
    weights: bytes


class VariantError(ValueError):
    """No variant fits: an unknown target name, or a device that meets no variant's requirements."""


def shapes_label(view: dict) -> str:
    """A variant's input shapes as `--variant` spells them: `ids=1x32,mask=1x32` (`x=scalar` for [])."""
    tensors = view["tensors"]
    return ",".join(f"{x['name']}={'x'.join(map(str, tensors[x['tensor']]['shape'])) or 'scalar'}"
                    for x in view["inputs"])


def input_shapes(view: dict) -> tuple[tuple[int, ...], ...]:
    """The shapes of a (validated) variant's inputs, in input order: what picks it for a run."""
    return tuple(tuple(view["tensors"][x["tensor"]]["shape"]) for x in view["inputs"])


def no_variant_message(views: list[dict], shapes: list[tuple]) -> str:
    """The error for inputs of the given `shapes` (in input order) that no variant in `views` was
    compiled for: `input 'ids' has shape (1, 64); this bundle was compiled for ids=1x32, ids=1x128`."""
    names = [x["name"] for x in views[0]["inputs"]]
    if len(names) == 1:
        given = f"input {names[0]!r} has shape {tuple(shapes[0])}"
    else:
        given = "inputs have shapes " + ", ".join(f"{n}={tuple(s)}" for n, s in zip(names, shapes))
    compiled = (", " if len(names) == 1 else "; ").join(shapes_label(v) for v in views)
    return f"{given}; this bundle was compiled for {compiled}"


def _weight_chunks(view: dict, size: int, alignment: int) -> list[tuple[int, int]]:
    """The disjoint [start, end) byte ranges of the WEIGHTS section (`size` bytes) that the
    variant's tensors cover: overlapping tensors (views, `/words` aliases) fall in one chunk, so
    moving a chunk keeps every tensor whole. Ends are rounded up to `alignment` (the writer pads
    with zeros)."""
    return _merged([(t["offset"], min(size, -(-(t["offset"] + t["nbytes"]) // alignment) * alignment))
                    for t in view["tensors"] if t["memory"] == "weights" and t["nbytes"]])


def _merged(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """[start, end) ranges, overlapping ones merged, sorted."""
    out: list[list[int]] = []
    for a, b in sorted(ranges):
        if out and a < out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def combine(bundles: list, *, matches: dict[str, dict] | None = None,
            names: list[str] | None = None, weights_alignment: int = MIN_WEIGHTS_ALIGNMENT) -> bytes:
    """One bundle holding the variants of `bundles` (bytes, paths, Bundles or Parts of the same
    model; a multi-variant one contributes all its variants), in order: list order is the tie-break
    order of the pick rule. Identical SPIR-V modules (same bytes and same manifest entry) are
    stored once, and so are identical weight chunks (same bytes), in the one WEIGHTS section.
    `matches` sets `target.match` per target name (FORMAT.md: which devices a profile is for);
    `names` the variants' names (default: "<target> <input shapes>"). One variant in all is
    written as the flat (format 1.1) bundle it is, unchanged."""
    opened = [b if hasattr(b, "manifest") else read_bundle(b) for b in bundles]
    try:
        parts = [(b, view) for b in opened for view in variant_views(b.manifest)]
        if not parts:
            raise ValueError("combine needs at least one bundle")
        if len(parts) == 1 and not matches and not names:
            b = parts[0][0]
            return write_bundle(b.manifest, [bytes(m) for m in b.spirv], bytes(b.weights),
                                weights_alignment=weights_alignment)
        return _combine(parts, matches or {}, names, weights_alignment)
    finally:
        for b, given in zip(opened, bundles):
            if b is not given:
                b.close()


def _combine(parts, matches, names, weights_alignment) -> bytes:
    model = parts[0][1]["model"]
    for _, view in parts:
        if view["model"] != model:
            raise ValueError(f"combine takes bundles of one model; {view['model']} differs from {model}")
    alignment = max(view["memory"]["alignment"] for _, view in parts)
    modules, module_ids, blobs = [], {}, []
    chunk_ids: dict[str, int] = {}     # sha256 of a weight chunk -> its offset in the new section
    weights: list = []   # bytes and memoryviews
    size = 0
    variants = []
    for n, (bundle, view) in enumerate(parts):
        # Modules: shared when the bytes and the manifest entry are both the same.
        remap = []
        for entry, data in zip(view["modules"], bundle.spirv):
            key = (hashlib.sha256(data).hexdigest(), json.dumps(entry, sort_keys=True))
            if key not in module_ids:
                module_ids[key] = len(modules)
                modules.append(entry)
                blobs.append(bytes(data))
            remap.append(module_ids[key])
        # Weights: each chunk stored once; a tensor moves with its chunk.
        moved = {}
        whole = memoryview(bundle.weights)   # chunks are views until the one join below
        for start, end in _weight_chunks(view, len(bundle.weights), alignment):
            data = whole[start:end]
            digest = hashlib.sha256(data).hexdigest()
            if digest not in chunk_ids:
                chunk_ids[digest] = size
                padded = -(-len(data) // alignment) * alignment
                weights += [data, bytes(padded - len(data))]
                size += padded
            moved[(start, end)] = chunk_ids[digest]
        tensors = []
        for t in view["tensors"]:
            t = dict(t)
            if t["memory"] == "weights":
                if not t["nbytes"]:
                    t["offset"] = 0  # an empty tensor binds bytes [0, 4) of its buffer wherever it "is"
                else:
                    start, end = next(c for c in moved if c[0] <= t["offset"] < c[1])
                    t["offset"] = moved[(start, end)] + t["offset"] - start
            tensors.append(t)
        variant = {"name": names[n] if names else f"{view['target']['name']} {shapes_label(view)}"}
        variant.update({key: view[key] for key in (*VARIANT_KEYS, *OPTIONAL_VARIANT_KEYS) if key in view})
        target = dict(view["target"])
        if target["name"] in matches:
            target["match"] = matches[target["name"]]
        variant.update(target=target, memory={**view["memory"], "alignment": alignment}, tensors=tensors,
                       kernels=[{**k, "module": remap[k["module"]]} for k in view["kernels"]])
        variants.append(variant)
    for v in variants:
        v["memory"]["weights_bytes"] = size
    manifest = {"manifest_version": parts[0][1]["manifest_version"], "model": model,
                "modules": modules, "variants": variants}
    return write_bundle(manifest, blobs, b"".join(weights), weights_alignment=weights_alignment)


def packed_weights(manifest: dict, ids: list[int]) -> list[tuple[int, int, int]]:
    """What a runtime running the variants `ids` of a (validated) manifest uploads of the WEIGHTS
    section: [(start, end, packed offset)], the ranges their tensors use, in order, packed one after
    the other (each range is a whole number of `memory.alignment` but the section's last, so packed
    offsets keep every tensor aligned). A bundle's other profiles may lay weights out their own way;
    those stay on disk. A flat manifest: the whole section, unmoved."""
    views = variant_views(manifest)
    size = views[0]["memory"]["weights_bytes"]
    if "variants" not in manifest:
        return [(0, size, 0)]
    alignment = max(views[i]["memory"]["alignment"] for i in ids)
    out, at = [], 0
    for start, end in _merged([c for i in ids for c in _weight_chunks(views[i], size, alignment)]):
        out.append((start, end, at))
        at += end - start
    return out or [(0, 0, 0)]


def uploaded_weights_bytes(manifest: dict, view: dict) -> int:
    """What a runtime running variant `view` of a (validated) manifest alone uploads of the WEIGHTS
    section (packed_weights): its own ranges, packed; a flat manifest's whole section. What the
    device's memory must hold, not the section's size, which counts every profile's layouts."""
    size = view["memory"]["weights_bytes"]
    if "variants" not in manifest:
        return size
    return sum(end - start for start, end in _weight_chunks(view, size, view["memory"]["alignment"]))


def exclusive_bytes(bundle) -> list[int]:
    """Per variant of a (read) bundle, the bytes of SPIR-V modules and weights that no other variant
    uses: what it adds to the bundle's size (`vkc inspect`)."""
    views = variant_views(bundle.manifest)
    modules = [set(used_modules(v)) for v in views]
    chunks = [_weight_chunks(v, len(bundle.weights), v["memory"]["alignment"]) for v in views]
    out = []
    for i in range(len(views)):
        others = set().union(*(modules[:i] + modules[i + 1:]))
        own = sum(len(bundle.spirv[m]) for m in modules[i] - others)
        covered = _merged([c for j, cs in enumerate(chunks) if j != i for c in cs])
        for start, end in chunks[i]:
            own += end - start - sum(max(0, min(end, b) - max(start, a)) for a, b in covered)
        out.append(own)
    return out


# ---- which variant runs (FORMAT.md, "Which variant runs") ---------------------------------------

def match_score(match: dict | None, vendor_id: int, device_type: str) -> int | None:
    """How well a variant's `target.match` fits a device: 2 (vendor, and type when given), 1 (type
    only), 0 (no match: portable), None (a match that does not fit: the variant is dropped)."""
    if match is None:
        return 0
    if "vendor_ids" in match:
        fits = vendor_id in match["vendor_ids"] and device_type in match.get("device_types", DEVICE_TYPES)
        return 2 if fits else None
    if "device_types" in match:
        return 1 if device_type in match["device_types"] else None
    return 0  # an empty match constrains nothing


def pick_profile(manifest: dict, vendor_id: int, device_type: str, missing, target: str | None = None
                 ) -> tuple[str, list[int]]:
    """(the chosen target name, the ids of its variants: the shape set) for a device.
    `missing(view)` says what requirement of a variant the device misses first (None: it meets
    them all). `target` overrides the choice by name. Raises VariantError when nothing fits, saying
    per target what the device lacks ("for target 'nvidia': ...; for target 'generic': ...")."""
    views = variant_views(manifest)
    names = [v["target"]["name"] for v in views]
    several = len(set(names)) > 1  # reasons name their target only when there are several
    if target is not None and target not in names:
        raise VariantError(f"target {target!r} is not in this bundle; it has "
                           f"{', '.join(map(repr, dict.fromkeys(names)))}")
    why = [missing(v) if target in (None, names[i]) else "not the target asked for" for i, v in enumerate(views)]
    if target is not None:
        met = [i for i, name in enumerate(names) if name == target and why[i] is None]
        if not met:
            reason = next(w for w, n in zip(why, names) if n == target)
            raise VariantError(f"for target {target!r}: {reason}" if several else reason)
        return target, met
    best = None
    for i, view in enumerate(views):
        # A flat (format 1.1) manifest's match is ignored: its one variant runs wherever it can.
        match = view["target"].get("match") if "variants" in manifest else None
        score = None if why[i] else match_score(match, vendor_id, device_type)
        if score is not None and (best is None or score > best[0]):
            best = (score, i)
    if best is None:
        misses = {}  # per target, the first reason
        for view, name, w in zip(views, names, why):
            misses.setdefault(name, w or f"a device its match names ({view['target'].get('match')})")
        raise VariantError("; ".join(f"for target {name!r}: {w}" if several else w for name, w in misses.items()))
    name = names[best[1]]
    return name, [i for i, n in enumerate(names) if n == name and why[i] is None]
