"""vkc.Attention: softmax(Q·Kᵀ·scale + mask)·V in one kernel, the score matrix never written to
memory. An internal op: passes/fuse_attention.py writes it for the
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
            "mask": (0, (sb, sh, s_query, s_key)), stride 0 on broadcast dims; "bias" likewise
  parts     {operand: {"batch" or "row": (inner, outer stride)}}: that dim of the operand is two
            parts no one stride walks, index i at (i / inner) * outer stride + (i % inner) * its
            stride in `layouts` (Swin's windows: a grid of windows of a grid of tokens each, read
            where the projection wrote them; a window mask the same for every image: outer
            stride 0)
  scale     multiplies Q·Kᵀ before the mask is added
  mask_kind "none", "add" (a float32 mask added to the scores) or "keep" (an int32 mask: where it
            is not positive, mask_filter is added; onnxruntime's raw key-padding masks)
  causal    key k is seen by query q only when k <= q + SK - SQ (bottom-right aligned, as
            onnxruntime's unidirectional attention with past keys)
  kv_group  query heads per K/V head (grouped-query attention; 1 by default): query head h
            reads K/V head h // kv_group
  causal_align  "bottom_right" (the default, above) or "top_left": k <= q
  window    >= 0, with bottom-right causal: query q sees only its last `window` keys, none
            with k <= q + SK - SQ - window (a sliding window: onnxruntime's GroupQueryAttention
            local_window_size)
  key_limit only the first key_limit keys are seen (ONNX Attention's masks shorter than the keys)
  softcap   > 0: each score s becomes softcap * tanh(s / softcap) before the mask
  keep_to_inf   a keep mask hides its keys entirely (score -inf) instead of adding mask_filter
  empty_rows_zero   a row that sees no key gives 0 (ONNX Attention), not NaN (the unfused softmax)
An optional fifth input, int32 [B], is each batch's key count (a KV cache's filled rows, ONNX
Attention's nonpad_kv_seqlen), read at run time: keys at and past it are not attended and not
read, and SK in the causal rule is that count. An optional sixth, the bias, is a second float
term added to the scores beside an "add" mask (Swin's relative position bias, per head, beside
its window mask, per window): two strided operands where their sum would be [B, H, SQ, SK].
Inputs seven and eight, float32, are K's and V's scales where K or V is int8 (an int8 KV cache:
passes/int8_cache.py): an element is its int8 value times its row's scale. Such attention takes
the tiled kernel on every profile (K and V read one element at a time).

The kernels: a workgroup per (batch * head, block of query rows), every row's running max, sum
and output row kept through an online softmax over blocks of keys (flash attention), no score
written to memory. GPUs (templates/attention_tiled.comp.j2): K and V blocks and the block's Q
rows staged in shared memory, each query row shared by a group of lanes that split its keys for
Q·Kᵀ and its output columns for P·V (two small register-tiled matmuls per key block). Texel
profiles (lavapipe, templates/attention.comp.j2): K and V fetched in place, several rows per
invocation so that each fetch serves all of them; float16 there takes the tiled kernel (texel
formats are float32 only). float16 attention on a device with 16x16x16 float16 cooperative
matrices (templates/attention_coopmat.comp.j2): both products on the tensor cores, the softmax
between them through shared memory. A decode step (a few query rows over a long cache) splits the
keys into chunks over more workgroups, which the last of them to finish combines (on texel
profiles a second kernel: lower/attention_split.py). The tiled kernel can also take a decode
step's rotary embedding in (passes/rotary_in_attention.py: attribute `rotary`, inputs 8-11): it
reads Q and the step's K and V rows from the packed projection, rotating Q and K as it loads
them, and stores the two rows into the caches.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..dtypes import TYPES, float_literal, kernel_types, texel_format
from ..errors import CompileError
from ..ir import Node, Value
from ..registry import lower_node
from ..magnitudes import attention_logits, weighted_average
from .attention_split import CHUNK_STEP, combine, partials, split_kv
from .coopmat_emulation import emulation_shared_bytes
from .kernel import Kernel, register, texel_reads, unsupported_dtype
from .permuted_layouts import attention_reads_permuted, attention_stores_permuted
from .matmul import COOPMAT_TYPES

# Q, o and a block of scores live in each invocation's registers: past 256 columns they spill
# beyond use.
MAX_HEAD_DIM = 256
LIMITS = (f"head sizes above {MAX_HEAD_DIM}; key-padding masks int32 or of Q's float type")
DTYPES = ("float32", "float16")
F16 = np.dtype(np.float16)
INT8 = np.dtype(np.int8)

# --- GPUs (tiled) ---
# Invocations per workgroup (fewer where the device allows fewer), as ROW_GROUPS groups of
# LANES lanes; each lane takes ROWS (4, 2 or 1) query rows: the most that still give the
# target's min_workgroups, else 1 (a batch-1 model then has the most workgroups there are). Keys
# per block: as many as fit shared memory, at least one per lane; each block costs four barriers
# (two with shuffles, and a subgroup barrier for P: SUBGROUP_P).
# 256 invocations (16 row groups of 16 lanes) run BERT's and ViT's attention about twice as fast
# as 128; 8 lanes a row are 1.5-1.8x slower than 16; 3 rows a lane lose to 4; ViT's 197 rows shared
# evenly by 4 query blocks of 52 gain nothing. `python3 -m benchmarks.gpu.attention_tiles` times
# these variants (us per dispatch at BERT-base and ViT-B/16 shapes, batch 1 and 8).
THREADS = 256
ROW_GROUPS = 16
LANES = (16, 8, 4)
ROWS = (4, 2, 1)
BLOCK_KEYS = (64, 32, 16, 8, 4)
# Floats a lane holds across a block (its output columns and scores, per row): more spill.
MAX_LANE_FLOATS = 96
# Where the target has subgroup operations (Target.subgroup_reductions) and a row group's lanes fit
# its subgroups, they exchange block maxima and sums by subgroup shuffles: one barrier a key block
# fewer. The kernel checks the device's subgroup size and exchanges through shared memory where
# subgroups are narrower.
SHUFFLE_ROWS = True
# Where the row groups exchange by shuffles, P is handed from the score lanes to the P·V lanes of
# the same row group with a subgroup barrier instead of the workgroup's (2-4 % faster;
# `python3 -m benchmarks.gpu.attention_tiles`).
SUBGROUP_P = True
# Where K and V are read as vec4s, the next key block is fetched into registers while this one is
# computed (its loads' latency hidden behind the block's work): 7-14 % faster at BERT's and ViT's
# shapes (`python3 -m benchmarks.gpu.attention_tiles`).
PREFETCH_KV = True
# Not built: skipping the rows and key columns of a ragged last block (ViT's 197 = 3 x 64 + 5).
# Guarding the block's loops, per product or in a copy for ragged blocks only, made the kernel
# slower: its time is not in the products a skip would save.

# --- Cooperative matrix (float16 on tensor cores) ---
# Subgroups per workgroup (16 query rows each), largest first: the first that still gives a
# COOPMAT_WORKGROUP_SHARE-th of the target's min_workgroups workgroups, else the last. Keys per
# block: the first that fits shared memory. Q, K and V rows fetched 16 bytes at a time; head
# sizes up to COOPMAT_MAX_HEAD (a lane keeps DV / (subgroup / 16) output floats).
# K and V shared by more rows beat more workgroups down to about a quarter of min_workgroups
# (`python3 -m benchmarks.gpu.attention_tiles --precision fp16` times 1, 2 and 4 subgroups).
COOPMAT_SUBGROUPS = (4, 2, 1)
COOPMAT_WORKGROUP_SHARE = 4
COOPMAT_BLOCK_KEYS = (64, 32)
COOPMAT_MAX_HEAD = 128
# The next key block is fetched into registers while this one is computed where that takes at
# most this many 16-byte registers an invocation.
COOPMAT_PREFETCH_REGS = 8

# --- Texel profiles ---
# Keys per block: only the span between running-max rescales (4 measured fastest on lavapipe:
# longer blocks unroll into more code than they save).
TEXEL_BLOCK_KEYS = 4
# Invocations per workgroup, and query rows per invocation: each K and V element fetched serves
# that many rows. On lavapipe at B=1, H=4, S=128, D=64: 1, 2, 4, 8 rows took 3.9, 2.4, 1.7,
# 1.4 ms. The rows' Q and o stay within TEXEL_ROW_FLOATS floats per invocation (8 rows at
# D = DV = 64).
TEXEL_LANES = 64
TEXEL_ROWS = 8
TEXEL_ROW_FLOATS = 1024


def _layout(attrs: dict, name: str) -> tuple[int, list[int]]:
    """An operand's offset and strides, its two-part dims' outer strides after the four."""
    offset, strides = attrs["layouts"][name]
    return offset, list(strides) + [outer for _, outer in attrs.get("parts", {}).get(name, {}).values()]


def _vec4_rows(layout) -> bool:
    """Whether an operand's rows are runs of whole, aligned vec4s: contiguous along the row, and
    its offset and other strides multiples of 4 elements."""
    offset, strides = layout
    return strides[3] == 1 and offset % 4 == 0 and all(s % 4 == 0 for i, s in enumerate(strides) if i != 3)


def _texel_lanes(rows: int, target) -> int:
    """64 invocations, halved down to a subgroup while that still covers `rows` (a decoder step
    has one query), so that few lanes idle."""
    lanes = min(TEXEL_LANES, target.max_invocations)
    while lanes > max(1, target.subgroup_size) and lanes // 2 >= rows:
        lanes //= 2
    return lanes


def _scale_layout(node, name: str, operand: Value, scale: Value) -> tuple[int, list[int]]:
    """The offset and (batch, head, row) strides of an int8 operand's scales, one per row of its
    last axis: its own layout's over the row's width, where its rows are whole and contiguous."""
    width = operand.size // max(1, scale.size)
    offset, strides = node.attrs["layouts"][name]
    if width < 1 or strides[3] != 1 or offset % width or any(x % width for x in strides[:3]):
        raise CompileError(f"Attention '{node.name}': int8 {name.upper()} is not read in whole rows of "
                           f"{width} (a vkc bug: passes/int8_cache.py reads the cache itself).")
    return offset // width, [x // width for x in strides[:3]]


def tiled_shared_bytes(t: dict) -> int:
    """Shared memory of attention_tiled.comp.j2 for tile parameters `t`: Q and K rows with one
    vector of padding, V rows, P with one vec4 of padding a row, the lanes' partials, and where
    the kernel combines split-KV chunks, each row's chunk weights and sums and its scale."""
    bq, bk, row = t["BQ"], t["BK"], t["D"] + (4 if t["VEC"] == "vec4" else 1)
    combine = 2 * bq * t["COMBINE_CHUNKS"] + bq if t.get("COMBINE_CHUNKS") else 0
    return 4 * (bq * row + bk * row + bk * t["DV"] + bq * (bk + 4) + bq * t["TX"] + combine)


