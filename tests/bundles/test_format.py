"""The .vkb container: round trips, every reader check by a targeted mutation, and a fuzz loop."""
import json
import mmap
import random
import struct

import numpy as np
import pytest

from bundles import DTYPE_ITEMSIZE, Bundle, BundleError, SectionKind, read_bundle, write_bundle

MANIFEST, SPIRV, WEIGHTS = SectionKind.MANIFEST, SectionKind.SPIRV, SectionKind.WEIGHTS


@pytest.fixture
def modules(raw):
    return list(raw.MODULES)


@pytest.fixture
def sample(manifest, modules, weights):
    """A valid bundle: manifest (section 0), two SPIR-V modules (1, 2), weights (3)."""
    return write_bundle(manifest, modules, weights)


def assert_same(bundle, manifest, modules, weights):
    assert bundle.manifest == manifest
    assert [bytes(m) for m in bundle.spirv] == modules
    assert bytes(bundle.weights) == weights


def expect(data, check, *fragments):
    with pytest.raises(BundleError) as info:
        read_bundle(data)
    assert info.value.check == check, str(info.value)
    message = str(info.value)
    assert message.startswith(f"bundle check '{check}' failed: ")
    for fragment in fragments:
        assert fragment in message, message
    return message


# ---- round trips -----------------------------------------------------------------------------

def test_round_trip_bytes(sample, manifest, modules, weights):
    bundle = read_bundle(sample)
    assert bundle.version == (1, 1)
    assert_same(bundle, manifest, modules, weights)
    assert [s.kind for s in bundle.sections] == [MANIFEST, SPIRV, SPIRV, WEIGHTS]
    assert isinstance(bundle.weights, memoryview) and bundle.weights.readonly
    assert write_bundle(manifest, modules, weights) == sample  # deterministic
    manifest_section = bundle.sections[0]
    text = sample[manifest_section.offset:manifest_section.end]
    assert json.loads(text) == manifest and b" " not in text  # compact JSON


def test_bytes_source_is_not_copied(sample, manifest, modules, weights):
    source = bytearray(sample)
    bundle = read_bundle(source)
    assert bundle.weights.obj is source and bundle.spirv[0].obj is source
    assert bundle.weights.readonly  # a bytearray source does not make the views writable
    from_numpy = read_bundle(memoryview(np.frombuffer(sample, dtype=np.uint8)))
    assert_same(from_numpy, manifest, modules, weights)


def test_round_trip_path_through_mmap(tmp_path, sample, manifest, modules, weights):
    path = tmp_path / "model.vkb"
    path.write_bytes(sample)
    with read_bundle(path) as bundle:
        assert isinstance(bundle.weights.obj, mmap.mmap)
        assert_same(bundle, manifest, modules, weights)
        array = np.frombuffer(bundle.weights, dtype=np.float32)
        assert array.tobytes() == weights
        with pytest.raises(BufferError):  # the array still uses the mapping
            bundle.close()
        del array
    with pytest.raises(ValueError):  # released by close()
        bytes(bundle.weights)
    bundle = read_bundle(str(path))  # str path as well
    assert bundle.manifest == manifest
    bundle.close()
    bundle.close()  # idempotent


@pytest.mark.parametrize("alignment", [4096, 16384])
def test_weights_alignment(manifest, modules, weights, alignment):
    data = write_bundle(manifest, modules, weights, weights_alignment=alignment)
    bundle = read_bundle(data)
    section = bundle.sections[-1]
    assert section.kind == WEIGHTS and section.alignment == alignment
    assert section.offset % alignment == 0 and section.offset > 0
    assert data[section.offset:section.end] == weights
    assert len(data) == section.end
    assert data[bundle.sections[-2].end:section.offset] == bytes(section.offset - bundle.sections[-2].end)


def test_every_section_aligned(sample):
    for s in read_bundle(sample).sections:
        expected = {MANIFEST: 8, SPIRV: 16, WEIGHTS: 4096}[s.kind]
        assert s.alignment == expected and s.offset % expected == 0


@pytest.mark.parametrize("modules_count", [0, 1])
def test_no_weights(raw, modules_count):
    manifest = raw.make_minimal_manifest(modules_count)
    data = write_bundle(manifest, [raw.SPIRV] * modules_count, b"")
    bundle = read_bundle(data)
    assert len(bundle.weights) == 0 and len(bundle.spirv) == modules_count
    assert [s.kind for s in bundle.sections][-1] == WEIGHTS  # always written, so count >= 2


