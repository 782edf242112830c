"""vkc.Attention: softmax(Q·Kᵀ·scale + mask)·V in one kernel (templates/attention.comp.j2), the
score matrix never written to memory. An internal op: passes/fuse_attention.py writes it for the
MatMul -> scale -> Add mask -> Softmax -> MatMul chains exporters emit, and
passes/contrib_attention.py for onnxruntime's com.microsoft Attention and MultiHeadAttention.

The node's attributes say everything the kernel needs, so the pass, not this rule, decides
layouts:
  dims      (B, H, SQ, SK, D, DV)
  layouts   {"q", "k", "v", "out": (offset, (sb, sh, s_row, s_col))}: element offset and strides of
            every operand's (batch, head, row, column) in the tensor bound for it; Q's rows are
            queries and columns D, K's rows keys and columns D (so Kᵀ given as [B, H, D, SK] is
            only other strides), V's rows keys and columns DV, the output's rows queries. A
            Transpose feeding Q/K/V or following the output is these strides, not a kernel; Q, K
            and V may be one packed tensor at three offsets.
            "mask": (0, (sb, sh, s_query, s_key)), stride 0 on broadcast dims
  scale     multiplies Q·Kᵀ before the mask is added
  mask_kind "none", "add" (a float32 mask added to the scores) or "keep" (an int32 mask: where it
            is not positive, mask_filter is added; onnxruntime's raw key-padding masks)
  causal    key k is seen by query q only when k <= q + SK - SQ (bottom-right aligned, as
            onnxruntime's unidirectional attention with past keys)

The kernel: a workgroup per (batch * head, block of query rows); every row's running max, sum
and output row in registers (online softmax over blocks of keys). GPUs stage K and V blocks in
shared memory for one row per invocation; texel profiles (lavapipe) fetch K and V in place and
give an invocation several rows, so that each fetch serves all of them.
"""
from __future__ import annotations

import numpy as np

from ..dtypes import float_literal
from ..errors import CompileError
from .kernel import Kernel, register, texel_reads, unsupported_dtype

# Q, o and a block of scores live in each invocation's registers: past 256 columns they spill
# beyond use (and K/V blocks of one key would no longer fit 16 KiB of shared memory).
MAX_HEAD_DIM = 256
LIMITS = f"head sizes above {MAX_HEAD_DIM}; float32 only; key-padding masks int32 or float32"
# Key rows per block: staged in shared memory on GPUs (fewer when K and V rows do not fit the
# device's shared memory); on texel profiles only the span between running-max rescales (4
# measured fastest on lavapipe: longer blocks unroll into more code than they save).
BLOCK_KEYS = 32
TEXEL_BLOCK_KEYS = 4
# Invocations per workgroup, and query rows per invocation on texel profiles: each K and V
# element fetched serves that many rows (on a GPU, one row each keeps registers for occupancy).
# On lavapipe at B=1, H=4, S=128, D=64: 1, 2, 4, 8 rows took 3.9, 2.4, 1.7, 1.4 ms. The rows'
# Q and o stay within TEXEL_ROW_FLOATS floats per invocation (8 rows at D = DV = 64).
LANES = 64
TEXEL_ROWS = 8
TEXEL_ROW_FLOATS = 1024


def _lanes(rows: int, target) -> int:
    """64 invocations, halved down to a subgroup while that still covers `rows` (a decoder step
    has one query), so that few lanes idle."""
    lanes = min(LANES, target.max_invocations)
    while lanes > max(1, target.subgroup_size) and lanes // 2 >= rows:
        lanes //= 2
    return lanes


def _key_block(d: int, dv: int, target) -> int:
    bk = BLOCK_KEYS
    while bk > 1 and 4 * bk * (d + dv) > target.max_shared_memory:
        bk //= 2
    return bk


@register("vkc.Attention", dtypes=None, limits=LIMITS)
def lower_attention(node, target):
    q, k, v, mask = (node.input(i) for i in range(4))
    out = node.outputs[0]
    a = node.attrs
    b, h, sq, sk, d, dv = a["dims"]
    for what, val in (("Q", q), ("K", k), ("V", v), ("output", out)):
        if np.dtype(val.dtype) != np.float32:
            raise unsupported_dtype(node, val, f"attention's {what}")
    if max(d, dv) > MAX_HEAD_DIM:
        raise CompileError(f"Attention '{node.name}': head size {max(d, dv)} is above the "
                           f"{MAX_HEAD_DIM} vkc's attention kernel keeps in registers.")
    mask_kind = a.get("mask_kind", "none")
    if (mask is None) != (mask_kind == "none"):
        raise CompileError(f"Attention '{node.name}': mask_kind {mask_kind!r} does not match "
                           f"its mask input {mask} (a vkc bug).")
    want = {"add": np.float32, "keep": np.int32}.get(mask_kind)
    if mask is not None and np.dtype(mask.dtype) != want:
        raise CompileError(f"Attention '{node.name}': mask '{mask.name}' is "
                           f"{np.dtype(mask.dtype).name}; a {mask_kind} mask must be "
                           f"{np.dtype(want).name}.")

    if b * h > 65535:
        raise CompileError(f"Attention '{node.name}': {b} x {h} batches x heads exceed the "
                           "65535 workgroups of one grid dimension.")
    spec = [("H", "int32", h), ("SQ", "int32", sq), ("SK", "int32", sk),
            ("SCALE", "float32", float(a["scale"])),
            ("MASK_FILTER", "float32", float(a.get("mask_filter", 0.0)))]
    for name in ("q", "k", "v", "out") + (("mask",) if mask is not None else ()):
        offset, strides = a["layouts"][name]
        prefix = name.upper()
        spec += [(f"{prefix}_OFF", "int32", int(offset))]
        spec += [(f"{prefix}_S{i}", "int32", int(s)) for i, s in enumerate(strides)]
    inputs = [q, k, v] + ([mask] if mask is not None else [])
    # Texel fetches on lavapipe (one gather instead of a loop over SIMD lanes); an int32 mask
    # stays a storage buffer (texel formats here are float).
    texel = texel_reads(target, q, k, v, *([mask] if mask_kind == "add" else []))
    texels = {i: "r32f" for i in range(3 + (mask_kind == "add"))} if texel else {}
    # Shared-memory staging of K and V blocks on GPUs; texel profiles fetch them in place and
    # give each invocation several rows.
    staged = not texel
    rows = 1 if staged else max(1, min(TEXEL_ROWS, TEXEL_ROW_FLOATS // (d + dv),
                                       sq // max(1, target.subgroup_size)))
    lanes = _lanes(-(-sq // rows), target)
    bq, bk = lanes * rows, _key_block(d, dv, target) if staged else TEXEL_BLOCK_KEYS
    params = dict(LANES=lanes, R=rows, BQ=bq, BK=bk, D=d, DV=dv, TEXEL=texel, STAGED=staged,
                  UNROLL="" if staged else "[[unroll]] ",
                  mask_kind=mask_kind, causal=bool(a.get("causal", False)),
                  NEG_INF=float_literal(-np.inf), NAN=float_literal(np.nan))
    return [Kernel("attention", params, spec, inputs + [out], writes=[len(inputs)],
                   groups=(-(-sq // bq), b * h, 1), local_size=(lanes, 1, 1), nodes=node.sources,
                   flops=2 * b * h * sq * sk * (d + dv),
                   shared_memory_bytes=4 * bk * (d + dv) if staged else 0, texel_buffers=texels)]
