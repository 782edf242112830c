"""Semantic checks of the bundle manifest (FORMAT.md, "Manifest" and "Field rules").

The runtime trusts a manifest that passed `validate_manifest`: every index it follows is in range
and every byte range it binds lies inside its buffer. So nothing here assumes a type or a bound.
"""
from __future__ import annotations

import math
import reprlib

from .dtypes import DTYPES

MANIFEST_VERSION = 1

# Bits per element of every dtype a manifest may name; bytes per element of the whole-byte ones
# (a tensor's nbytes is DTYPES[name].nbytes(count): the 4- and 2-bit types pack several per byte).
DTYPE_BITS = {name: d.bits for name, d in DTYPES.items()}
DTYPE_ITEMSIZE = {name: d.itemsize for name, d in DTYPES.items() if d.itemsize}

# Formats of texel-buffer bindings (modules[].texel_buffers) and the bytes of one texel.
TEXEL_BYTES = {"r32f": 4, "rgba32f": 16}

MAX_BYTES = 2**48 - 1          # byte counts and offsets; far above any device, far below overflow
MAX_DIM = 2**31 - 1            # one shape entry
MAX_COUNT = 2**63 - 1          # flops / bytes estimates
MAX_LOCAL_INVOCATIONS = 1024 * 1024
MAX_BINDINGS = 64
MAX_GROUPS = 65535
FLT_MAX = 3.4028234663852886e38
SPEC_RANGES = {"int32": (-2**31, 2**31 - 1), "uint32": (0, 2**32 - 1)}
SPEC_TYPES = ("int32", "uint32", "float32")

# Format 1.2 (several variants): the keys each variant holds, absent from the top level then.
VARIANT_KEYS = ("target", "requirements", "memory", "tensors", "inputs", "outputs", "kernels", "dispatches")
# Optional: the nodes a float16 compile kept float32 by itself ({"node", "why"}, informational),
# what its float16 check measured ({"moved", "output"}, or {"not_run": why}; informational),
# the state the bundle holds between runs (format 1.3: {"name", "tensor", "output"}), and the
# weights a compile quantized (informational: {"scheme", "bits", "symmetric", "block_size",
# "quantized": [{"node", "op", "weight", "shape"}], "float": [{"node", "why"}]}).
OPTIONAL_VARIANT_KEYS = ("float32_nodes", "float16_check", "state", "quantized_weights")
# target.match: VkPhysicalDeviceProperties.deviceType names, in VkPhysicalDeviceType order.
DEVICE_TYPES = ("other", "integrated_gpu", "discrete_gpu", "virtual_gpu", "cpu")
MAX_VENDOR_ID = 2**32 - 1


def device_type(code: int) -> str:
    """The DEVICE_TYPES name of a VkPhysicalDeviceType value (unknown values: "other")."""
    return DEVICE_TYPES[code] if 0 <= code < len(DEVICE_TYPES) else "other"


class BundleError(ValueError):
    """A bundle (container or manifest) failed a check; `check` names it, `detail` says why."""

    def __init__(self, check: str, detail: str):
        self.check = check
        self.detail = detail
        super().__init__(f"bundle check '{check}' failed: {detail}")

    def __reduce__(self):  # picklable (e.g. across multiprocessing) despite the two-part constructor
        return type(self), (self.check, self.detail)


# ---- typed accessors: each fails with the field path and the offending value -------------------

_REPR = reprlib.Repr()  # bounded in depth and length, so a hostile value cannot blow up a message
_REPR.maxlevel, _REPR.maxlist, _REPR.maxdict, _REPR.maxstring, _REPR.maxother, _REPR.maxlong = 3, 8, 4, 60, 60, 40


def _show(value) -> str:
    try:
        return _REPR.repr(value)
    except Exception:  # e.g. an int past Python's digit limit, from a Python writer
        return f"<{type(value).__name__}>"


def _fail(path: str, value, why: str):
    raise BundleError("manifest", f"{path} = {_show(value)} {why}")


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)  # JSON true is not 1


