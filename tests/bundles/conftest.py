"""Fixtures for the bundle tests: a valid sample manifest and a byte-level builder written from
FORMAT.md independently of bundles.format, so a symmetric writer/reader bug cannot hide."""
import struct
import types
import zlib

import numpy as np
import pytest

def make_spirv(local_size=(64, 1, 1), bindings=2, shared_bytes=0, version=(1, 3)) -> bytes:
    """A tiny valid compute module, assembled from the SPIR-V spec (not from bundles.spirv): entry
    point `main`, LocalSize `local_size`, storage buffers at set 0, bindings 0..bindings-1, and a
    float[shared_bytes / 4] shared array when shared_bytes > 0. Its body just returns."""
    def op(code, *operands):
        return [(len(operands) + 1) << 16 | code, *operands]
    VOID, FN, FLOAT, RTA, STRUCT, PTR, MAIN, LABEL, UINT, N, ARR, WPTR, WVAR = range(1, 14)
    variables = list(range(14, 14 + bindings))
    name = list(struct.unpack("<2I", b"main\0\0\0\0"))
    words = op(17, 1) + op(14, 0, 1) + op(15, 5, MAIN, *name) + op(16, MAIN, 17, *local_size)
    words += op(71, STRUCT, 2) + op(72, STRUCT, 0, 35, 0) + op(71, RTA, 6, 4)
    for b, var in enumerate(variables):
        words += op(71, var, 34, 0) + op(71, var, 33, b)
    words += op(19, VOID) + op(33, FN, VOID) + op(22, FLOAT, 32) + op(29, RTA, FLOAT) + op(30, STRUCT, RTA)
    words += op(32, PTR, 12, STRUCT)
    if shared_bytes:
        words += op(21, UINT, 32, 0) + op(43, UINT, N, shared_bytes // 4) + op(28, ARR, FLOAT, N)
        words += op(32, WPTR, 4, ARR) + op(59, WPTR, WVAR, 4)
    for var in variables:
        words += op(59, PTR, var, 12)
    words += op(54, VOID, MAIN, 0, FN) + op(248, LABEL) + op(253) + op(56)
    header = [0x07230203, version[0] << 16 | version[1] << 8, 0, 14 + bindings, 0]
    return struct.pack(f"<{len(header) + len(words)}I", *header, *words)


# A valid module for make_minimal_manifest's "copy" module (local size 64, two bindings).
SPIRV = make_spirv((64, 1, 1), 2)
# Valid modules for make_manifest's two modules.
MODULES = [make_spirv((64, 1, 1), 3), make_spirv((16, 1, 1), 3, shared_bytes=1024)]
WEIGHTS_BYTES = 64 * 32 * 4 + 32 * 10 * 4  # w1 then w2, float32


def make_manifest() -> dict:
    """A two-layer MLP: x[1,64] -> fc1+relu -> h[1,32] -> fc2 -> y[1,10]; two modules, two kernels."""
    return {
        "manifest_version": 1,
        "model": {"name": "mlp", "producer": "test", "opset": 13, "source_sha256": "0" * 64},
        "target": {"name": "generic"},
        "requirements": {
            "vulkan_api": [1, 1, 0], "extensions": [], "max_shared_memory_bytes": 1024,
            "max_workgroup_invocations": 64, "max_workgroup_size": [64, 1, 1],
            "max_storage_buffer_range": 8192,
        },
        "memory": {"alignment": 256, "arena_bytes": 1024, "weights_bytes": WEIGHTS_BYTES,
                   "intermediates_sum_bytes": 424, "lower_bound_bytes": 384},
        "tensors": [
            {"name": "x", "dtype": "float32", "shape": [1, 64], "memory": "arena", "offset": 0, "nbytes": 256},
            {"name": "w1", "dtype": "float32", "shape": [64, 32], "memory": "weights", "offset": 0, "nbytes": 8192},
            {"name": "w2", "dtype": "float32", "shape": [32, 10], "memory": "weights", "offset": 8192, "nbytes": 1280},
            {"name": "h", "dtype": "float32", "shape": [1, 32], "memory": "arena", "offset": 256, "nbytes": 128},
            {"name": "y", "dtype": "float32", "shape": [1, 10], "memory": "arena", "offset": 512, "nbytes": 40},
        ],
        "inputs": [{"name": "x", "tensor": 0}],
        "outputs": [{"name": "y", "tensor": 4}],
        "modules": [
            {"name": "matmul_relu", "bindings": 3, "local_size": [64, 1, 1], "shared_memory_bytes": 0},
            {"name": "matmul", "bindings": 3, "local_size": [16, 1, 1], "shared_memory_bytes": 1024},
        ],
        "kernels": [
            {"name": "fc1", "module": 0, "specialization": [
                {"id": 0, "type": "int32", "value": 64}, {"id": 1, "type": "float32", "value": 0.5}]},
            {"name": "fc2", "module": 1, "specialization": [{"id": 0, "type": "uint32", "value": 32}]},
        ],
        "dispatches": [
            {"kernel": 0, "bindings": [0, 1, 3], "groups": [1, 1, 1], "barrier": False,
             "nodes": ["/fc1/MatMul", "/relu/Relu"], "flops": 4096, "bytes": 8576},
            {"kernel": 1, "bindings": [3, 2, 4], "groups": [1, 1, 1], "barrier": True},  # no optional fields
        ],
    }


def make_minimal_manifest(modules: int = 1) -> dict:
    """No weights; `modules` (0 or 1) copy-like kernels over two arena tensors."""
    m = make_manifest()
    m["memory"].update(weights_bytes=0, intermediates_sum_bytes=512, lower_bound_bytes=512)
    m["tensors"] = [m["tensors"][0], dict(m["tensors"][0], name="y", offset=256)]
    m["outputs"] = [{"name": "y", "tensor": 1}]
    m["modules"] = [{"name": "copy", "bindings": 2, "local_size": [64, 1, 1], "shared_memory_bytes": 0}][:modules]
    m["kernels"] = [{"name": "copy", "module": 0, "specialization": []}][:modules]
    m["dispatches"] = [{"kernel": 0, "bindings": [0, 1], "groups": [1, 1, 1], "barrier": False}][:modules]
    return m


def make_weights() -> bytes:
    return np.random.default_rng(0).standard_normal(WEIGHTS_BYTES // 4).astype(np.float32).tobytes()


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
    import c_reader
    return c_reader.build(tmp_path_factory.mktemp("vkb_check"))
