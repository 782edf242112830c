"""The `.vkb` container: a 32-byte header, a section table, aligned sections (see FORMAT.md).

`read_bundle` trusts nothing: a Bundle it returns has passed every container check and
`validate_manifest`, so a runtime can index and bind what it describes without further checks.
"""
from __future__ import annotations

import enum
import json
import mmap
import os
import struct
import zlib
from dataclasses import dataclass

from . import spirv as _spirv
from .hazards import check_barriers
from .manifest import BundleError, _is_int, in_variant, validate_manifest, variant_views

MAGIC = b"VKCBNDL\0"
VERSION = (1, 2)                        # a bundle of several variants; it reads any file with major <= 1
FLAT_VERSION = (1, 1)                   # a bundle of one variant is written as format 1.1, unchanged
STATE_VERSION = (1, 3)                  # a bundle holding state (FORMAT.md, "State")
HEADER = struct.Struct("<8sHHIIIQ")     # magic, major, minor, flags, section_count, checksum, file_size
ENTRY = struct.Struct("<IIQQII")        # kind, alignment, offset, size, checksum, reserved
CHECKSUMMED_HEADER = 20                 # the header checksum covers bytes 0..20, then the table
MIN_SECTIONS, MAX_SECTIONS = 2, 4096     # small enough for an allocation-free C reader's pairwise checks
MANIFEST_ALIGNMENT = 8
SPIRV_ALIGNMENT = 16
MIN_WEIGHTS_ALIGNMENT = 4096            # mmap-able straight from an uncompressed Android asset
SPIRV_MAGIC = 0x07230203
SPIRV_MIN_SIZE = 20                     # the 5-word SPIR-V header
_CHUNK = 1 << 20                        # padding is compared in chunks, never copied whole


class SectionKind(enum.IntEnum):
    MANIFEST = 1
    SPIRV = 2
    WEIGHTS = 3


@dataclass(frozen=True)
class Section:
    """One section-table entry, as read (index is its position in the table)."""
    index: int
    kind: SectionKind
    alignment: int
    offset: int
    size: int
    checksum: int

    @property
    def end(self) -> int:
        return self.offset + self.size


class Bundle:
    """A validated bundle. Views point into the source (or its mmap); `close()` releases them."""

    def __init__(self, version, flags, manifest, spirv, weights, sections, base, mapping):
        self.version: tuple[int, int] = version
        self.flags: int = flags
        self.manifest: dict = manifest
        self.spirv: list[memoryview] = spirv
        self.weights: memoryview = weights
        self.sections: list[Section] = sections
        self._base = base
        self._mmap = mapping

    def close(self) -> None:
        """Release the views and unmap a file. Raises BufferError while something (e.g. a numpy
        array made with frombuffer) still uses a view; drop it and call close() again."""
        for view in (*self.spirv, self.weights, self._base):
            view.release()
        if self._mmap is not None:
            self._mmap.close()

    def __enter__(self) -> Bundle:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"Bundle(version={self.version[0]}.{self.version[1]}, modules={len(self.spirv)}, "
                f"weights={len(self.weights)} bytes)")


def _fail(check: str, detail: str):
    raise BundleError(check, detail)


