"""Fixtures for the bundle tests: a valid sample manifest and a byte-level builder written from
FORMAT.md independently of bundles.format, so a symmetric writer/reader bug cannot hide."""
import struct
import types
import zlib

import numpy as np
import pytest

# The smallest bytes the container accepts as SPIR-V (it only checks the magic and the length).
SPIRV = struct.pack("<5I", 0x07230203, 0x00010000, 0, 1, 0)
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
                                 SPIRV=SPIRV, make_manifest=make_manifest,
                                 make_minimal_manifest=make_minimal_manifest, make_weights=make_weights)
