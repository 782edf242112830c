"""Cooperative matrices emulated (Target.emulate_cooperative_matrix): the tensor-core kernels
(matmul_coopmat, attention_coopmat) rendered with their cooperative-matrix operations done
element by element in portable GLSL (templates/coopmat.glsl.j2), so that a device without them
(lavapipe, in CI) runs the very kernels a GPU runs, with the tiles the profile chose for its
device. VK_NV_cooperative_matrix2 kernels (matmul_coopmat2) have no emulation."""
from __future__ import annotations


def emulation_shared_bytes(target, m: int, n: int, k: int, subgroups: int) -> int:
    """Shared memory the emulation adds to a kernel of `subgroups` subgroups multiplying m x k by
    k x n matrices: each subgroup's float16 A and B of a product (coopmat.glsl.j2's cm_exchange)."""
    return 2 * subgroups * (m * k + k * n) if target.emulate_cooperative_matrix else 0