def test_file_without_weights_section_loads(raw):
    manifest = raw.make_minimal_manifest(1)
    data = raw.build([(MANIFEST, 8, json.dumps(manifest).encode()), (SPIRV, 16, raw.SPIRV)])
    bundle = read_bundle(bytes(data))
    assert bundle.manifest == manifest and len(bundle.weights) == 0


def test_writer_accepts_buffers(manifest, modules, weights):
    array = np.frombuffer(weights, dtype=np.float32)
    assert write_bundle(manifest, [bytearray(m) for m in modules], array) == write_bundle(manifest, modules, weights)


def test_dtype_itemsize():
    assert DTYPE_ITEMSIZE == {"float32": 4, "float16": 2, "int32": 4, "int64": 8, "uint8": 1, "int8": 1, "bool": 1,
                              "float64": 8, "int16": 2, "uint16": 2, "uint32": 4, "uint64": 8}  # format 1.1


# ---- the writer refuses what a reader would ----------------------------------------------------

def test_writer_weights_bytes_mismatch(manifest, modules, weights):
    with pytest.raises(ValueError, match=r"memory\.weights_bytes = 9472 but the WEIGHTS section is 9468 bytes"):
        write_bundle(manifest, modules, weights[:-4])


def test_writer_module_count_mismatch(manifest, modules, weights):
    with pytest.raises(ValueError, match="modules has 2 entries but the bundle has 1 SPIR-V sections"):
        write_bundle(manifest, modules[:1], weights)


@pytest.mark.parametrize("module", [b"", b"\x03\x02\x23\x07\x00", b"\x00" * 20])
def test_writer_rejects_non_spirv(manifest, modules, weights, module):
    with pytest.raises(ValueError, match=r"spirv_modules\[1\]"):
        write_bundle(manifest, [modules[0], module], weights)


@pytest.mark.parametrize("alignment", [0, 2048, 4095, 12288, True, 4096.0])
def test_writer_rejects_weights_alignment(manifest, modules, weights, alignment):
    with pytest.raises(ValueError, match="weights_alignment"):
        write_bundle(manifest, modules, weights, weights_alignment=alignment)


def test_writer_rejects_invalid_manifest(manifest, modules, weights):
    manifest["tensors"][0]["nbytes"] = 4
    with pytest.raises(BundleError, match=r"tensors\[0\]\.nbytes = 4"):
        write_bundle(manifest, modules, weights)


# ---- each reader check, triggered by one mutation --------------------------------------------

def test_check_header_size(sample):
    expect(sample[:31], "header size", "31 bytes")
    expect(b"", "header size", "0 bytes")


def test_check_magic(sample):
    expect(b"VKCBNDX\0" + sample[8:], "magic", "b'VKCBNDX\\x00'")


def test_check_newer_major_refused(sample, raw):
    data = bytearray(sample)
    struct.pack_into("<HH", data, 8, 2, 3)
    expect(bytes(raw.reseal(data)), "version", "format version 2.3", "supports 1.2")


@pytest.mark.parametrize("version", [(1, 0), (1, 7), (1, 65535), (0, 9)])
def test_same_or_older_major_any_minor_loads(sample, raw, manifest, version):
    data = bytearray(sample)
    struct.pack_into("<HH", data, 8, *version)
    bundle = read_bundle(bytes(raw.reseal(data)))
    assert bundle.version == version and bundle.manifest == manifest


def test_unknown_flags_and_reserved_ignored(sample, raw, manifest):
    data = bytearray(sample)
    struct.pack_into("<I", data, 12, 0xFFFFFFFF)
    raw.set_entry(data, 1, reserved=7)
    bundle = read_bundle(bytes(raw.reseal(data)))
    assert bundle.flags == 0xFFFFFFFF and bundle.manifest == manifest


def test_check_file_size(sample):
    n = len(sample)
    expect(sample[:-1], "file size", f"header says {n} bytes", f"file is {n - 1} bytes")
    expect(sample + b"\0", "file size", f"file is {n + 1} bytes")
    data = bytearray(sample)
    struct.pack_into("<Q", data, 24, n + 4096)
    expect(bytes(data), "file size", f"header says {n + 4096} bytes")


