#!/usr/bin/env python3
"""On the GPU machine: com.microsoft MatMulNBits (4-bit weights, block 32, packed zero points) at
LLM projection shapes, against the same product with float16 weights (a MatMul compiled with
--precision fp16), on the nvidia profile. GPU time is Model.profile's median over 50 runs; the
bandwidth is the bytes the weights take (packed bytes + scales + zero points, or float16) over
that time. Variants: the kernel's module constants (rows of W and of A a workgroup computes,
its invocations, 16-byte loads of B), as ROWSxM_TILExLOCAL[v][g|d][i] (v: 16-byte loads; g: every
M runs as GEMV; d: every M dequantizes W for the tiled GEMM; i: integer-to-float conversions of
the weights instead of shifting them into a float's mantissa); the first is the default. Per
variant also the GPU time of each kernel.

    python3 -m benchmarks.gpu.matmul_nbits                          # M = 1, 16 and 128
    python3 -m benchmarks.gpu.matmul_nbits 4x4x64v,4x4x64,4x4x64vg  # variants
"""
import json
import sys

from benchmarks.cli import exit_on_help

exit_on_help(__doc__)

import numpy as np  # noqa: E402
import onnx  # noqa: E402

import compiler  # noqa: E402
from compiler.lower import matmul_nbits  # noqa: E402
from runtime_min import load  # noqa: E402

SHAPES = [(4096, 4096), (4096, 11008), (11008, 4096), (4096, 32000)]   # (K, N): Llama-7B's


def nbits_model(m: int, k: int, n: int, block: int = 32) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    blocks = k // block
    weights = [onnx.numpy_helper.from_array(rng.integers(0, 256, (n, blocks, block // 2), dtype=np.uint8), "b"),
               onnx.numpy_helper.from_array((rng.random(n * blocks) / 8).astype(np.float16), "scales"),
               onnx.numpy_helper.from_array(rng.integers(0, 256, n * -(-blocks // 2), dtype=np.uint8), "zp")]
    node = onnx.helper.make_node("MatMulNBits", ["a", "b", "scales", "zp"], ["y"], domain="com.microsoft",
                                 K=k, N=n, bits=4, block_size=block)
    graph = onnx.helper.make_graph([node], "nbits", [onnx.helper.make_tensor_value_info("a", 10, [m, k])],
                                   [onnx.helper.make_tensor_value_info("y", 10, [m, n])], initializer=weights)
    return onnx.helper.make_model(graph, ir_version=10, opset_imports=[
        onnx.helper.make_opsetid("", 21), onnx.helper.make_opsetid("com.microsoft", 1)])


def dense_model(m: int, k: int, n: int) -> onnx.ModelProto:
    w = onnx.numpy_helper.from_array((np.random.default_rng(0).standard_normal((k, n)) / 64).astype(np.float16), "w")
    graph = onnx.helper.make_graph([onnx.helper.make_node("MatMul", ["a", "w"], ["y"])], "dense",
                                   [onnx.helper.make_tensor_value_info("a", 10, [m, k])],
                                   [onnx.helper.make_tensor_value_info("y", 10, [m, n])], initializer=[w])
    return onnx.helper.make_model(graph, ir_version=10, opset_imports=[onnx.helper.make_opsetid("", 21)])


def gpu_seconds(model: onnx.ModelProto, m: int, k: int, kernels: dict | None = None) -> float:
    """GPU seconds of one run; `kernels` gathers each kernel's microseconds."""
    blob = compiler.compile_model(model, target="nvidia", precision="fp16", io="fp16")
    with load(blob) as run:
        feeds = {"a": np.random.default_rng(1).standard_normal((m, k)).astype(np.float16)}
        run.run(feeds)
        prof = run.profile(feeds, repeat=50)
    for p in prof if kernels is not None else ():
        kernels[p.kernel] = round(kernels.get(p.kernel, 0) + p.seconds * 1e6, 1)
    return sum(p.seconds for p in prof)


PROMPT_ROWS = matmul_nbits.PROMPT_ROWS


def set_variant(name: str) -> None:
    rows, m_tile, local = (int(x) for x in name.rstrip("vgdi").split("x"))
    matmul_nbits.MANTISSA_WEIGHTS = "i" not in name
    matmul_nbits.ROWS, matmul_nbits.M_TILE, matmul_nbits.LOCAL = rows, m_tile, local
    matmul_nbits.VECTOR_LOADS = "v" in name
    matmul_nbits.PROMPT_ROWS = 1 << 30 if "g" in name else 1 if "d" in name else PROMPT_ROWS


def main(argv) -> None:
    default = f"{matmul_nbits.ROWS}x{matmul_nbits.M_TILE}x{matmul_nbits.LOCAL}" + \
        ("v" if matmul_nbits.VECTOR_LOADS else "")
    variants = argv[0].split(",") if argv else [default]
    for m in (1, 16, 32, 64, 128):
        for k, n in SHAPES:
            packed = n * k // 2 + n * (k // 32) * 2 + n * (k // 64)
            row = {"M": m, "K": k, "N": n}
            for variant in variants:
                set_variant(variant)
                kernels = {}
                s = gpu_seconds(nbits_model(m, k, n), m, k, kernels)
                row[f"{variant}_us"], row[f"{variant}_GBps"] = round(s * 1e6, 1), round(packed / s / 1e9)
                row[f"{variant}_kernels"] = kernels
            s = gpu_seconds(dense_model(m, k, n), m, k)
            row["fp16_us"], row["fp16_GBps"] = round(s * 1e6, 1), round(2 * k * n / s / 1e9)
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