def _field(obj: dict, key: str, path: str):
    if key not in obj:
        raise BundleError("manifest", f"{path}.{key} is missing" if path else f"{key} is missing")
    return obj[key]


def _dict(obj: dict, key: str, path: str = "") -> tuple[dict, str]:
    where = f"{path}.{key}" if path else key
    value = _field(obj, key, path)
    if not isinstance(value, dict):
        _fail(where, value, "must be an object")
    return value, where


def _list(obj: dict, key: str, path: str = "", length: int | None = None) -> tuple[list, str]:
    where = f"{path}.{key}" if path else key
    value = _field(obj, key, path)
    if not isinstance(value, (list, tuple)):  # tuples only arrive from a writer, never from JSON
        _fail(where, value, "must be a list")
    if length is not None and len(value) != length:
        _fail(where, value, f"must have exactly {length} entries")
    return value, where


def _int(value, where: str, lo: int, hi: int) -> int:
    if not _is_int(value):
        _fail(where, value, "must be an integer")
    if not lo <= value <= hi:
        _fail(where, value, f"must be in {lo}..={hi}")
    return value


def _index(value, where: str, count: int, what: str) -> int:
    """An index into the list `what` of `count` entries."""
    if not _is_int(value):
        _fail(where, value, "must be an integer")
    if not 0 <= value < count:
        _fail(where, value, f"is not an index into {what} ({count} entries)")
    return value


def _int_field(obj: dict, key: str, path: str, lo: int, hi: int) -> int:
    return _int(_field(obj, key, path), f"{path}.{key}" if path else key, lo, hi)


def _str(value, where: str, nonempty: bool = False) -> str:
    if not isinstance(value, str):
        _fail(where, value, "must be a string")
    if nonempty and not value:
        _fail(where, value, "must not be empty")
    return value


def _str_field(obj: dict, key: str, path: str, nonempty: bool = False) -> str:
    return _str(_field(obj, key, path), f"{path}.{key}", nonempty)


def _entries(manifest: dict, key: str) -> list[tuple[dict, str]]:
    """The list `key` as (entry, path) pairs, each entry checked to be an object."""
    items, where = _list(manifest, key)
    out = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            _fail(f"{where}[{i}]", item, "must be an object")
        out.append((item, f"{where}[{i}]"))
    return out


# ---- the parts, in manifest order ------------------------------------------------------------

def _check_model(manifest: dict) -> None:
    model, path = _dict(manifest, "model")
    for key in ("name", "producer", "source_sha256"):
        _str_field(model, key, path)
    _int_field(model, "opset", path, 0, MAX_DIM)


def _check_match(target: dict, path: str) -> None:
    """target.match (format 1.2): which devices a variant's profile is for (FORMAT.md, "Which
    variant runs"). Only variants are picked by it; a flat manifest's match is ignored."""
    if "match" not in target:
        return
    match, path = _dict(target, "match", path)
    if "vendor_ids" in match:
        ids, where = _list(match, "vendor_ids", path)
        for i, vendor in enumerate(ids):
            _int(vendor, f"{where}[{i}]", 0, MAX_VENDOR_ID)
    if "device_types" in match:
        types, where = _list(match, "device_types", path)
        for i, kind in enumerate(types):
            if _str(kind, f"{where}[{i}]") not in DEVICE_TYPES:
                _fail(f"{where}[{i}]", kind, f"is not one of {', '.join(DEVICE_TYPES)}")