@pytest.mark.parametrize("count", [0, 1, 4097, 65536, 0xFFFFFFFF])
def test_check_section_count(sample, raw, count):
    data = bytearray(sample)
    struct.pack_into("<I", data, 16, count)
    expect(bytes(raw.reseal(data, sections=False)), "section count", f"section_count = {count}")


def test_check_section_table_bounds(sample, raw):
    data = bytearray(sample)
    struct.pack_into("<I", data, 16, 1000)
    expect(bytes(raw.reseal(data, sections=False)), "section table bounds",
           "1000 sections need a table at bytes 32..32032", f"file is {len(sample)} bytes")


def test_check_header_checksum(sample):
    for at in (12, 16 + 32):  # a flag bit; a byte of the table
        data = bytearray(sample)
        data[at] ^= 0x10
        expect(bytes(data), "header checksum", "the header says 0x")


def test_check_section_kind(sample, raw):
    data = raw.set_entry(bytearray(sample), 2, kind=9)
    expect(bytes(raw.reseal(data)), "section kind", "section 2 (kind 9) has unknown kind 9")


@pytest.mark.parametrize("alignment", [0, 2, 12, 0x80000001])
def test_check_section_alignment_power_of_two(sample, raw, alignment):
    data = raw.set_entry(bytearray(sample), 1, alignment=alignment)
    expect(bytes(raw.reseal(data)), "section alignment", f"section 1 (SPIRV) has alignment {alignment}")


def test_check_section_offset_multiple_of_alignment(sample, raw):
    data = raw.set_entry(bytearray(sample), 0, alignment=4096)  # the manifest sits at byte 160
    expect(bytes(raw.reseal(data)), "section alignment",
           "section 0 (MANIFEST) starts at byte 160, not a multiple of its alignment 4096")


def test_check_section_bounds(sample, raw):
    data = bytearray(sample)
    _, _, offset, _, _, _ = raw.entry(data, 2)
    raw.set_entry(data, 2, size=len(sample) + 100 - offset)
    expect(bytes(raw.reseal(data, sections=False)), "section bounds",
           f"section 2 (SPIRV) spans bytes {offset}..{len(sample) + 100} but the file is {len(sample)} bytes")
    raw.set_entry(data, 2, offset=2**64 - 16, size=16)  # no wrap-around
    expect(bytes(raw.reseal(data, sections=False)), "section bounds", f"spans bytes {2**64 - 16}..")


def test_check_section_overlap_between_sections(sample, raw):
    data = bytearray(sample)
    first = raw.entry(data, 1)
    raw.set_entry(data, 2, offset=first[2], size=first[3], checksum=first[4])  # same bytes twice
    message = expect(bytes(raw.reseal(data)), "section overlap", "starts at byte 1776")
    assert "section 1 (SPIRV)" in message and "section 2 (SPIRV)" in message


def test_check_section_overlap_with_table(sample, raw):
    data = raw.set_entry(bytearray(sample), 1, offset=128)  # inside the 4-entry table (32..160)
    expect(bytes(raw.reseal(data)), "section overlap",
           "section 1 (SPIRV) starts at byte 128, inside the header and section table (which ends at byte 160)")


def test_check_zero_size_section_inside_another(sample, raw):
    data = raw.set_entry(bytearray(sample), 3, offset=200, size=0, alignment=8)
    expect(bytes(raw.reseal(data)), "section overlap", "section 3 (WEIGHTS) starts at byte 200")


def test_check_exactly_one_manifest(raw, manifest, weights, modules):
    text = json.dumps(manifest).encode()
    none = raw.build([(SPIRV, 16, modules[0]), (WEIGHTS, 4096, weights)])
    expect(bytes(none), "section counts", "exactly one MANIFEST section; this one has 0")
    two = raw.build([(MANIFEST, 8, text), (MANIFEST, 8, text), (WEIGHTS, 4096, weights)])
    expect(bytes(two), "section counts", "exactly one MANIFEST section; this one has 2")


def test_check_at_most_one_weights(raw, manifest, weights, modules):
    text = json.dumps(manifest).encode()
    data = raw.build([(MANIFEST, 8, text), (SPIRV, 16, modules[0]), (SPIRV, 16, modules[1]),
                      (WEIGHTS, 4096, weights), (WEIGHTS, 4096, weights)])
    expect(bytes(data), "section counts", "at most one WEIGHTS section; this one has 2")


