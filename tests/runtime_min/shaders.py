"""GLSL for the hand-built test bundle, and the bundle itself."""
from pathlib import Path

import numpy as np

N = 1000
AFFINE = """#version 450
layout(local_size_x = 64) in;
layout(constant_id = 0) const int N = 1;
layout(set = 0, binding = 0) readonly buffer X { float x[]; };
layout(set = 0, binding = 1) readonly buffer W { float w[]; };
layout(set = 0, binding = 2) readonly buffer B { float b[]; };
layout(set = 0, binding = 3) writeonly buffer Y { float y[]; };
void main() {
    int i = int(gl_GlobalInvocationID.x);
    if (i < N) y[i] = x[i] * w[i] + b[i];
}
"""
SCALE_ADD = """#version 450
layout(local_size_x = 32) in;
layout(constant_id = 0) const uint N = 1u;
layout(constant_id = 1) const float SCALE = 1.0;
layout(constant_id = 2) const int OFFSET = 0;
layout(set = 0, binding = 0) readonly buffer Y { float y[]; };
layout(set = 0, binding = 1) readonly buffer U { float u[]; };
layout(set = 0, binding = 2) writeonly buffer Z { float z[]; };
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < N) z[i] = y[i] * SCALE + u[i] + float(OFFSET);
}
"""
SCALE, OFFSET = 0.5, -3


def compile_glsl(src: str, tmp: Path, name: str) -> bytes:
    """SPIR-V (spirv-val checked) for a hand-written shader; also written to tmp/<name>.spv."""
    from tests.harness import glslang

    spirv = glslang(src)
    (tmp / f"{name}.spv").write_bytes(spirv)
    return spirv


def weights():
    rng = np.random.default_rng(7)
    w = rng.integers(-8, 9, N).astype(np.float32)
    b = (rng.integers(-8, 9, N) + 0.5).astype(np.float32)
    return w, b


def manifest(**requirements):
    f32 = lambda name, shape, memory, offset: {"name": name, "dtype": "float32", "shape": shape, "memory": memory,
                                               "offset": offset, "nbytes": 4 * int(np.prod(shape))}
    req = {"vulkan_api": [1, 1, 0], "extensions": [], "max_shared_memory_bytes": 0,
           "max_workgroup_invocations": 64, "max_workgroup_size": [64, 1, 1], "max_storage_buffer_range": 4 * N}
    req.update(requirements)
    return {
        "manifest_version": 1,
        "model": {"name": "affine_test", "producer": "hand", "opset": 13, "source_sha256": "0" * 64},
        "target": {"name": "generic"},
        "requirements": req,
        "memory": {"alignment": 256, "arena_bytes": 16384, "weights_bytes": 4096 + 4 * N,
                   "intermediates_sum_bytes": 16 * N, "lower_bound_bytes": 16 * N},
        "tensors": [f32("x", [4, N // 4], "arena", 0), f32("u", [N], "arena", 4096),
                    f32("y", [N], "arena", 8192), f32("z", [N], "arena", 12288),
                    f32("w", [N], "weights", 0), f32("b", [N], "weights", 4096)],
        "inputs": [{"name": "x", "tensor": 0}, {"name": "u", "tensor": 1}],
        "outputs": [{"name": "y", "tensor": 2}, {"name": "z", "tensor": 3}],
        "modules": [{"name": "affine", "bindings": 4, "local_size": [64, 1, 1], "shared_memory_bytes": 0},
                    {"name": "scale_add", "bindings": 3, "local_size": [32, 1, 1], "shared_memory_bytes": 0}],
        "kernels": [{"name": "affine", "module": 0, "specialization": [{"id": 0, "type": "int32", "value": N}]},
                    # Ids out of list order on purpose: data is packed in list order, bound by id.
                    {"name": "scale_add", "module": 1,
                     "specialization": [{"id": 1, "type": "float32", "value": SCALE},
                                        {"id": 2, "type": "int32", "value": OFFSET},
                                        {"id": 0, "type": "uint32", "value": N}]}],
        "dispatches": [{"kernel": 0, "bindings": [0, 4, 5, 2], "groups": [-(-N // 64), 1, 1], "barrier": False,
                        "nodes": ["Mul", "Add"], "flops": 2 * N, "bytes": 16 * N},
                       {"kernel": 1, "bindings": [2, 1, 3], "groups": [-(-N // 32), 1, 1], "barrier": True,
                        "nodes": ["Scale", "Add2"], "flops": 3 * N, "bytes": 12 * N}],
    }


def build(tmp: Path, **requirements) -> bytes:
    from bundles import write_bundle
    w, b = weights()
    blob = w.tobytes() + bytes(4096 - 4 * N) + b.tobytes()
    spirv = [compile_glsl(AFFINE, tmp, "affine"), compile_glsl(SCALE_ADD, tmp, "scale_add")]
    return bytes(write_bundle(manifest(**requirements), spirv, blob))


def random_inputs(seed):
    rng = np.random.default_rng(seed)
    return {"x": rng.integers(-8, 9, (4, N // 4)).astype(np.float32),
            "u": rng.integers(-8, 9, N).astype(np.float32)}


def expected(feeds):
    w, b = weights()
    y = feeds["x"].reshape(-1) * w + b  # small integers and halves: exact in float32, with or without fma
    return {"y": y, "z": y * np.float32(SCALE) + feeds["u"] + np.float32(OFFSET)}