def _check_description(manifest: dict, *, match: bool = False) -> None:
    """target and requirements: informational, but the runtime compares requirements."""
    target, path = _dict(manifest, "target")
    _str_field(target, "name", path)
    if match:
        _check_match(target, path)

    req, path = _dict(manifest, "requirements")
    api, where = _list(req, "vulkan_api", path, 3)
    for i, (part, hi) in enumerate(zip(api, (127, 1023, 4095))):  # VK_MAKE_API_VERSION field widths
        _int(part, f"{where}[{i}]", 0, hi)
    extensions, where = _list(req, "extensions", path)
    for i, ext in enumerate(extensions):
        _str(ext, f"{where}[{i}]", nonempty=True)
    _int_field(req, "max_shared_memory_bytes", path, 0, MAX_BYTES)
    _int_field(req, "max_workgroup_invocations", path, 1, MAX_LOCAL_INVOCATIONS)
    size, where = _list(req, "max_workgroup_size", path, 3)
    for i, n in enumerate(size):
        _int(n, f"{where}[{i}]", 1, MAX_LOCAL_INVOCATIONS)
    _int_field(req, "max_storage_buffer_range", path, 0, MAX_BYTES)
    if "features" in req:  # optional (format 1.1): device features to enable, e.g. shaderInt64
        features, where = _list(req, "features", path)
        seen = set()
        for i, name in enumerate(features):
            _str(name, f"{where}[{i}]", nonempty=True)
            if not (name.isascii() and name.isidentifier()):
                _fail(f"{where}[{i}]", name, "is not a feature name (a VkPhysicalDevice*Features field)")
            if name in seen:
                _fail(f"{where}[{i}]", name, "is listed twice")
            seen.add(name)
    if "max_texel_buffer_elements" in req:
        _int_field(req, "max_texel_buffer_elements", path, 0, MAX_BYTES)


def _check_memory(manifest: dict, weights_bytes: int) -> dict:
    memory, path = _dict(manifest, "memory")
    alignment = _int_field(memory, "alignment", path, 4, 65536)
    if alignment & (alignment - 1):
        _fail(f"{path}.alignment", alignment, "must be a power of two")
    _int_field(memory, "arena_bytes", path, 0, MAX_BYTES)
    declared = _int_field(memory, "weights_bytes", path, 0, MAX_BYTES)
    if declared != weights_bytes:
        _fail(f"{path}.weights_bytes", declared, f"but the WEIGHTS section is {weights_bytes} bytes")
    _int_field(memory, "intermediates_sum_bytes", path, 0, MAX_BYTES)
    _int_field(memory, "lower_bound_bytes", path, 0, MAX_BYTES)
    if "state_bytes" in memory:  # format 1.3: the state buffer
        _int_field(memory, "state_bytes", path, 0, MAX_BYTES)
    return memory


def _element_count(shape: list, where: str) -> int:
    """prod(shape), stopping early so a hostile shape cannot build a giant integer."""
    dims = [_int(d, f"{where}[{i}]", 0, MAX_DIM) for i, d in enumerate(shape)]
    if 0 in dims:
        return 0
    count = 1
    for d in dims:
        count *= d
        if count > MAX_BYTES:
            _fail(where, shape, f"has more than {MAX_BYTES} elements")
    return count


def _check_tensors(manifest: dict, memory: dict) -> list[dict]:
    sizes = {"arena": memory["arena_bytes"], "weights": memory["weights_bytes"],
             "state": memory.get("state_bytes", 0)}
    alignment = memory["alignment"]
    tensors = _entries(manifest, "tensors")
    for t, path in tensors:
        _str_field(t, "name", path)
        dtype = _str_field(t, "dtype", path)
        if dtype not in DTYPES:
            _fail(f"{path}.dtype", dtype, f"is not one of {', '.join(DTYPES)}")
        shape, where = _list(t, "shape", path)
        expected = DTYPES[dtype].nbytes(_element_count(shape, where))
        nbytes = _int_field(t, "nbytes", path, 0, MAX_BYTES)
        if nbytes != expected:
            _fail(f"{path}.nbytes", nbytes, f"but shape {list(shape)} of {dtype} is {expected} bytes")
        mem = _str_field(t, "memory", path)
        if mem not in sizes:
            _fail(f"{path}.memory", mem, "must be 'arena', 'weights' or 'state'")
        offset = _int_field(t, "offset", path, 0, MAX_BYTES)
        if offset % alignment:
            _fail(f"{path}.offset", offset, f"is not a multiple of memory.alignment = {alignment}")
        if offset + nbytes > sizes[mem]:
            _fail(f"{path}.offset", offset, f"+ nbytes {nbytes} = {offset + nbytes} runs past the end of "
                  f"{mem} ({sizes[mem]} bytes)")
    return [t for t, _ in tensors]


