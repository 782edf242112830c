#!/usr/bin/env python3
"""What vkc's fusion passes save on the transformer fixtures (tests/models/fixtures/*.onnx): kernels
(dispatches) per model with the normal pass pipeline and "unfused", and the fused path's attention
and LayerNorm kernels.

    .venv/bin/python benchmarks/fusion_counts.py                      # every fixture, lavapipe profile
    .venv/bin/python benchmarks/fusion_counts.py --target generic --models bert_tiny,gpt2_tiny

Compile only (compiler.compile.compile_with_kernels; no device needed). "Unfused" runs
compiler.passes.PIPELINE without fuse_layernorm, fuse_attention, fuse_epilogues and
fuse_elementwise_chains (the list is swapped for the one compile and restored after). Attention and
LayerNorm kernels are sorted as benchmarks/transformer_profile.py sorts dispatches: by module name
prefix, and a kernel that runs a node of an attention core (Softmax and its two MatMuls) counts as
attention. A compile that fails prints its error in the row, and the run goes on.
"""
from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(1, str(REPO / "benchmarks"))

import onnx  # noqa: E402
import transformer_profile as tp  # noqa: E402

from compiler import passes  # noqa: E402
from compiler.codegen import module_name  # noqa: E402
from compiler.compile import compile_with_kernels  # noqa: E402

FIXTURES = REPO / "tests" / "models" / "fixtures"
FUSIONS = ("fuse_layernorm", "fuse_attention", "fuse_epilogues", "fuse_elementwise_chains")


@contextlib.contextmanager
def unfused():
    """compiler.passes.PIPELINE without the fusion passes, for the duration of the block."""
    saved = list(passes.PIPELINE)
    try:
        passes.PIPELINE[:] = [p for p in saved if p.__name__ not in FUSIONS]
        yield
    finally:
        passes.PIPELINE[:] = saved


def counts(model: onnx.ModelProto, target: str) -> dict:
    """Kernels of one compile, and how many of them are attention / LayerNorm kernels."""
    kernels = compile_with_kernels(model, target=target)[1]
    attention = tp.attention_nodes(model)
    cats = [tp.category(module_name(k), k.nodes, attention) for k in kernels]
    return {"kernels": len(kernels), "attention": cats.count("attention"), "layernorm": cats.count("layernorm")}


def row(name: str, target: str) -> list[str]:
    model = onnx.load(str(FIXTURES / f"{name}.onnx"))
    cells = {}
    for mode in ("fused", "unfused"):
        start = time.time()
        try:
            with unfused() if mode == "unfused" else contextlib.nullcontext():
                cells[mode] = counts(model, target)
        except Exception as exc:  # noqa: BLE001  one model's failure must not stop the others
            cells[mode] = f"error: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
        print(f"  ({name} {mode}: {time.time() - start:.1f} s)", file=sys.stderr, flush=True)
    f, u = cells["fused"], cells["unfused"]
    cell = lambda c, key, error: str(c[key]) if isinstance(c, dict) else error  # noqa: E731
    return [name, cell(f, "kernels", f), cell(u, "kernels", u), cell(f, "attention", ""), cell(f, "layernorm", "")]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", default="lavapipe", help="compiler.targets profile, or host")
    ap.add_argument("--models", default=",".join(sorted(p.stem for p in FIXTURES.glob("*.onnx"))),
                    help="comma-separated fixture names (default: every .onnx in tests/models/fixtures)")
    args = ap.parse_args()
    print(f"vkc kernels per fixture, --target {args.target}: normal pipeline vs without {', '.join(FUSIONS)}")
    print("| model | kernels fused | kernels unfused | attention kernels (fused) | layernorm kernels (fused) |")
    print("|---|---:|---:|---:|---:|")
    failed = False
    for name in (m for m in args.models.split(",") if m):
        cells = row(name, args.target)
        failed |= any(c.startswith("error") for c in cells)
        print("| " + " | ".join(cells) + " |", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
