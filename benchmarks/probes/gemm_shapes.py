"""GEMM at the shapes transformers run, per tile configuration, against cuBLAS (torch) in the
same run: float32 (TF32 off) at ViT-B/16 and BERT-base batch-8 shapes, or float16 on the
cooperative-matrix kernel at BERT-base batch-1 shapes (128 tokens).

    python3 -m benchmarks.probes.gemm_shapes build [CONFIG ...]      # here: writes out/gemm_shapes/*.vkb
    python3 -m benchmarks.probes.gemm_shapes build-fp16 [CONFIG ...] # out/gemm_shapes_fp16/*.vkb
    python3 -m benchmarks.probes.gemm_shapes run [DIR ...]           # on the GPU machine

Each bundle is one MatMul x[M, K] @ w[K, N] with both operands as inputs (small to carry; in
float16 the inputs' Casts are separate kernels, not counted). `run` prints, per shape and
configuration, the matmul kernels' GPU time (timestamp queries, median of 20), the TFLOP/s, the
ratio to cuBLAS, and the driver's register count (pipeline_stats.py)."""
import dataclasses
import glob
import os
import sys

import numpy as np

from benchmarks.cli import exit_on_help

OUT = "out/gemm_shapes"
# (M, N, K): ViT-B/16 at batch 8 (1576 tokens): QKV, out-projection, FFN up, FFN down; BERT-base
# at batch 8 (1024 tokens) FFN up; a square reference.
SHAPES = [(1576, 2304, 768), (1576, 768, 768), (1576, 3072, 768), (1576, 768, 3072),
          (1024, 3072, 768), (4096, 4096, 4096)]
CONFIGS = {
    "profile": {},
    "128x64_8x4": dict(tile_m=128, tile_n=64, reg_m=8, reg_n=4, min_workgroups=1),
    "64x64_4x4": dict(tile_m=64, tile_n=64, reg_m=4, reg_n=4, min_workgroups=1),
    "128x128_8x8": dict(tile_m=128, tile_n=128, reg_m=8, reg_n=8, min_workgroups=1),
    "128x128_8x8_k8": dict(tile_m=128, tile_n=128, reg_m=8, reg_n=8, tile_k=8, min_workgroups=1),
    "64x128_8x8": dict(tile_m=64, tile_n=128, reg_m=8, reg_n=8, min_workgroups=1),
    "128x64_8x8": dict(tile_m=128, tile_n=64, reg_m=8, reg_n=8, min_workgroups=1),
    "64x64_8x8": dict(tile_m=64, tile_n=64, reg_m=8, reg_n=8, min_workgroups=1),
    "db": dict(tile_stages=2),
    "128x64_8x4_db": dict(tile_m=128, tile_n=64, reg_m=8, reg_n=4, min_workgroups=1, tile_stages=2),
    "64x64_4x4_db": dict(tile_m=64, tile_n=64, reg_m=4, reg_n=4, min_workgroups=1, tile_stages=2),
    "k32": dict(tile_k=32),
    "k8": dict(tile_k=8),
    "64x64_4x4_k32": dict(tile_m=64, tile_n=64, reg_m=4, reg_n=4, tile_k=32, min_workgroups=1),
}
# float16 (cooperative matrix): BERT-base batch 1, QKV, out-projection, FFN up, FFN down.
FP16_SHAPES = [(128, 2304, 768), (128, 768, 768), (128, 3072, 768), (128, 768, 3072)]
_SMALL = ((2, 2, 1, 1),)
FP16_CONFIGS = {
    "profile": {},
    "k128": dict(coopmat_k=128),
    "k256": dict(coopmat_k=256),
    "k32s2": dict(coopmat_k=32, coopmat_stages=2),
    "nosplit": dict(min_workgroups=1, coopmat_tiles=_SMALL),
    "nosplit_k256": dict(min_workgroups=1, coopmat_tiles=_SMALL, coopmat_k=256),
    "64x64": dict(min_workgroups=1, coopmat_tiles=((2, 2, 2, 2),)),
    "64x64_k128": dict(min_workgroups=1, coopmat_tiles=((2, 2, 2, 2),), coopmat_k=128),
    "32x64_w2": dict(coopmat_tiles=((1, 2, 2, 2), (1, 2, 2, 1))),
    "1sg_32x32": dict(coopmat_tiles=((1, 1, 2, 2),)),
    "mw528": dict(min_workgroups=528),
    "cw66": dict(coopmat_workgroups=66),
    "cw66_ks12": dict(coopmat_workgroups=66, coopmat_k_steps=12),
    "nosplit_k128": dict(min_workgroups=1, coopmat_tiles=_SMALL, coopmat_k=128),
}


