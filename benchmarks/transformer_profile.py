"""Where a transformer's GPU time goes in vkc: Model.profile's dispatches sorted into attention,
layernorm (LayerNorm and RMSNorm), matmul, conv, elementwise (casts included), copies (transposes,
slices, concatenations, gathers, pads) and other. Shared by benchmarks/transformers.py (lavapipe) and
benchmarks/gpu/transformers.py (NVIDIA); needs only onnx.

Attention: a dispatch whose template is named "attention*" (a fused attention kernel, what vkc
builds for every exported attention it recognizes), or one that runs a node of an attention core
left unfused, found in the ONNX graph: every Softmax, the MatMul producing its scores (with the
scale / mask Mul, Div, Add, Where between them, which vkc fuses into that matmul's epilogue), the
scale Mul/Div on that MatMul's inputs (the SDPA export scales Q and K^T), and the MatMul consuming
the probabilities (through a Where/IsNaN/Cast, the SDPA export's fully-masked-row guard). The head
reshapes and transposes around it count as copies."""
from __future__ import annotations

from collections import defaultdict

import onnx

CATEGORIES = ("attention", "layernorm", "matmul", "conv", "elementwise", "copies", "other")
_COPIES = ("strided_copy", "copy_slice", "gather", "pad")
_BETWEEN = {"Mul", "Div", "Add", "Sub", "Where", "Cast", "IsNaN", "Not"}
_DEPTH = 4


def attention_nodes(model: onnx.ModelProto) -> set[str]:
    """Names of the ONNX nodes of every attention core (see the module docstring)."""
    nodes = list(model.graph.node)
    producer = {out: n for n in nodes for out in n.output}
    consumers = defaultdict(list)
    for n in nodes:
        for i in n.input:
            consumers[i].append(n)
    found: set[int] = set()

    def back(node, depth) -> list:
        """The nodes from `node` back to a MatMul (that MatMul included), or [] when none is near."""
        if node.op_type == "MatMul":
            return [node]
        if node.op_type not in _BETWEEN or depth == 0:
            return []
        path = []
        for i in node.input:
            p = producer.get(i)
            if p is not None:
                path += back(p, depth - 1)
        return path + [node] if path else []

    def forward(node, depth) -> list:
        out = []
        for c in (c for o in node.output for c in consumers[o]):
            if c.op_type == "MatMul":
                out.append(c)
            elif c.op_type in _BETWEEN and depth > 0:
                sub = forward(c, depth - 1)
                out += sub + [c] if sub else []
        return out

    for sm in (n for n in nodes if n.op_type == "Softmax"):
        core = [sm]
        scores = producer.get(sm.input[0])
        if scores is not None:
            path = back(scores, _DEPTH)
            core += path
            for mm in (n for n in path if n.op_type == "MatMul"):  # Q / K^T scaled before the MatMul
                core += [p for p in (producer.get(i) for i in mm.input) if p is not None and p.op_type in ("Mul", "Div")]
        core += forward(sm, _DEPTH)
        found.update(id(n) for n in core)
    return {n.name for n in nodes if id(n) in found}


def category(kernel: str, nodes, attention: set[str]) -> str:
    k = kernel.lower()
    if k.startswith("attention") or any(n in attention for n in nodes):
        return "attention"
    if k.startswith("layernorm"):
        return "layernorm"
    if k.startswith(("matmul", "gemm", "splitk")):
        return "matmul"
    if k.startswith(("conv", "im2col", "winograd")):
        return "conv"
    if k.startswith("elementwise"):
        return "elementwise"
    if k.startswith(_COPIES):
        return "copies"
    return "other"


def summarize(dispatches, attention: set[str], attention_flops: int | None = None) -> dict:
    """dispatches: Model.profile's DispatchTime list. Per category: GPU ms, share of the total,
    dispatch count, the kernels' own FLOP count and GFLOP/s. attention_flops (4*B*H*S^2*D per layer,
    the two attention matmuls) replaces the attention kernels' count for its GFLOP/s when given."""
    total = sum(d.seconds for d in dispatches)
    cats = {c: {"ms": 0.0, "dispatches": 0, "flops": 0} for c in CATEGORIES}
    kernels = defaultdict(lambda: [0.0, 0, 0])
    for d in dispatches:
        c = cats[category(d.kernel, d.nodes, attention)]
        c["ms"] += d.seconds * 1e3
        c["dispatches"] += 1
        c["flops"] += d.flops
        k = kernels[d.kernel]
        k[0] += d.seconds * 1e3
        k[1] += 1
        k[2] += d.flops
    if attention_flops is not None:
        cats["attention"]["flops"] = int(attention_flops)
    for c in cats.values():
        c["share"] = c["ms"] / (total * 1e3) if total > 0 else 0.0
        c["gflops"] = c["flops"] / (c["ms"] * 1e-3) / 1e9 if c["ms"] > 0 else 0.0
    top = sorted(kernels.items(), key=lambda kv: -kv[1][0])[:8]
    return {"gpu_ms": total * 1e3, "dispatches": len(dispatches), "categories": cats,
            "top_kernels": [{"kernel": k, "ms": v[0], "dispatches": v[1],
                             "gflops": v[2] / (v[0] * 1e-3) / 1e9 if v[0] > 0 else 0.0} for k, v in top]}


def share_cells(summary: dict) -> list[str]:
    """Percent of GPU time per category, in CATEGORIES order, for a table row."""
    return [f"{summary['categories'][c]['share'] * 100:.0f}%" for c in CATEGORIES]
