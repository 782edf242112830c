"""LayerNormalization (opset 17): normalize over the dims [axis, rank) of X, then scale and shift;
optionally also output the Mean and InvStdDev of every row. On templates/layernorm.comp.j2.

Rows (the dims before `axis`) are independent; each is D = prod(X.shape[axis:]) contiguous
elements. Transformer rows are long (D = 64..4096) and few, so one workgroup reduces one row
cooperatively (see the template) instead of one invocation walking a whole row.
"""
from __future__ import annotations

from ..errors import CompileError
from ..shapes import contiguous_strides, prod
from .kernel import Kernel, grid_1d, register, texel_reads

LIMITS = "stash_type other than 1 (the statistics are computed in float32 only)"


def _merge(dims):
    """Merge adjacent (size, stride) dims that walk memory as one (contiguous runs, and runs of
    broadcast stride-0 dims); drop size-1 dims."""
    merged = []
    for size, stride in dims:
        if size == 1:
            continue
        if merged and merged[-1][1] == stride * size:
            merged[-1] = (merged[-1][0] * size, stride)
        else:
            merged.append((size, stride))
    return merged


def _broadcast_terms(node, v, norm_shape, what):
    """How a row element's index `col` (0..D-1) maps to an element of `v` (Scale or B), which
    ONNX lets be unidirectionally broadcastable to X.shape[axis:]: a sum of terms
    (col / DIV) % MOD * STRIDE, one per run of dims `v` does not broadcast, as
    [(div, mod, stride)] with mod 0 for the outermost dim (col < D needs no modulo there).
    A full-shape operand is the single term col * 1; a [D'] suffix col % D'."""
    shape = list(v.shape)
    if len(shape) > len(norm_shape) or any(
            s not in (1, n) for s, n in zip(shape[::-1], norm_shape[::-1])):
        raise CompileError(f"LayerNormalization '{node.name}': {what} '{v.name}' of shape {shape} "
                           f"does not broadcast to the normalized shape {list(norm_shape)} "
                           f"(X's dims from axis on).")
    shape = [1] * (len(norm_shape) - len(shape)) + shape
    strides = contiguous_strides(shape)
    dims = _merge([(n, 0 if s == 1 else st) for n, s, st in zip(norm_shape, shape, strides)])
    terms, div = [], 1
    for i in range(len(dims) - 1, -1, -1):
        size, stride = dims[i]
        if stride:
            terms.append((div, 0 if i == 0 else size, stride))
        div *= size
    return terms[::-1]


def _local_size(d: int, target) -> int:
    """Invocations per row: a power of two (the tree reduction halves it), about D/4 so that
    every invocation has a few elements to sum before the shared-memory reduction, at least a
    subgroup, at most 256 (and the device's limit)."""
    cap = min(256, target.max_invocations)
    local = min(max(1, target.subgroup_size), cap)
    while local < cap and local * 4 < d:
        local *= 2
    return local


@register("LayerNormalization", since=17, limits=LIMITS)
def lower_layernorm(node, target):
    x, y = node.inputs[0], node.outputs[0]
    scale, bias = node.input(1), node.input(2)
    rank = len(x.shape)
    axis = node.attrs.get("axis", -1)
    if not -rank <= axis < rank:
        raise CompileError(f"LayerNormalization '{node.name}': axis {axis} is out of range for "
                           f"the rank-{rank} input '{x.name}'.")
    axis %= rank
    stash = node.attrs.get("stash_type", 1)
    if stash != 1:
        raise CompileError(f"LayerNormalization '{node.name}': stash_type {stash} is not "
                           "supported; vkc computes the statistics in float32 (stash_type 1) only.")
    if x.size == 0:
        raise CompileError(f"LayerNormalization '{node.name}' has an empty input "
                           f"{list(x.shape)}; vkc does not run empty tensors.")
    # Optional outputs: absent (or named "") when the node does not ask for them.
    stats = [v if v is not None and v.name else None for v in node.outputs[1:3]]
    stats += [None] * (2 - len(stats))
    mean_out, inv_out = stats

    norm_shape = x.shape[axis:]
    d = prod(norm_shape)
    rows = x.size // d
    scale_terms = _broadcast_terms(node, scale, norm_shape, "Scale")
    bias_terms = _broadcast_terms(node, bias, norm_shape, "B") if bias is not None else []

    local = _local_size(d, target)
    spec = [("ROWS", "int32", rows), ("D", "int32", d),
            ("EPS", "float32", float(node.attrs.get("epsilon", 1e-5)))]
    for prefix, terms in (("S", scale_terms), ("B", bias_terms)):
        for i, (div, mod, stride) in enumerate(terms):
            spec += [(f"{prefix}DIV{i}", "int32", div), (f"{prefix}STR{i}", "int32", stride)]
            spec += [(f"{prefix}MOD{i}", "int32", mod)] if mod else []

    inputs = [x, scale] + ([bias] if bias is not None else [])
    outputs = [y] + [v for v in (mean_out, inv_out) if v is not None]
    texel = texel_reads(target, *inputs)
    params = dict(LOCAL=local, TEXEL=texel, n_inputs=len(inputs), has_bias=bias is not None,
                  has_mean=mean_out is not None, has_inv=inv_out is not None,
                  scale_mods=[bool(m) for _, m, _ in scale_terms],
                  bias_mods=[bool(m) for _, m, _ in bias_terms])
    return [Kernel("layernorm", params, spec, inputs + outputs,
                   writes=list(range(len(inputs), len(inputs) + len(outputs))),
                   groups=grid_1d(rows, 1), local_size=(local, 1, 1), nodes=node.sources,
                   flops=8 * x.size, shared_memory_bytes=4 * local,
                   texel_buffers={j: "r32f" for j in range(len(inputs))} if texel else {})]