def build(names, precision="fp32"):
    from onnx import helper
    import compiler
    from compiler.targets import TARGETS
    out, configs, shapes = ((OUT, CONFIGS, SHAPES) if precision == "fp32"
                            else (OUT + "_fp16", FP16_CONFIGS, FP16_SHAPES))
    os.makedirs(out, exist_ok=True)
    for name in names or configs:
        target = dataclasses.replace(TARGETS["nvidia"], name=f"nvidia-{name}", **configs[name])
        for m, n, k in shapes:
            graph = helper.make_graph(
                [helper.make_node("MatMul", ["x", "w"], ["y"])], "gemm",
                [helper.make_tensor_value_info("x", 1, [m, k]), helper.make_tensor_value_info("w", 1, [k, n])],
                [helper.make_tensor_value_info("y", 1, [m, n])])
            model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
            with open(f"{out}/{m}x{n}x{k}_{name}.vkb", "wb") as f:
                f.write(compiler.compile_model(model, target=target, precision=precision))


def run(dirs):
    import torch
    from runtime_min import load
    from benchmarks.gpu.cublas_timing import cublas_ms
    from benchmarks.probes import pipeline_stats
    torch.backends.cuda.matmul.allow_tf32 = False
    dev, fns = pipeline_stats.open_device()
    rows = []
    for path in sorted(p for d in dirs or [OUT] for p in glob.glob(f"{d}/*.vkb")):
        shape, name = os.path.basename(path)[:-4].split("_", 1)
        name += os.path.basename(os.path.dirname(path))[len("gemm_shapes"):]
        m, n, k = map(int, shape.split("x"))
        rng = np.random.default_rng(0)
        x = rng.standard_normal((m, k), dtype=np.float32)
        w = (rng.standard_normal((k, n), dtype=np.float32) / np.sqrt(k)).astype(np.float32)
        model = load(path)
        y = model.run({"x": x, "w": w})["y"]
        ref = x.astype(np.float64) @ w
        err = np.linalg.norm(y - ref) / np.linalg.norm(ref)
        prof = [p for p in model.profile({"x": x, "w": w}, repeat=20) if p.kernel.startswith("matmul")]
        gpu = sum(p.seconds for p in prof)
        kernels = [p.kernel for p in prof]
        regs = []
        from bundles.format import read_bundle
        from bundles.manifest import variant_views
        with read_bundle(path) as bundle:
            view = variant_views(bundle.manifest)[0]
            for kernel in view["kernels"]:
                if not bundle.manifest["modules"][kernel["module"]]["name"].startswith("matmul"):
                    continue
                stats = dict(pipeline_stats.statistics(dev, fns, bundle.spirv[kernel["module"]],
                                                       bundle.manifest["modules"][kernel["module"]]["bindings"],
                                                       kernel.get("specialization", [])))
                regs.append(stats.get("Register Count", "?"))
                if not rows and len(regs) == 1:
                    print("statistics:", stats)
        model.close()
        rows.append((m, n, k, name, gpu, err, kernels, regs))
    # the float16 shapes are cuBLAS float16 (float32 accumulation), the others float32
    cublas = {(m, n, k): cublas_ms(m, n, k, "float16" if (m, n, k) in FP16_SHAPES else "float32") / 1e3
              for m, n, k in sorted({r[:3] for r in rows})}
    print(f"{'shape':>16} {'config':>12} {'vkc us':>8} {'TFLOP/s':>8} {'cuBLAS us':>9} {'TFLOP/s':>8} "
          f"{'cuBLAS/vkc':>10}  rel err   kernels (registers)")
    for m, n, k, name, gpu, err, kernels, regs in rows:
        flop, ref = 2 * m * n * k, cublas[(m, n, k)]
        print(f"{m}x{n}x{k:>5} {name:>12} {gpu * 1e6:8.1f} {flop / gpu / 1e12:8.2f} {ref * 1e6:9.1f} "
              f"{flop / ref / 1e12:8.2f} {ref / gpu:10.2f}  {err:.1e}  "
              + ", ".join(f"{kn} ({r})" for kn, r in zip(kernels, regs)))


if __name__ == "__main__":
    exit_on_help(__doc__)
    if sys.argv[1:2] == ["build"]:
        build(sys.argv[2:])
    elif sys.argv[1:2] == ["build-fp16"]:
        build(sys.argv[2:], "fp16")
    elif sys.argv[1:2] == ["run"]:
        run(sys.argv[2:])
    else:
        sys.exit(__doc__)
