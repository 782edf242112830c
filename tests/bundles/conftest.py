"""Fixtures for the bundle tests: a valid sample manifest (tests/sample_bundle.py) and a byte-level
builder written from FORMAT.md independently of bundles.format, so a symmetric writer/reader bug
cannot hide."""
import struct
import types
import zlib

import pytest

from tests.sample_bundle import MODULES, SPIRV, make_manifest, make_minimal_manifest, make_spirv, make_weights


# ---- byte-level helpers, from FORMAT.md alone ------------------------------------------------

def build_raw(sections, *, version=(1, 0), flags=0, start=None):
    """sections: (kind, alignment, data[, offset]) laid out in order; returns a sealed bytearray."""
    pos = start if start is not None else 32 + 32 * len(sections)
    placed, table = [], []
    for entry in sections:
        kind, align, data = entry[:3]
        offset = entry[3] if len(entry) > 3 else -(-pos // align) * align
        placed.append((kind, align, offset, data))
        pos = max(pos, offset + len(data))
    out = bytearray(max(pos, 32 + 32 * len(sections)))
    for kind, align, offset, data in placed:
        table.append((kind, align, offset, len(data)))
        out[offset:offset + len(data)] = data
    for i, (kind, align, offset, size) in enumerate(table):
        crc = zlib.crc32(out[offset:offset + size])
        struct.pack_into("<IIQQII", out, 32 + 32 * i, kind, align, offset, size, crc, 0)
    struct.pack_into("<8sHHIIIQ", out, 0, b"VKCBNDL\0", *version, flags, len(sections), 0, len(out))
    return reseal(out, sections=False)


def reseal(buf, *, sections=True):
    """Recompute section checksums (where the entry lies in the file) and the header checksum."""
    buf = bytearray(buf)
    if len(buf) < 32:
        return buf
    count = struct.unpack_from("<I", buf, 16)[0]
    count = min(count, (len(buf) - 32) // 32)
    if sections:
        for i in range(count):
            at = 32 + 32 * i
            _, _, offset, size = struct.unpack_from("<IIQQ", buf, at)
            if offset + size <= len(buf):
                struct.pack_into("<I", buf, at + 24, zlib.crc32(buf[offset:offset + size]))
    full = struct.unpack_from("<I", buf, 16)[0]
    table = buf[32:32 + 32 * full]
    struct.pack_into("<I", buf, 20, zlib.crc32(bytes(table), zlib.crc32(bytes(buf[:20]))))
    return buf


def entry(buf, i):
    """Section-table entry i as (kind, alignment, offset, size, checksum, reserved)."""
    return struct.unpack_from("<IIQQII", buf, 32 + 32 * i)


def set_entry(buf, i, **fields):
    """Change fields of entry i (kind, alignment, offset, size, checksum, reserved), in place."""
    names = ("kind", "alignment", "offset", "size", "checksum", "reserved")
    values = dict(zip(names, entry(buf, i)))
    values.update(fields)
    struct.pack_into("<IIQQII", buf, 32 + 32 * i, *(values[n] for n in names))
    return buf


@pytest.fixture
def manifest():
    return make_manifest()


@pytest.fixture
def weights():
    return make_weights()


@pytest.fixture
def raw():
    """The byte-level helpers, as one namespace (test modules do not import conftest)."""
    return types.SimpleNamespace(build=build_raw, reseal=reseal, entry=entry, set_entry=set_entry,
                                 SPIRV=SPIRV, MODULES=MODULES, make_spirv=make_spirv, make_manifest=make_manifest,
                                 make_minimal_manifest=make_minimal_manifest, make_weights=make_weights)


# ---- the fuzz report: test_fuzz.py fills it, the terminal summary prints it --------------------

_FUZZ_REPORT: list = []


@pytest.fixture
def fuzz_report():
    return _FUZZ_REPORT


def pytest_terminal_summary(terminalreporter):
    if _FUZZ_REPORT:
        terminalreporter.write_sep("-", "vkb fuzz (tests/bundles/test_fuzz.py)")
        for line in _FUZZ_REPORT:
            terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def c_checker(tmp_path_factory):
    """(path of the built bundles/vkb_check, a label of how it was built)."""
    from tests.bundles import c_reader
    return c_reader.build(tmp_path_factory.mktemp("vkb_check"))