def test_check_weights_alignment(raw, manifest, weights, modules):
    data = raw.build([(MANIFEST, 8, json.dumps(manifest).encode()), (SPIRV, 16, modules[0]),
                      (SPIRV, 16, modules[1]), (WEIGHTS, 256, weights)])
    expect(bytes(data), "weights alignment", "section 3 (WEIGHTS) has alignment 256, below 4096")


@pytest.mark.parametrize("module", [b"", b"\x03\x02\x23\x07\x00\x00", b"\x03\x02\x23\x07" + bytes(12)])
def test_check_spirv_size(raw, manifest, weights, modules, module):
    data = raw.build([(MANIFEST, 8, json.dumps(manifest).encode()), (SPIRV, 16, modules[0]),
                      (SPIRV, 16, module), (WEIGHTS, 4096, weights)])
    expect(bytes(data), "spirv size", f"section 2 (SPIRV) is {len(module)} bytes, not a multiple of 4 of at "
           "least 20 bytes")


def test_check_spirv_magic(sample, raw):
    data = bytearray(sample)
    data[raw.entry(data, 1)[2]] = 0x04
    expect(bytes(raw.reseal(data)), "spirv magic", "section 1 (SPIRV) starts with 0x07230204")


@pytest.mark.parametrize("section", [0, 1, 3])
def test_check_section_checksum(sample, raw, section):
    data = bytearray(sample)
    _, _, offset, size, _, _ = raw.entry(data, section)
    data[offset + size // 2] ^= 0x01
    expect(bytes(data), "section checksum", f"section {section} ", f"(bytes {offset}..{offset + size})")


def test_check_padding(sample, raw):
    data = bytearray(sample)
    spirv_end = raw.entry(data, 2)[2] + raw.entry(data, 2)[3]
    data[spirv_end + 5] = 0xAB
    expect(bytes(data), "padding", f"byte {spirv_end + 5} lies between sections", "0xab")


def test_check_trailing_bytes_after_last_section(raw, manifest, modules, weights):
    data = raw.build([(MANIFEST, 8, json.dumps(manifest).encode()), (SPIRV, 16, modules[0]),
                      (SPIRV, 16, modules[1]), (WEIGHTS, 4096, weights)])
    data += b"\x00\x00\x07\x00"
    struct.pack_into("<Q", data, 24, len(data))
    expect(bytes(data), "padding", f"byte {len(data) - 2}")
    data[-2] = 0  # zero trailing bytes are padding and accepted
    assert read_bundle(bytes(data)).manifest == manifest


@pytest.mark.parametrize("text, fragment", [
    (b"\xff{}", "not valid UTF-8 JSON"),
    (b"{", "not valid UTF-8 JSON"),
    (b"[]", "the manifest is a JSON list, not an object"),
    (b'{"a": 1, "a": 2}', "key 'a' appears twice"),
    (b'{"a": NaN}', "NaN is not JSON"),
    (b'{"a": Infinity}', "Infinity is not JSON"),
    (b"[" * 100000 + b"]" * 100000, "nests too deeply"),
    (b'{"a": ' + b"9" * 5000 + b"}", "not valid UTF-8 JSON"),
])
def test_check_manifest_json(raw, modules, text, fragment):
    data = raw.build([(MANIFEST, 8, text), (SPIRV, 16, modules[0])])
    expect(bytes(data), "manifest json", fragment)


def test_manifest_validated_on_read(raw, manifest, modules, weights):
    data = raw.build([(MANIFEST, 8, json.dumps(manifest).encode()), (SPIRV, 16, modules[0]),
                      (WEIGHTS, 4096, weights)])
    expect(bytes(data), "manifest", "modules has 2 entries but the bundle has 1 SPIR-V sections")
    manifest["memory"]["weights_bytes"] = 4
    data = raw.build([(MANIFEST, 8, json.dumps(manifest).encode()), (SPIRV, 16, modules[0]),
                      (SPIRV, 16, modules[1]), (WEIGHTS, 4096, weights)])
    expect(bytes(data), "manifest", "memory.weights_bytes = 4 but the WEIGHTS section is 9472 bytes")


def test_sections_in_any_file_order(raw, manifest, modules, weights):
    """The table order numbers the modules; the bytes may lie in any order."""
    manifest["modules"].reverse()  # table module 0 is modules[1] now, so its entry comes first
    for kernel in manifest["kernels"]:
        kernel["module"] = 1 - kernel["module"]
    text = json.dumps(manifest).encode()
    data = raw.build([(WEIGHTS, 4096, weights, 4096), (SPIRV, 16, modules[1], 2048),
                      (SPIRV, 16, modules[0], 224), (MANIFEST, 8, text, 16384)])
    bundle = read_bundle(bytes(data))
    assert bundle.manifest == manifest and bytes(bundle.weights) == weights
    assert [bytes(m) for m in bundle.spirv] == [modules[1], modules[0]]


def test_path_errors(tmp_path, sample):
    empty = tmp_path / "empty.vkb"
    empty.write_bytes(b"")
    expect(empty, "header size", "0 bytes")
    cut = tmp_path / "cut.vkb"
    cut.write_bytes(sample[:-10])
    expect(cut, "file size")
    with pytest.raises(FileNotFoundError):
        read_bundle(tmp_path / "missing.vkb")
    with pytest.raises(TypeError):
        read_bundle(42)


# ---- fuzz: anything but BundleError or the original content is a bug ----------------------

def _mutate(rng: random.Random, data: bytes) -> bytes:
    buf = bytearray(data)
    op = rng.randrange(6)
    if op == 0:  # one bit
        at = rng.randrange(len(buf))
        buf[at] ^= 1 << rng.randrange(8)
    elif op == 1:  # a few random bytes, biased to the header and table
        for _ in range(rng.randint(1, 4)):
            at = rng.randrange(160) if rng.random() < 0.5 else rng.randrange(len(buf))
            buf[at] = rng.randrange(256)
    elif op == 2:  # truncation
        del buf[rng.randrange(len(buf)):]
    elif op == 3:  # extension
        buf += bytes(rng.randrange(256) for _ in range(rng.randint(1, 64)))
    elif op == 4:  # an interesting value in a header or table field
        at = rng.choice([8, 10, 12, 16, 20, 24] + [32 + 32 * i + f for i in range(4) for f in (0, 4, 8, 16, 24, 28)])
        value = rng.choice([0, 1, 3, 4, 5, 16, 4096, 2**31, 2**32 - 1, 2**63, 2**64 - 1, len(buf), len(buf) - 1])
        struct.pack_into("<Q", buf, at, value % 2**64) if at + 8 <= len(buf) else None
    else:  # a slice moved
        a, b = sorted(rng.randrange(len(buf)) for _ in range(2))
        to = rng.randrange(len(buf))
        buf[to:to] = buf[a:b]
    return bytes(buf)


def test_mutation_fuzz(sample, manifest, modules, weights, raw):
    rng = random.Random(1234)
    outcomes = {"rejected": 0, "identical": 0, "loaded": 0}
    for i in range(3000):
        data = _mutate(rng, sample)
        resealed = i >= 2000  # the last 1000 get fresh checksums, so deeper checks see the damage
        if resealed:
            data = bytes(raw.reseal(data))
        try:
            bundle = read_bundle(data)
        except BundleError:
            outcomes["rejected"] += 1
            continue
        except Exception as e:  # pragma: no cover - the failure message is the point
            pytest.fail(f"iteration {i}: {type(e).__name__}: {e}")
        if not resealed or data == sample:
            assert_same(bundle, manifest, modules, weights)
            outcomes["identical"] += 1
        else:  # a resealed change inside a section's payload can be a different, valid bundle
            assert isinstance(bundle, Bundle)
            outcomes["loaded"] += 1
    assert outcomes["rejected"] > 2500, outcomes


def test_mutation_fuzz_through_mmap(tmp_path, sample, manifest, modules, weights, raw):
    """The mmap path must fail just as cleanly (and unmap: no view outlives a failed read)."""
    rng = random.Random(77)
    path = tmp_path / "fuzz.vkb"
    for i in range(200):
        data = _mutate(rng, sample)
        path.write_bytes(bytes(raw.reseal(data)) if i % 2 else data)
        try:
            with read_bundle(path) as bundle:
                assert isinstance(bundle, Bundle)
        except BundleError:
            pass
        except Exception as e:  # pragma: no cover
            pytest.fail(f"iteration {i}: {type(e).__name__}: {e}")