def _check_io(manifest: dict, tensors: list[dict]) -> None:
    """Inputs and outputs: unique names, arena tensors (the runtime copies them through staging)."""
    for key in ("inputs", "outputs"):
        seen = set()
        for io, path in _entries(manifest, key):
            name = _str_field(io, "name", path, nonempty=True)
            if name in seen:
                _fail(f"{path}.name", name, f"appears twice in {key}")
            seen.add(name)
            tid = _index(_field(io, "tensor", path), f"{path}.tensor", len(tensors), "tensors")
            if tensors[tid]["memory"] != "arena":
                _fail(f"{path}.tensor", tid, f"is a {tensors[tid]['memory']} tensor; {key} must be in the arena")


def _check_state(manifest: dict, tensors: list[dict]) -> None:
    """state (format 1.3): each entry a state tensor held between runs, named apart from the
    inputs, fed by an output of that name that the API does not list either."""
    if "state" not in manifest:
        return
    names = {io["name"] for key in ("inputs", "outputs") for io in manifest[key]}
    seen, held = set(), set()
    for entry, path in _entries(manifest, "state"):
        name = _str_field(entry, "name", path, nonempty=True)
        _str_field(entry, "output", path, nonempty=True)
        if name in seen or name in names:
            _fail(f"{path}.name", name, "is used twice among the inputs, outputs and state")
        seen.add(name)
        tid = _index(_field(entry, "tensor", path), f"{path}.tensor", len(tensors), "tensors")
        if tensors[tid]["memory"] != "state":
            _fail(f"{path}.tensor", tid, f"is a {tensors[tid]['memory']} tensor; state must be in the state buffer")
        held.add(tid)
    for i, t in enumerate(tensors):  # the state buffer holds the state and views of it only
        if t["memory"] == "state" and not any(_within(t, tensors[h]) for h in held):
            _fail(f"tensors[{i}].memory", "state", "but the tensor lies in no state entry's bytes")


def _within(t: dict, outer: dict) -> bool:
    return outer["offset"] <= t["offset"] and t["offset"] + t["nbytes"] <= outer["offset"] + outer["nbytes"]


def _check_modules(manifest: dict, module_count: int) -> list[dict]:
    modules = _entries(manifest, "modules")
    if len(modules) != module_count:
        raise BundleError("manifest", f"modules has {len(modules)} entries but the bundle has "
                                      f"{module_count} SPIR-V sections")
    for m, path in modules:
        _str_field(m, "name", path)
        _int_field(m, "bindings", path, 1, MAX_BINDINGS)
        local, where = _list(m, "local_size", path, 3)
        invocations = math.prod(_int(n, f"{where}[{i}]", 1, MAX_LOCAL_INVOCATIONS) for i, n in enumerate(local))
        if invocations > MAX_LOCAL_INVOCATIONS:
            _fail(where, local, f"has {invocations} invocations, more than {MAX_LOCAL_INVOCATIONS}")
        _int_field(m, "shared_memory_bytes", path, 0, MAX_BYTES)
        if "texel_buffers" in m:  # optional (format 1.1): bindings read as uniform texel buffers
            texels, where = _list(m, "texel_buffers", path)
            seen = set()
            for i, t in enumerate(texels):
                if not isinstance(t, dict):
                    _fail(f"{where}[{i}]", t, "must be an object with binding and format")
                b = _int_field(t, "binding", f"{where}[{i}]", 0, m["bindings"] - 1)
                if b in seen:
                    _fail(f"{where}[{i}].binding", b, "is listed twice")
                seen.add(b)
                fmt = _str_field(t, "format", f"{where}[{i}]")
                if fmt not in TEXEL_BYTES:
                    _fail(f"{where}[{i}].format", fmt, f"is not one of {', '.join(TEXEL_BYTES)}")
    return [m for m, _ in modules]