def _align_up(n: int, alignment: int) -> int:
    return -(-n // alignment) * alignment


def _is_pow2(n: int) -> bool:
    return n > 0 and not n & (n - 1)


def _name(section_index: int, kind: int) -> str:
    known = kind in SectionKind._value2member_map_
    return f"section {section_index} ({SectionKind(kind).name if known else f'kind {kind}'})"


# ---- writing -----------------------------------------------------------------------------

def _assemble(sections: list[tuple[int, int, bytes]], version=FLAT_VERSION, flags: int = 0) -> bytes:
    """Lay (kind, alignment, data) out in order after the table; gaps are zero bytes."""
    table, pieces = [], []
    pos = HEADER.size + ENTRY.size * len(sections)
    for kind, alignment, data in sections:
        offset = _align_up(pos, alignment)
        pieces += [bytes(offset - pos), data]
        table.append(ENTRY.pack(kind, alignment, offset, len(data), zlib.crc32(data), 0))
        pos = offset + len(data)
    table = b"".join(table)
    head = HEADER.pack(MAGIC, *version, flags, len(sections), 0, pos)
    checksum = zlib.crc32(table, zlib.crc32(head[:CHECKSUMMED_HEADER]))
    head = HEADER.pack(MAGIC, *version, flags, len(sections), checksum, pos)
    return b"".join([head, table, *pieces])


def write_bundle(manifest: dict, spirv_modules: list[bytes], weights: bytes, *,
                 weights_alignment: int = MIN_WEIGHTS_ALIGNMENT, barriers: bool = True) -> bytes:
    """Serialize a bundle. Raises ValueError (BundleError for manifest rules) on anything a
    reader would reject, so every bundle written here reads back. barriers=False skips only the
    barrier check (FORMAT.md, "Barriers"): for tests that need a racy schedule the reader refuses."""
    if not _is_int(weights_alignment) or weights_alignment < MIN_WEIGHTS_ALIGNMENT or not _is_pow2(weights_alignment):
        raise ValueError(f"weights_alignment = {weights_alignment!r} must be a power of two >= "
                         f"{MIN_WEIGHTS_ALIGNMENT} (4096, or 16384 for 16 KiB-page Android devices)")
    modules = [bytes(m) for m in spirv_modules]
    for i, module in enumerate(modules):
        if len(module) < SPIRV_MIN_SIZE or len(module) % 4 or int.from_bytes(module[:4], "little") != SPIRV_MAGIC:
            raise ValueError(f"spirv_modules[{i}] ({len(module)} bytes) is not SPIR-V: it must be a multiple "
                             f"of 4 bytes, at least {SPIRV_MIN_SIZE}, starting with the word 0x{SPIRV_MAGIC:08x}")
        _spirv.check_structure(module, f"spirv_modules[{i}]")
    weights = memoryview(weights).cast("B") if not isinstance(weights, bytes) else weights
    validate_manifest(manifest, module_count=len(modules), weights_bytes=len(weights))
    parsed = _spirv.check_interface(manifest, modules)
    if barriers:
        _check_schedules(manifest, parsed)
    text = json.dumps(manifest, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8")
    sections = [(SectionKind.MANIFEST, MANIFEST_ALIGNMENT, text)]
    sections += [(SectionKind.SPIRV, SPIRV_ALIGNMENT, m) for m in modules]
    # Always written, even when empty, so section_count >= 2 and readers find one place for weights.
    sections.append((SectionKind.WEIGHTS, weights_alignment, weights))
    stateful = any("state" in v for v in variant_views(manifest))
    return _assemble(sections, STATE_VERSION if stateful else VERSION if "variants" in manifest else FLAT_VERSION)


def _check_schedules(manifest: dict, parsed: list) -> None:
    """The barrier rule over each variant's schedule (the one schedule of a flat manifest)."""
    written = [m.written_bindings() for m in parsed]
    for v, view in enumerate(variant_views(manifest)):
        try:
            check_barriers(view, written)
        except BundleError as e:
            raise in_variant(f"variants[{v}]" if "variants" in manifest else "", e) from None


# ---- reading -----------------------------------------------------------------------------

def _crc(base: memoryview, start: int, end: int, seed: int = 0) -> int:
    with base[start:end] as view:  # released at once, so a failed read can unmap cleanly
        return zlib.crc32(view, seed)


def _first_nonzero(base: memoryview, start: int, end: int) -> int | None:
    for chunk_start in range(start, end, _CHUNK):
        with base[chunk_start:min(end, chunk_start + _CHUNK)] as view:
            chunk = bytes(view)
        rest = chunk.lstrip(b"\0")
        if rest:
            return chunk_start + len(chunk) - len(rest)
    return None


def _read_header(base: memoryview) -> tuple[int, int, int, int]:
    """Check the header and table framing; return (major, minor, flags, section_count)."""
    size = len(base)
    if size < HEADER.size:
        _fail("header size", f"the file is {size} bytes but the header alone is {HEADER.size}")
    magic, major, minor, flags, count, checksum, file_size = HEADER.unpack_from(base, 0)
    if magic != MAGIC:
        _fail("magic", f"the file starts with {magic!r}, not {MAGIC!r}; it is not a .vkb bundle")
    if major > VERSION[0]:
        _fail("version", f"the bundle is format version {major}.{minor} but this reader supports "
                         f"{VERSION[0]}.{VERSION[1]} (any {VERSION[0]}.x); upgrade vkc to read it")
    if file_size != size:
        _fail("file size", f"the header says {file_size} bytes but the file is {size} bytes "
                           "(truncated or extended?)")
    if not MIN_SECTIONS <= count <= MAX_SECTIONS:
        _fail("section count", f"section_count = {count} is not in {MIN_SECTIONS}..={MAX_SECTIONS}")
    table_end = HEADER.size + ENTRY.size * count
    if table_end > size:
        _fail("section table bounds", f"{count} sections need a table at bytes {HEADER.size}..{table_end} "
                                      f"but the file is {size} bytes")
    actual = _crc(base, HEADER.size, table_end, _crc(base, 0, CHECKSUMMED_HEADER))
    if actual != checksum:
        _fail("header checksum", f"the header says 0x{checksum:08x} but bytes 0..{CHECKSUMMED_HEADER} "
                                 f"and the table hash to 0x{actual:08x}")
    return major, minor, flags, count


def _read_table(base: memoryview, count: int) -> list[Section]:
    """Parse entries and check each lies, aligned, inside the file, after the table, unshared."""
    size, table_end = len(base), HEADER.size + ENTRY.size * count
    sections = []
    for i in range(count):
        kind, alignment, offset, length, checksum, _reserved = ENTRY.unpack_from(base, HEADER.size + ENTRY.size * i)
        if kind not in SectionKind._value2member_map_:
            _fail("section kind", f"{_name(i, kind)} has unknown kind {kind} (known: 1 MANIFEST, 2 SPIRV, 3 WEIGHTS)")
        name = _name(i, kind)
        if alignment < 4 or not _is_pow2(alignment):
            _fail("section alignment", f"{name} has alignment {alignment}, not a power of two >= 4")
        if offset % alignment:
            _fail("section alignment", f"{name} starts at byte {offset}, not a multiple of its alignment {alignment}")
        if offset + length > size:
            _fail("section bounds", f"{name} spans bytes {offset}..{offset + length} but the file is {size} bytes")
        sections.append(Section(i, SectionKind(kind), alignment, offset, length, checksum))
    # In file order each section starts at or after the end of the table and of the one before.
    # (So a zero-size section may not sit inside another one either.)
    prev_end, prev_name = table_end, "the header and section table"
    for s in sorted(sections, key=lambda s: (s.offset, s.end)):
        if s.offset < prev_end:
            _fail("section overlap", f"{_name(s.index, s.kind)} starts at byte {s.offset}, inside "
                                     f"{prev_name} (which ends at byte {prev_end})")
        prev_end, prev_name = s.end, _name(s.index, s.kind)
    return sections


def _check_sections(base: memoryview, sections: list[Section], table_end: int) -> None:
    """Counts, per-kind rules, checksums, zero padding."""
    kinds = [s.kind for s in sections]
    if kinds.count(SectionKind.MANIFEST) != 1:
        _fail("section counts", f"a bundle has exactly one MANIFEST section; this one has {kinds.count(SectionKind.MANIFEST)}")
    if kinds.count(SectionKind.WEIGHTS) > 1:
        _fail("section counts", f"a bundle has at most one WEIGHTS section; this one has {kinds.count(SectionKind.WEIGHTS)}")
    for s in sections:
        name = _name(s.index, s.kind)
        if s.kind == SectionKind.WEIGHTS and s.alignment < MIN_WEIGHTS_ALIGNMENT:
            _fail("weights alignment", f"{name} has alignment {s.alignment}, below {MIN_WEIGHTS_ALIGNMENT}")
        if s.kind == SectionKind.SPIRV and (s.size < SPIRV_MIN_SIZE or s.size % 4):
            _fail("spirv size", f"{name} is {s.size} bytes, not a multiple of 4 of at least {SPIRV_MIN_SIZE} bytes "
                                "(the 5-word SPIR-V header)")
    for s in sections:
        actual = _crc(base, s.offset, s.end)
        if actual != s.checksum:
            _fail("section checksum", f"{_name(s.index, s.kind)} (bytes {s.offset}..{s.end}) should hash to "
                                      f"0x{s.checksum:08x} but hashes to 0x{actual:08x}")
    for s in sections:  # after the checksums, so a wrong magic means a wrong writer, not a bad disk
        if s.kind == SectionKind.SPIRV:
            with base[s.offset:s.end] as view:
                word = int.from_bytes(view[:4], "little")
                if word != SPIRV_MAGIC:
                    _fail("spirv magic", f"{_name(s.index, s.kind)} starts with 0x{word:08x}, not the SPIR-V magic "
                                         f"0x{SPIRV_MAGIC:08x}")
                _spirv.check_structure(view, _name(s.index, s.kind))
    pos = table_end
    for s in sorted(sections, key=lambda s: s.offset) + [None]:
        gap_end = s.offset if s is not None else len(base)
        bad = _first_nonzero(base, pos, gap_end)
        if bad is not None:
            _fail("padding", f"byte {bad} lies between sections (bytes {pos}..{gap_end}) and is "
                             f"0x{base[bad]:02x}, not zero")
        if s is not None:
            pos = max(pos, s.end)


def _no_duplicate_keys(pairs: list) -> dict:
    out = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"key {key!r} appears twice in one object")
        out[key] = value
    return out


def _reject_constant(name: str):
    raise ValueError(f"{name} is not JSON")


def _read_manifest(base: memoryview, section: Section) -> dict:
    with base[section.offset:section.end] as view:
        raw = bytes(view)
    try:
        manifest = json.loads(raw.decode("utf-8"), object_pairs_hook=_no_duplicate_keys,
                              parse_constant=_reject_constant)
    except RecursionError:
        _fail("manifest json", "the manifest nests too deeply")
    except ValueError as e:  # also UnicodeDecodeError and Python's int-digits limit
        _fail("manifest json", f"the manifest is not valid UTF-8 JSON: {e}")
    if not isinstance(manifest, dict):
        _fail("manifest json", f"the manifest is a JSON {type(manifest).__name__}, not an object")
    return manifest


def _container(base: memoryview) -> tuple[int, int, int, list[Section]]:
    """Every container-level check (the ones vkb_reader.h makes too), in the order FORMAT.md gives."""
    major, minor, flags, count = _read_header(base)
    sections = _read_table(base, count)
    _check_sections(base, sections, HEADER.size + ENTRY.size * count)
    return major, minor, flags, sections


def _parse(base: memoryview, mapping) -> Bundle:
    major, minor, flags, sections = _container(base)
    manifest = _read_manifest(base, next(s for s in sections if s.kind == SectionKind.MANIFEST))
    spirv_sections = [s for s in sections if s.kind == SectionKind.SPIRV]
    weights_section = next((s for s in sections if s.kind == SectionKind.WEIGHTS), None)
    weights_bytes = weights_section.size if weights_section else 0
    validate_manifest(manifest, module_count=len(spirv_sections), weights_bytes=weights_bytes)
    views = [base[s.offset:s.end] for s in spirv_sections]
    try:
        parsed = _spirv.check_interface(manifest, views)
    finally:
        for view in views:
            view.release()
    # Barrier flags are checked, not trusted: derived from the bindings' ranges and SPIR-V writes.
    _check_schedules(manifest, parsed)
    # Only now hand out views: nothing below can fail, so no view outlives a failed read.
    spirv = [base[s.offset:s.end] for s in spirv_sections]
    weights = base[weights_section.offset:weights_section.end] if weights_section else base[0:0]
    return Bundle((major, minor), flags, manifest, spirv, weights, sections, base, mapping)


@dataclass(frozen=True)
class Container:
    """What `check_container` found: the header fields and the section table."""
    version: tuple[int, int]
    flags: int
    sections: list[Section]


def check_container(source: bytes | bytearray | memoryview | str | os.PathLike) -> Container:
    """Only the container-level checks: header, table, bounds, overlap, alignment, checksums,
    padding and SPIR-V framing, not the manifest. These are exactly the checks of the C reader
    (vkb_reader.h), in the same order, so both name the same first failed check for any file."""
    base, mapping = _open(source)
    try:
        major, minor, flags, sections = _container(base)
        return Container((major, minor), flags, sections)
    finally:
        base.release()
        if mapping is not None:
            mapping.close()


def _open(source) -> tuple[memoryview, mmap.mmap | None]:
    mapping = None
    if isinstance(source, (str, os.PathLike)):
        with open(source, "rb") as f:
            if os.fstat(f.fileno()).st_size:  # mmap refuses empty files; those fail 'header size'
                mapping = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        base = memoryview(mapping) if mapping is not None else memoryview(b"")
    elif isinstance(source, (bytes, bytearray, memoryview)):
        base = memoryview(source).toreadonly()
        if base.ndim != 1 or base.format != "B":
            base = base.cast("B")  # TypeError for a non-contiguous view, as for any buffer API
    else:
        raise TypeError(f"read_bundle takes bytes, bytearray, memoryview or a path, not {type(source).__name__}")
    return base, mapping


def read_bundle(source: bytes | bytearray | memoryview | str | os.PathLike) -> Bundle:
    """Read and fully validate a bundle from bytes (zero-copy views) or a path (mmap, read-only).
    Raises BundleError naming the failed check; OSError if the file cannot be opened."""
    base, mapping = _open(source)
    try:
        return _parse(base, mapping)
    except BaseException:
        base.release()
        if mapping is not None:
            mapping.close()
        raise
