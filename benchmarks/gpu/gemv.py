#!/usr/bin/env python3
"""On the GPU machine: the float16 matrix-vector products of a decoder step (templates/
matmul_gemv.comp.j2) at Llama-3.2-1B's shapes, on the nvidia profile, one row of A. Each shape's
model holds enough copies of its product (each its own weights, one dispatch each) to read over
200 MB a run, as a decoder step does, so that no weight is still in the GPU's L2 cache (50-60 MB)
when its product reads it again. GPU time per product is Model.profile's median over 50 runs
over the copies; the bandwidth is the weights' bytes over that time.
--weights int8|int4|int4-sym: the same products quantized as `vkc compile --weights` does
(templates/matmul_nbits.comp.j2), bytes counting the packed weights, scales and zero points; then
variants are r<ROWS>l<LOCAL>[g<G>[u<U>]][i] (rows of W a workgroup, its invocations; g: A staged in
shared memory and G groups of ROWS rows a workgroup, a subgroup a group, U chunks of the rows
loaded before they are computed; i: integer-to-float
conversions instead of shifting the weights into a float's mantissa).
Float variants: the kernel's module constants (compiler/lower/matmul.py), as
t<THREADS>u<UNROLL>[w][c<C>][s][k<S>][g<G>] (w: 16-byte loads of 8 columns; c: at least C column
invocations a workgroup with them; s: the partial sums added one after another by one invocation
a column, not in pairs by all; k: at most S slices of K across workgroups, k1 none; g: slices
until there are G times the profile's min_workgroups workgroups).

    python3 -m benchmarks.gpu.gemv                              # the default
    python3 -m benchmarks.gpu.gemv t256u4wc4k1,t256u4wc4k16     # variants
    python3 -m benchmarks.gpu.gemv --weights int4 r4l64,r4l128g4   # quantized weights' variants
    python3 -m benchmarks.gpu.gemv --shapes gate+up,head/9 ...      # some of the shapes
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
from compiler.lower import matmul, matmul_nbits  # noqa: E402
from runtime_min import load  # noqa: E402
from tests.llm_models import swiglu_model  # noqa: E402

# (name, K, N): the merged q/k/v projection, the attention output, the gate and up projections
# (paired: one kernel reads both), the down projection, a ninth of the 128256-column head.
SHAPES = [("qkv", 2048, 3072), ("o", 2048, 2048), ("gate+up", 2048, 16384), ("down", 8192, 2048),
          ("head/9", 2048, 14256)]


READ_BYTES = 200e6   # what each shape's model reads a run, at least


def copies(model: onnx.ModelProto, count: int) -> onnx.ModelProto:
    """`count` copies of the model's nodes side by side on its inputs, each with its own weights
    (scaled apart, so that no two are equal and shared) and outputs."""
    graph = model.graph
    inputs = {i.name for i in graph.input}
    nodes, inits, outputs = [], [], []
    for c in range(count):
        name = lambda n: n if n in inputs or not n else f"{n}_{c}"  # noqa: E731
        for node in graph.node:
            nodes.append(onnx.helper.make_node(node.op_type, [name(i) for i in node.input],
                                               [name(o) for o in node.output], name=name(node.name), domain=node.domain))
            nodes[-1].attribute.extend(node.attribute)
        for init in graph.initializer:
            w = onnx.numpy_helper.to_array(init)
            inits.append(onnx.numpy_helper.from_array((w * (1 + c / 64)).astype(w.dtype), name(init.name)))
        for out in graph.output:
            outputs.append(onnx.helper.make_tensor_value_info(name(out.name), out.type.tensor_type.elem_type,
                                                              [d.dim_value for d in out.type.tensor_type.shape.dim]))
    new = onnx.helper.make_graph(nodes, graph.name, list(graph.input), outputs, inits)
    return onnx.helper.make_model(new, ir_version=model.ir_version, opset_imports=model.opset_import)


def gpu_us(model: onnx.ModelProto, count: int, weights: str | None = None) -> tuple[float, list]:
    """Microseconds of one of the run's `count` products' GEMV dispatches, and their kernels'
    parameters."""
    blob, kernels = compile_with_kernels(model, target="nvidia", precision="fp16", io="fp16", weights=weights)
    name = model.graph.input[0].name
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    with load(blob) as run:
        feeds = {name: np.random.default_rng(1).standard_normal(shape).astype(np.float16)}
        run.run(feeds)
        prof = run.profile(feeds, repeat=50)
    if weights:
        params = [{p: k.params[p] for p in ("ROWS", "LOCAL", "GROUPS", "PAIRED")} | {"groups": k.groups[0]}
                  for k in kernels if k.template == "matmul_nbits"]
    else:
        params = [{p: k.params[p] for p in ("CT", "KT", "COLS", "PAIRED")} | {"groups": k.groups[0], "split": k.groups[2]}
                  for k in kernels if k.template == "matmul_gemv"]
    return sum(p.seconds for p in prof if "matmul" in p.kernel) * 1e6 / count, params[:1]


WIDE_COLUMN_THREADS = (64, 32, 16, 8, 4, 2)   # what a c<C> variant chooses from
DEFAULT_SPLIT, DEFAULT_GROUPS = matmul.GEMV_MAX_SPLIT, matmul.GEMV_SPLIT_WORKGROUPS


def set_variant(name: str) -> None:
    threads, unroll, wide, least, serial, split, groups = re.fullmatch(
        r"t(\d+)u(\d+)(w?)(?:c(\d+))?(s?)(?:k(\d+))?(?:g(\d+))?", name).groups()
    matmul.GEMV_THREADS, matmul.GEMV_UNROLL, matmul.GEMV_WIDE_LOADS = int(threads), int(unroll), bool(wide)
    matmul.GEMV_TREE_SUM = not serial
    matmul.GEMV_WIDE_COLUMN_THREADS = tuple(c for c in WIDE_COLUMN_THREADS if c >= int(least or 1))
    matmul.GEMV_MAX_SPLIT = int(split or DEFAULT_SPLIT)
    matmul.GEMV_SPLIT_WORKGROUPS = int(groups or DEFAULT_GROUPS)


def nbits_default() -> str:
    staged = matmul_nbits.STAGED_GROUPS
    return f"r{matmul_nbits.ROWS}l{matmul_nbits.STAGED_LOCAL if staged else matmul_nbits.LOCAL}" + \
        (f"g{staged}" if staged else "")


def set_nbits_variant(name: str) -> None:
    rows, local, groups, unroll, ints = re.fullmatch(r"r(\d+)l(\d+)(?:g(\d+))?(?:u(\d+))?(i?)", name).groups()
    matmul_nbits.ROWS, matmul_nbits.MANTISSA_WEIGHTS = int(rows), not ints
    matmul_nbits.STAGED_UNROLL = int(unroll or 1)
    matmul_nbits.STAGED_GROUPS = int(groups or 0)
    if groups:
        matmul_nbits.STAGED_LOCAL = int(local)
    else:
        matmul_nbits.LOCAL = int(local)


def weight_bytes(k: int, n: int, weights: str | None) -> int:
    """What a K x N product reads of its weights: float16, or packed with float16 scales a block
    of 32 (and int4's zero points, two a byte)."""
    if not weights:
        return 2 * k * n
    bits = 8 if weights == "int8" else 4
    blocks = -(-k // 32)
    return n * (blocks * 32 * bits // 8 + 2 * blocks + (-(-blocks // 2) if weights == "int4" else 0))


def main(argv) -> None:
    weights, shapes = None, SHAPES
    if argv[:1] == ["--shapes"]:
        names, argv = argv[1].split(","), argv[2:]
        shapes = [s for s in SHAPES if s[0] in names]
        if len(shapes) != len(names):
            sys.exit(f"--shapes {','.join(names)}: use some of {','.join(s[0] for s in SHAPES)}")
    if argv[:1] == ["--weights"]:
        weights, argv = argv[1], argv[2:]
        if weights not in ("int8", "int4", "int4-sym"):
            sys.exit(f"--weights {weights}: use int8, int4 or int4-sym")
    if weights:
        variants = argv[0].split(",") if argv else [nbits_default()]
        choose = set_nbits_variant
    else:
        variants, choose = float_variants(argv), set_variant
    total = dict.fromkeys(variants, 0.0)
    for label, k, n in shapes:
        count = -(-int(READ_BYTES) // weight_bytes(k, n, weights))
        model = copies(swiglu_model(1, k, n // 2) if label == "gate+up" else dense_model(1, k, n), count)
        row = {"shape": label, "K": k, "N": n, "copies": count}
        for variant in variants:
            choose(variant)
            us, params = gpu_us(model, count, weights)
            total[variant] += us
            row[variant] = {"us": round(us, 1), "GBps": round(weight_bytes(k, n, weights) / us / 1e3), "kernels": params}
        print(json.dumps(row), flush=True)
    print(json.dumps({"sum_us": {v: round(t, 1) for v, t in total.items()}}), flush=True)


def float_variants(argv) -> list:
    default = f"t{matmul.GEMV_THREADS}u{matmul.GEMV_UNROLL}" + ("w" if matmul.GEMV_WIDE_LOADS else "") + \
        f"c{matmul.GEMV_WIDE_COLUMN_THREADS[-1]}" + ("" if matmul.GEMV_TREE_SUM else "s") + f"k{matmul.GEMV_MAX_SPLIT}g{matmul.GEMV_SPLIT_WORKGROUPS}"
    return argv[0].split(",") if argv else [default]


if __name__ == "__main__":
    main(sys.argv[1:])