def texel_formats(module: dict) -> dict[int, str]:
    """{binding: format} of a (validated) module's texel-buffer bindings."""
    return {t["binding"]: t["format"] for t in module.get("texel_buffers", [])}


def _check_spec_value(kind: str, value, where: str) -> None:
    if kind in SPEC_RANGES:
        _int(value, where, *SPEC_RANGES[kind])
        return
    # float32: an int or a float, finite, and not rounding to infinity in 32 bits.
    if not (_is_int(value) or isinstance(value, float)):
        _fail(where, value, "must be a number")
    if isinstance(value, float) and not math.isfinite(value):
        _fail(where, value, "must be finite")
    if abs(value) > FLT_MAX:  # exact for huge ints too: int/float comparison does not convert
        _fail(where, value, "does not fit in float32")


def _check_kernels(manifest: dict, modules: list[dict]) -> list[dict]:
    kernels = _entries(manifest, "kernels")
    for k, path in kernels:
        _str_field(k, "name", path)
        _index(_field(k, "module", path), f"{path}.module", len(modules), "modules")
        specs, where = _list(k, "specialization", path)
        ids = set()
        for i, spec in enumerate(specs):
            spath = f"{where}[{i}]"
            if not isinstance(spec, dict):
                _fail(spath, spec, "must be an object")
            cid = _int_field(spec, "id", spath, 0, 65535)
            if cid in ids:
                _fail(f"{spath}.id", cid, "is used twice in this kernel")
            ids.add(cid)
            kind = _str_field(spec, "type", spath)
            if kind not in SPEC_TYPES:
                _fail(f"{spath}.type", kind, f"is not one of {', '.join(SPEC_TYPES)}")
            _check_spec_value(kind, _field(spec, "value", spath), f"{spath}.value")
    return [k for k, _ in kernels]


def _check_dispatches(manifest: dict, kernels: list[dict], modules: list[dict], tensors: list[dict]) -> None:
    for d, path in _entries(manifest, "dispatches"):
        kid = _index(_field(d, "kernel", path), f"{path}.kernel", len(kernels), "kernels")
        want = modules[kernels[kid]["module"]]["bindings"]
        bindings, where = _list(d, "bindings", path)
        if len(bindings) != want:
            _fail(where, bindings, f"has {len(bindings)} entries but kernel {kid}'s module has {want} bindings")
        for i, tid in enumerate(bindings):
            _index(tid, f"{where}[{i}]", len(tensors), "tensors")
        groups, where = _list(d, "groups", path, 3)
        for i, n in enumerate(groups):
            _int(n, f"{where}[{i}]", 1, MAX_GROUPS)
        if not isinstance(_field(d, "barrier", path), bool):
            _fail(f"{path}.barrier", d["barrier"], "must be true or false")
        # Optional profiling fields: absent is fine, present must be well typed.
        if "nodes" in d:
            nodes, where = _list(d, "nodes", path)
            for i, node in enumerate(nodes):
                _str(node, f"{where}[{i}]")
        for key in ("flops", "bytes"):
            if key in d:
                _int_field(d, key, path, 0, MAX_COUNT)