def tiled_tiles(bh: int, sq: int, sk: int, d: int, dv: int, target, one_row: bool = False,
                chunks: int = 0) -> dict | None:
    """The tiled kernel's shape for `bh` batches x heads of `sq` query rows and `sk` keys: the
    first, in the order of preference above, that fits the target's invocations, shared memory
    and MAX_LANE_FLOATS; None when none does. one_row: a lane takes one row (split-KV, whose
    workgroups are as many as the rule wants, and whose rows the row groups cover); chunks: the
    split-KV chunks the kernel combines (0: none)."""
    groups_max = ROW_GROUPS
    while groups_max > 1 and groups_max // 2 >= sq:  # short sequences: fewer idle row groups
        groups_max //= 2
    first = ROWS[-1] if one_row else \
        next((r for r in ROWS if -(-sq // (groups_max * r)) * bh >= target.min_workgroups), ROWS[-1])

    def shuffle(tx: int) -> bool:
        return SHUFFLE_ROWS and target.subgroup_reductions and tx <= target.subgroup_size
    # Smaller tiles, in this order, until one fits: fewer keys per block, fewer rows per lane,
    # fewer row groups, fewer lanes per row group (the slowest to give up, measured).
    for tx in LANES:
        vw = 4 if dv % (4 * tx) == 0 else 1
        rd = -(-dv // (vw * tx))
        for ty in (groups_max >> i for i in range(groups_max.bit_length())):
            if ty * tx > min(THREADS, target.max_invocations):
                continue
            for rq in ROWS[ROWS.index(first):]:
                # (no block of more keys than the next power of two above SK)
                for bk in (b for b in BLOCK_KEYS if b >= tx and (b == tx or b // 2 < sk)):
                    t = dict(TX=tx, TY=ty, RQ=rq, BQ=ty * rq, BK=bk, RK=bk // tx, RD=rd, VW=vw,
                             VECV="vec4" if vw == 4 else "float", D=d, DV=dv,
                             VEC="vec4" if d % 4 == 0 else "float", SHUFFLE=shuffle(tx))
                    t["DQ"] = d // 4 if t["VEC"] == "vec4" else d
                    if chunks:
                        t.update(COMBINE_CHUNKS=chunks, COMBINE_PER_LANE=-(-t["BQ"] * dv // (tx * ty)))
                    if (tiled_shared_bytes(t) <= target.max_shared_memory
                            and rq * (rd * vw + t["RK"]) <= MAX_LANE_FLOATS):
                        return t
    return None


def coopmat_shared_bytes(t: dict) -> int:
    """Shared memory of attention_coopmat.comp.j2: Q (then P) rows, K and V rows (float16,
    padded by 8), each subgroup's float scratch of 16 rows, and the lanes' exchange slots."""
    rows = 16 * t["WQ"]
    return (2 * (rows * max(t["D"], t["BK"]) + rows * 8 + t["BK"] * (t["D"] + t["DV"] + 16))
            + 4 * (rows * (max(t["BK"], t["DV"]) + 4) + t["WQ"] * t["SUBGROUP"]))


def coopmat_tiles(bh: int, sq: int, d: int, dv: int, layouts: dict, target, dtype) -> dict | None:
    """The cooperative-matrix kernel's shape, or None where it does not apply: float16 Q, K and V
    (or int8 K and V, an int8 cache, dequantized to float16 as they are fetched) whose rows are
    whole runs of 8 elements on 8-element boundaries, head sizes multiples of 16 up to
    COOPMAT_MAX_HEAD, and a device listing the 16x16x16 float16 shape with subgroups of 16
    lanes or a multiple."""
    sub = target.subgroup_size
    if (np.dtype(dtype) != F16 or (16, 16, 16, *COOPMAT_TYPES) not in target.cooperative_matrix
            or sub < 16 or sub % 16 or d % 16 or dv % 16 or max(d, dv) > COOPMAT_MAX_HEAD):
        return None
    for name in ("q", "k", "v"):
        offset, strides = layouts[name]
        if strides[3] != 1 or offset % 8 or any(s % 8 for i, s in enumerate(strides) if i != 3):
            return None
    enough = target.min_workgroups // COOPMAT_WORKGROUP_SHARE
    wq = next((w for w in COOPMAT_SUBGROUPS if -(-sq // (16 * w)) * bh >= enough),
              COOPMAT_SUBGROUPS[-1])
    for w in COOPMAT_SUBGROUPS[COOPMAT_SUBGROUPS.index(wq):]:
        if w * sub > target.max_invocations:
            continue
        for bk in COOPMAT_BLOCK_KEYS:
            t = dict(WQ=w, BQ=16 * w, BK=bk, D=d, DV=dv, SUBGROUP=sub)
            if bk % (8 * sub // 16) == 0 and coopmat_shared_bytes(t) <= target.max_shared_memory:
                regs = -(-bk * d // (8 * w * sub)) + -(-bk * dv // (8 * w * sub))
                return dict(t, PREFETCH=regs <= COOPMAT_PREFETCH_REGS,
                            emulate_coopmat=target.emulate_cooperative_matrix)
    return None


def _absorb_rotary(node, rotary, rotation: dict, opset: int):
    """The attention rotating its decode step's Q and new K row as it reads them from the rotary
    embedding's packed input, and storing the new K and V rows into the caches itself
    (passes/rotary_in_attention.py): where Q is one token's heads as the rotary wrote them, K and
    V are the rotary's caches whole ([batch, K/V heads, rows, head], contiguous: the kernel's
    reads and the rotary's stores address a row alike), and the packed columns hold the heads
    attention reads. The node's inputs 8-11: the tables, the positions and the write rows; its
    outputs: the result and both caches (in place); attribute `rotary`: the description, and
    the two nodes, lowered as they were where the kernel cannot rotate."""
    a = node.attrs
    b, h, sq, sk, d, dv = a["dims"]
    kc, vc = rotary.outputs[1], rotary.outputs[2]
    kv_heads = h // int(a.get("kv_group", 1))
    x = rotation["x"]
    if (sq != 1 or "parts" in a or node.input(6) is not None or node.input(7) is not None or len(node.outputs) != 1
            or node.inputs[1] is not kc or node.inputs[2] is not vc or rotation["axis"] != 2
            or rotation["head"] != d or rotation["q_columns"] != h * d or rotation["v_columns"] != kv_heads * dv
            or x.dtype != node.inputs[0].dtype or rotation["v_first"] < rotation["first"] + (h + kv_heads) * d):
        return None
    for cache, width in ((kc, d), (vc, dv)):
        if cache.alias_of is None or cache.root_offset() != 0 or tuple(cache.shape) != (b, kv_heads, sk, width):
            return None
    for name, width in (("k", d), ("v", dv)):
        offset, strides = a["layouts"][name]
        want = (kv_heads * sk * width, sk * width, width, 1)
        if offset != 0 or any(s != w for s, w, n in zip(strides, want, (b, kv_heads, sk, width)) if n > 1):
            return None
    offset, (sb, sh, _, s3) = a["layouts"]["q"]
    if offset != 0 or sh != d or s3 != 1 or (b > 1 and sb != h * d):
        return None
    layouts = {**a["layouts"], "q": (rotation["first"], (rotation["width"], d, rotation["width"], 1))}
    inputs = [x, kc.alias_of, vc.alias_of] + [node.input(i) for i in range(3, 8)] + \
        [rotation["cos"], rotation["sin"], rotation["positions"], rotation["write_rows"]]
    described = {k: v for k, v in rotation.items() if k not in ("x", "cos", "sin", "positions", "write_rows")}
    attrs = {**a, "layouts": layouts, "rotary": dict(described, unfused=(rotary, node), opset=opset)}
    return Node(node.op_type, node.name, inputs, [node.outputs[0], kc, vc], attrs, node.domain,
                rotary.sources + node.sources)


def _lower_rotating(node, target) -> list[Kernel]:
    """An attention that absorbed its rotary embedding (_absorb_rotary): where its kernel is the
    tiled one (split-KV or not), that kernel rotating as it reads; else (texel profiles, the
    cooperative-matrix kernel) the two nodes' kernels."""
    r = node.attrs["rotary"]
    rope, plain = r["unfused"]
    rotations = lower_node(rope, target, r["opset"])  # its checks hold either way
    kernels = lower_attention(plain, target)
    k = kernels[0]
    if len(kernels) != 1 or k.template != "attention_tiled":
        return rotations + kernels
    x, cos, sin, positions, write_rows = (node.inputs[i] for i in (0, 8, 9, 10, 11))
    q_layout = {"Q_OFF": r["first"], "Q_S0": r["width"], "Q_S1": r["head"], "Q_S2": r["width"], "Q_S3": 1}
    spec = [(name, kind, q_layout.get(name, value)) for name, kind, value in k.spec]
    spec += [("HALF", "int32", r["half"]), ("TABLE_ROWS", "int32", cos.shape[0]), ("X_ROW", "int32", r["width"]),
             ("KN_OFF", "int32", r["first"] + r["q_columns"]), ("VN_OFF", "int32", r["v_first"])]
    params = dict(k.params, rotary=True, interleaved=r["interleaved"], partial=2 * r["half"] < r["head"],
                  one_position=r["one_position"], idx_words=np.dtype(write_rows.dtype).itemsize // 4,
                  TC=kernel_types(cos)["T"], VEC_READS=[n for n in k.params["VEC_READS"] if n != "Q"])
    n = len(k.bindings)
    bindings = [x] + k.bindings[1:] + [cos, sin, positions, write_rows] + list(node.outputs[1:])
    return [replace(k, params=params, spec=spec, bindings=bindings, writes=k.writes + [n + 4, n + 5],
                    nodes=node.sources)]


@register("vkc.Attention", dtypes=None, float16=True, limits=LIMITS, magnitude=weighted_average(2, attention_logits),
          dtypes_doc="float32, float16; key-padding masks int32; K and V int8 with scales", store_cast_absorbing=True,
          int8_operands={1: 6, 2: 7}, reads_permuted=attention_reads_permuted, stores_permuted=attention_stores_permuted,
          absorbs_rotary=_absorb_rotary)
def lower_attention(node, target):
    if "rotary" in node.attrs:
        return _lower_rotating(node, target)
    q, k, v, mask, lengths, bias, k_scale, v_scale = (node.input(i) for i in range(8))
    out = node.outputs[0]
    a = node.attrs
    b, h, sq, sk, d, dv = a["dims"]
    # The output may be float16 under float32 Q, K and V too (passes/store_casts.py); K and V int8
    # with their scales (an int8 KV cache: passes/int8_cache.py).
    for what, val, dtypes in (("Q", q, (q.dtype,)), ("K", k, (INT8,) if k_scale else (q.dtype,)),
                              ("V", v, (INT8,) if v_scale else (q.dtype,)), ("output", out, (q.dtype, F16))):
        if np.dtype(q.dtype).name not in DTYPES or all(val.dtype != d for d in dtypes):
            raise unsupported_dtype(node, val, f"attention's {what} (with {q.dtype} Q)")
    scales = {name: x for name, x in (("k", k_scale), ("v", v_scale)) if x is not None}
    if scales and "parts" in a and any(name in a["parts"] for name in scales):
        raise CompileError(f"Attention '{node.name}': an int8 K or V read in two-part dims (a vkc bug).")
    if max(d, dv) > MAX_HEAD_DIM:
        raise CompileError(f"Attention '{node.name}': head size {max(d, dv)} is above the "
                           f"{MAX_HEAD_DIM} vkc's attention kernel keeps in registers.")
    mask_kind = a.get("mask_kind", "none")
    if (mask is None) != (mask_kind == "none"):
        raise CompileError(f"Attention '{node.name}': mask_kind {mask_kind!r} does not match "
                           f"its mask input {mask} (a vkc bug).")
    want = {"add": q.dtype, "keep": np.int32}.get(mask_kind)
    if mask is not None and np.dtype(mask.dtype) != want:
        raise CompileError(f"Attention '{node.name}': mask '{mask.name}' is "
                           f"{np.dtype(mask.dtype).name}; a {mask_kind} mask must be "
                           f"{np.dtype(want).name}.")
    if bias is not None and (mask_kind != "add" or np.dtype(bias.dtype) != q.dtype):
        raise CompileError(f"Attention '{node.name}': bias '{bias.name}' ({np.dtype(bias.dtype).name}) "
                           f"goes with an add mask of Q's type {np.dtype(q.dtype).name} (a vkc bug).")

    if lengths is not None and (np.dtype(lengths.dtype) != np.int32 or tuple(lengths.shape) != (b,)):
        raise CompileError(f"Attention '{node.name}': key counts '{lengths.name}' must be int32 [{b}] "
                           f"(a vkc bug: the pass that wrote this node casts them).")
    kv_group = int(a.get("kv_group", 1))
    if kv_group < 1 or h % kv_group:
        raise CompileError(f"Attention '{node.name}': {h} query heads do not share {kv_group}-wise "
                           "K/V heads (a vkc bug).")
    keys = int(a.get("key_limit", sk))
    if not 0 <= keys <= sk:
        raise CompileError(f"Attention '{node.name}': key_limit {keys} is outside 0..{sk} (a vkc bug).")
    window = a.get("window")
    if window is not None and (not a.get("causal") or a.get("causal_align") == "top_left" or window < 0):
        raise CompileError(f"Attention '{node.name}': a window of {window} keys needs bottom-right causal "
                           "attention (a vkc bug).")
    parts = a.get("parts", {})
    # (the chunks' combination writes the output at one stride per dim)
    split = None if "out" in parts else split_kv(b, h, sq, keys, kv_group, target)
    heads, chunks = split or (1, 1)
    rows = heads * sq  # a workgroup's rows: `heads` query heads' sq rows each
    if b * h > 65535:
        raise CompileError(f"Attention '{node.name}': {b} x {h} batches x heads exceed the "
                           "65535 workgroups of one grid dimension.")
    spec = [("H", "int32", h), ("SQ", "int32", sq), ("SK", "int32", sk),
            ("SCALE", "float32", float(a["scale"])),
            ("MASK_FILTER", "float32", float(a.get("mask_filter", 0.0)))]
    terms = [name for name, x in (("mask", mask), ("bias", bias)) if x is not None]
    for name in ("q", "k", "v", "out", *terms):
        offset, strides = a["layouts"][name]
        prefix = name.upper()
        spec += [(f"{prefix}_OFF", "int32", int(offset))]
        spec += [(f"{prefix}_S{i}", "int32", int(s)) for i, s in enumerate(strides)]
    for name, scale in scales.items():
        offset, strides = _scale_layout(node, name, {"k": k, "v": v}[name], scale)
        spec += [(f"{name.upper()}SC_OFF", "int32", offset)]
        spec += [(f"{name.upper()}SC_S{i}", "int32", s) for i, s in enumerate(strides)]
    for name, dims in parts.items():
        if name in ("q", "k", "v", "out", *terms):
            for dim, (inner, outer) in dims.items():
                i = {"batch": ("BI", "S0O"), "row": ("RI", "S2O")}[dim]
                spec += [(f"{name.upper()}_{i[0]}", "int32", int(inner)), (f"{name.upper()}_{i[1]}", "int32", int(outer))]
    inputs = [q, k, v] + ([mask] if mask is not None else []) + ([bias] if bias is not None else []) \
        + list(scales.values()) + ([lengths] if lengths is not None else [])
    if split:
        spec += [("CHUNKS", "int32", chunks)]
    if window is not None:
        spec += [("WINDOW", "int32", int(window))]
    softcap = float(a.get("softcap", 0.0))
    split_dims = {dim: [n.upper() for n, d in parts.items() if dim in d] for dim in ("batch", "row")}
    common = dict(mask_kind=mask_kind, bias=bias is not None, parts=split_dims, causal=bool(a.get("causal", False)),
                  window=window is not None, lengths=lengths is not None,
                  KV_GROUP=kv_group, KEYS=keys, causal_top_left=a.get("causal_align") == "top_left",
                  SOFTCAP=float_literal(softcap) if softcap > 0 else None,
                  keep_to_inf=bool(a.get("keep_to_inf", False)),
                  empty_rows_zero=bool(a.get("empty_rows_zero", False)),
                  NEG_INF=float_literal(-np.inf), NAN=float_literal(np.nan),
                  split=split is not None, GH=heads, CHUNK_STEP=CHUNK_STEP,
                  INT8=[name.upper() for name in scales], SCALES=[name.upper() + "SC" for name in scales],
                  I8=TYPES["int8"])
    flops = 2 * b * h * sq * sk * (d + dv)
    # Split-KV: the first pass writes the chunks' partial results, the combine the output.
    dest = partials(out, b, h, sq, dv, chunks) if split else out
    then = [combine(node, dest, lengths, out, common, chunks, target)] if split else []
    grid = b * h // heads, chunks
    # Texel fetches on lavapipe (one gather instead of a loop over SIMD lanes); an int32 mask
    # stays a storage buffer. float16 (no texel format) takes the tiled kernel there too.
    floats = [q, k, v] + ([mask] if mask_kind == "add" else []) + ([bias] if bias is not None else [])
    if texel_format(q.dtype) and (split or texel_format(out.dtype)) and not scales and texel_reads(target, *floats):
        per_lane = max(1, min(TEXEL_ROWS, TEXEL_ROW_FLOATS // (d + dv),
                              rows // max(1, target.subgroup_size)))
        lanes = _texel_lanes(-(-rows // per_lane), target)
        bq = lanes * per_lane
        params = dict(LANES=lanes, R=per_lane, BQ=bq, BK=TEXEL_BLOCK_KEYS, D=d, DV=dv, **common)
        return [Kernel("attention", params, spec, inputs + [dest], writes=[len(inputs)],
                       groups=(-(-rows // bq), *grid), local_size=(lanes, 1, 1),
                       nodes=node.sources, flops=flops,
                       texel_buffers={i: "r32f" for i, x in enumerate(inputs)
                                      if any(x is f for f in floats)})] + then
    # T: Q's, K's and V's type; TO: the output's (float16 under float32 inputs where the Cast
    # into the next product was absorbed: passes/store_casts.py).
    types = dict(kernel_types(q), TO=kernel_types(out)["T"])
    cm = None if split else coopmat_tiles(b * h, sq, d, dv, {n: _layout(a, n) for n in ("q", "k", "v")},
                                          target, q.dtype)
    if cm is not None:
        shared = coopmat_shared_bytes(cm) + emulation_shared_bytes(target, 16, 16, 16, cm["WQ"])
        return [Kernel("attention_coopmat", dict(**cm, **common, **types), spec, inputs + [out],
                       writes=[len(inputs)], groups=(-(-sq // cm["BQ"]), b * h, 1),
                       local_size=(cm["WQ"] * cm["SUBGROUP"], 1, 1), nodes=node.sources,
                       flops=flops, shared_memory_bytes=shared)]
    t = tiled_tiles(b * h // heads * chunks, rows, sk, d, dv, target, one_row=split is not None,
                    chunks=chunks if split else 0)
    if t is None:
        raise CompileError(f"Attention '{node.name}': no tile of the attention kernel at head "
                           f"size {max(d, dv)} fits {target.name}'s {target.max_shared_memory} "
                           "bytes of shared memory.")
    vec_reads = [name.upper() for name, whole in (("q", t["VEC"] == "vec4"), ("k", t["VEC"] == "vec4"),
                                                  ("v", t["VW"] == 4))
                 if whole and name not in scales and types["T"].vec4 is not None and _vec4_rows(_layout(a, name))]
    groups = (-(-rows // t["BQ"]), *grid)
    params = dict(**t, **common, **types, VEC_READS=vec_reads, PREFETCH_KV=PREFETCH_KV, SUBGROUP_P=SUBGROUP_P,
                  combines=split is not None, rotary=False)
    if split:
        # The last chunk of each row block to finish combines them: one dispatch, no combine
        # kernel (its per-block count zeroed by the run's first dispatch: lower/counters.py).
        count = Value(f"{out.name}/split_kv_counts", np.dtype(np.uint32), (groups[0] * groups[1],))
        n = len(inputs)
        return [Kernel("attention_tiled", params, spec, inputs + [dest, out, count], writes=[n, n + 1, n + 2],
                       groups=groups, local_size=(t["TX"] * t["TY"], 1, 1), nodes=node.sources, flops=flops,
                       shared_memory_bytes=tiled_shared_bytes(t) + 4, zeroed=(n + 2,))]
    return [Kernel("attention_tiled", params, spec, inputs + [out], writes=[len(inputs)], groups=groups,
                   local_size=(t["TX"] * t["TY"], 1, 1), nodes=node.sources, flops=flops,
                   shared_memory_bytes=tiled_shared_bytes(t))]
