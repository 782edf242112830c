#!/usr/bin/env python3
"""On the GPU machine: the float16 matrix-vector products of a decoder step (templates/
matmul_gemv.comp.j2) at Llama-3.2-1B's shapes, on the nvidia profile, one row of A. GPU time is
Model.profile's median over 50 runs; the bandwidth is the weights' bytes over that time.
Variants: the kernel's module constants (compiler/lower/matmul.py), as t<THREADS>u<UNROLL>[w][c<C>][s]
(w: 16-byte loads of 8 columns; c: at least C column invocations a workgroup with them; s: the
partial sums added one after another by one invocation a column, not in pairs by all).

    python3 -m benchmarks.gpu.gemv                              # the default
    python3 -m benchmarks.gpu.gemv t256u4,t256u4w,t1024u4w      # variants
"""
import json
import re
import sys

from benchmarks.cli import exit_on_help

exit_on_help(__doc__)

import numpy as np  # noqa: E402
import onnx  # noqa: E402

from benchmarks.gpu.matmul_nbits import dense_model  # noqa: E402
from compiler.compile import compile_with_kernels  # noqa: E402
from compiler.lower import matmul  # noqa: E402
from runtime_min import load  # noqa: E402
from tests.llm_models import swiglu_model  # noqa: E402

# (name, K, N): the merged q/k/v projection, the attention output, the gate and up projections
# (paired: one kernel reads both), the down projection, a ninth of the 128256-column head.
SHAPES = [("qkv", 2048, 3072), ("o", 2048, 2048), ("gate+up", 2048, 8192), ("down", 8192, 2048),
          ("head/9", 2048, 14256)]


def gpu_us(model: onnx.ModelProto) -> tuple[float, list]:
    """Microseconds of the run's GEMV dispatches, and their kernels' parameters."""
    blob, kernels = compile_with_kernels(model, target="nvidia", precision="fp16", io="fp16")
    name = model.graph.input[0].name
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    with load(blob) as run:
        feeds = {name: np.random.default_rng(1).standard_normal(shape).astype(np.float16)}
        run.run(feeds)
        prof = run.profile(feeds, repeat=50)
    gemv = [k for k in kernels if k.template == "matmul_gemv"]
    params = [{p: k.params[p] for p in ("CT", "KS", "COLS", "PAIRED")} | {"groups": k.groups[0]} for k in gemv]
    return sum(p.seconds for p in prof if "matmul" in p.kernel) * 1e6, params


WIDE_COLUMN_THREADS = (64, 32, 16, 8, 4, 2)   # what a c<C> variant chooses from


def set_variant(name: str) -> None:
    threads, unroll, wide, least, serial = re.fullmatch(r"t(\d+)u(\d+)(w?)(?:c(\d+))?(s?)", name).groups()
    matmul.GEMV_THREADS, matmul.GEMV_UNROLL, matmul.GEMV_WIDE_LOADS = int(threads), int(unroll), bool(wide)
    matmul.GEMV_TREE_SUM = not serial
    matmul.GEMV_WIDE_COLUMN_THREADS = tuple(c for c in WIDE_COLUMN_THREADS if c >= int(least or 1))


def main(argv) -> None:
    default = f"t{matmul.GEMV_THREADS}u{matmul.GEMV_UNROLL}" + ("w" if matmul.GEMV_WIDE_LOADS else "") + \
        f"c{matmul.GEMV_WIDE_COLUMN_THREADS[-1]}" + ("" if matmul.GEMV_TREE_SUM else "s")
    variants = argv[0].split(",") if argv else [default]
    total = dict.fromkeys(variants, 0.0)
    for label, k, n in SHAPES:
        model = swiglu_model(1, k, n // 2) if label == "gate+up" else dense_model(1, k, n)
        row = {"shape": label, "K": k, "N": n}
        for variant in variants:
            set_variant(variant)
            us, params = gpu_us(model)
            total[variant] += us
            row[variant] = {"us": round(us, 1), "GBps": round(2 * k * n / us / 1e3), "kernels": params}
        print(json.dumps(row), flush=True)
    print(json.dumps({"sum_us": {v: round(t, 1) for v, t in total.items()}}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