def _check_requirements(manifest: dict, modules: list[dict], tensors: list[dict], used=None) -> None:
    """`requirements` must not understate what the modules and dispatches use: the runtime compares
    only `requirements` with the device, so an understated value would reach the driver. `used`:
    the module ids to cover (a variant covers the modules its kernels use; a flat manifest all)."""
    req = manifest["requirements"]
    most, per_axis = req["max_workgroup_invocations"], req["max_workgroup_size"]
    for i in range(len(modules)) if used is None else sorted(used):
        m = modules[i]
        local = m["local_size"]
        if math.prod(local) > most:
            _fail(f"modules[{i}].local_size", local, f"has {math.prod(local)} invocations but "
                  f"requirements.max_workgroup_invocations = {most}")
        for axis in range(3):
            if local[axis] > per_axis[axis]:
                _fail(f"modules[{i}].local_size", local, f"exceeds requirements.max_workgroup_size = "
                      f"{list(per_axis)} on axis {'xyz'[axis]}")
        if m["shared_memory_bytes"] > req["max_shared_memory_bytes"]:
            _fail(f"modules[{i}].shared_memory_bytes", m["shared_memory_bytes"],
                  f"exceeds requirements.max_shared_memory_bytes = {req['max_shared_memory_bytes']}")
    widest, texels = req["max_storage_buffer_range"], req.get("max_texel_buffer_elements", 0)
    kernels = manifest["kernels"]
    for j, d in enumerate(manifest["dispatches"]):
        formats = texel_formats(modules[kernels[d["kernel"]]["module"]])
        for i, tid in enumerate(d["bindings"]):
            if i in formats:  # a texel view covers whole texels, at most max_texel_buffer_elements
                size, nbytes = TEXEL_BYTES[formats[i]], tensors[tid]["nbytes"]
                if nbytes % size or nbytes // size > texels:
                    _fail(f"dispatches[{j}].bindings[{i}]", tid, f"binds tensor {tid} of {nbytes} bytes as "
                          f"{formats[i]} texels ({size} bytes each); it must be whole texels, at most "
                          f"requirements.max_texel_buffer_elements = {texels}")
            if tensors[tid]["nbytes"] > widest:
                _fail(f"dispatches[{j}].bindings[{i}]", tid, f"binds tensor {tid} of {tensors[tid]['nbytes']} "
                      f"bytes but requirements.max_storage_buffer_range = {widest}")


def _check_flat(manifest: dict, modules: list[dict], weights_bytes: int, *, variant: bool) -> None:
    """Every 1.1 rule but model and modules (checked once per file), over a flat manifest or a
    variant's flat view (which also checks target.match and covers only the modules it uses)."""
    _check_description(manifest, match=variant)
    _check_float32_nodes(manifest)
    _check_float16_check(manifest)
    _check_quantized_weights(manifest)
    memory = _check_memory(manifest, weights_bytes)
    tensors = _check_tensors(manifest, memory)
    _check_io(manifest, tensors)
    _check_state(manifest, tensors)
    kernels = _check_kernels(manifest, modules)
    _check_dispatches(manifest, kernels, modules, tensors)
    _check_requirements(manifest, modules, tensors,
                        used={k["module"] for k in kernels} if variant else None)


def _check_float32_nodes(manifest: dict) -> None:
    if "float32_nodes" not in manifest:
        return
    for entry, where in _entries(manifest, "float32_nodes"):
        _str_field(entry, "node", where)
        _str_field(entry, "why", where)


def _check_float16_check(manifest: dict) -> None:
    if "float16_check" not in manifest:
        return
    check, where = _dict(manifest, "float16_check")
    if "not_run" in check:
        _str_field(check, "not_run", where)
        return
    moved = _field(check, "moved", where)
    if isinstance(moved, bool) or not isinstance(moved, (int, float)) or not 0 <= moved <= FLT_MAX:
        _fail(f"{where}.moved", moved, "must be a finite number >= 0")
    _str_field(check, "output", where)


def _check_quantized_weights(manifest: dict) -> None:
    if "quantized_weights" not in manifest:
        return
    q, where = _dict(manifest, "quantized_weights")
    _str_field(q, "scheme", where)
    _int_field(q, "bits", where, 1, 8)
    _int_field(q, "block_size", where, 1, MAX_DIM)
    for key, fields in (("quantized", ("node", "op")), ("float", ("node", "why"))):
        items, at = _list(q, key, where)
        for i, entry in enumerate(items):
            if not isinstance(entry, dict):
                _fail(f"{at}[{i}]", entry, "must be an object")
            for name in fields:
                _str_field(entry, name, f"{at}[{i}]")


def flat_view(manifest: dict, variant: dict) -> dict:
    """A variant as a flat (format 1.1) manifest over the shared modules: what every 1.1 rule,
    the module interface and the barrier walk read."""
    view = {key: variant[key] for key in ("name", *VARIANT_KEYS, *OPTIONAL_VARIANT_KEYS) if key in variant}
    view.update(manifest_version=manifest["manifest_version"], model=manifest["model"],
                modules=manifest["modules"])
    return view


