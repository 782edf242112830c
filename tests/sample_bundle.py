"""A small valid bundle's parts, written from FORMAT.md and the SPIR-V spec independently of
bundles.format and bundles.spirv: the bundle tests (tests/bundles/conftest.py) and the Android
packaging tests build their bundles from them."""
import struct

import numpy as np


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