def variant_views(manifest: dict) -> list[dict]:
    """A validated manifest's variants as flat views, in list order: [manifest] for a flat one."""
    if "variants" not in manifest:
        return [manifest]
    return [flat_view(manifest, v) for v in manifest["variants"]]


def used_modules(view: dict) -> list[int]:
    """The ids of the modules a (validated) variant's kernels use, ascending."""
    return sorted({k["module"] for k in view["kernels"]})


def in_variant(label: str, error: BundleError) -> BundleError:
    """`error` (from checking a variant's flat view) with its detail naming the variant: a path
    into the variant becomes `variants[i].path`, anything else is prefixed `variants[i]: `."""
    if not label:
        return error
    head = error.detail.split(" ", 1)[0].split(".", 1)[0].split("[", 1)[0]
    return BundleError(error.check, f"{label}{'.' if head in VARIANT_KEYS else ': '}{error.detail}")


def _validate_variants(manifest: dict, module_count: int, weights_bytes: int) -> None:
    """Format 1.2: shared model and modules, then each variant as a flat manifest over them."""
    for key in VARIANT_KEYS:
        if key in manifest:
            raise BundleError("manifest", f"{key} is present at the top level, but a manifest with variants "
                                          f"holds it in each variant")
    modules = _check_modules(manifest, module_count)
    variants, where = _list(manifest, "variants")
    if not variants:
        _fail(where, variants, "must have at least one variant")
    first = first_state = None
    for i, variant in enumerate(variants):
        if not isinstance(variant, dict):
            _fail(f"{where}[{i}]", variant, "must be an object")
        if "name" in variant:
            _str(variant["name"], f"{where}[{i}].name")
        view = flat_view(manifest, variant)
        try:
            _check_flat(view, modules, weights_bytes, variant=True)
        except BundleError as e:
            raise in_variant(f"{where}[{i}]", e) from None
        # One state buffer serves every variant: the same state, at the same bytes.
        state = (view.get("state", []), [view["tensors"][x["tensor"]] for x in view.get("state", [])],
                 view["memory"].get("state_bytes", 0))
        if first is not None and state != first_state:
            raise BundleError("manifest", f"{where}[{i}].state differs from {where}[0].state; every variant "
                                          "holds the same state (names, tensors, offsets and state_bytes)")
        first_state = state
        # Same inputs and outputs everywhere (shapes may differ): run() takes one set of names.
        io = {key: [(x["name"], view["tensors"][x["tensor"]]["dtype"]) for x in view[key]]
              for key in ("inputs", "outputs")}
        if first is None:
            first = io
            continue
        for key in ("inputs", "outputs"):
            if io[key] != first[key]:
                raise BundleError("manifest", f"{where}[{i}].{key} are {_show(io[key])} (name, dtype) but "
                                              f"{where}[0].{key} are {_show(first[key])}; every variant has "
                                              f"the same {key}, in the same order, with the same dtypes")


def validate_manifest(manifest: dict, *, module_count: int, weights_bytes: int) -> None:
    """Check every rule of FORMAT.md's manifest; raise BundleError naming the field and value.

    `module_count` and `weights_bytes` are what the container holds (SPIRV sections, WEIGHTS size).
    Unknown keys are ignored so a newer minor version still loads. A manifest with `variants`
    (format 1.2) is checked variant by variant; details name the variant (`variants[2].dispatches[5]`).
    """
    if not isinstance(manifest, dict):
        _fail("manifest", manifest, "must be a JSON object")
    version = _field(manifest, "manifest_version", "")
    if not _is_int(version) or version != MANIFEST_VERSION:
        _fail("manifest_version", version, f"is not supported (this reader knows {MANIFEST_VERSION})")
    _check_model(manifest)
    if "variants" in manifest:
        _validate_variants(manifest, module_count, weights_bytes)
    else:
        _check_flat(manifest, _check_modules(manifest, module_count), weights_bytes, variant=False)
