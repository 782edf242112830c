"""com.microsoft MatMulNBits: Y = A · Wᵀ for a block-quantized weight W [N, K] that stays packed
in the bundle (2, 4 or 8 bits a weight) and is dequantized in registers by
templates/matmul_nbits.comp.j2: W[n, k] = (q[n, k] - zero_point[n, b]) * scale[n, b] for the
block b = k / block_size. ONNX DequantizeLinear with block_size feeding a MatMul becomes this op
too (passes/quantized_matmul.py), so one kernel serves both.

Layout (onnxruntime's): B is uint8 [N, n_blocks, block_size * bits / 8], each weight row n
contiguous along K, the first weight of a byte in its lowest bits; scales [N, n_blocks]; zero
points either uint8 packed like B ([N, ceil(n_blocks * bits / 8)]) or of the scales' type
([N, n_blocks]), 2^(bits - 1) where absent. Weight rows are whole 32-bit words (block_size >= 16),
so the kernel reads words and extracts 32 / bits weights from each.

Decoding generates one row of A a token (M small): the kernel is a GEMV over rows of W, a
workgroup reducing ROWS rows of W for up to M_TILE rows of A at once (on CPU profiles an
invocation, alone), so each weight word is read once per M_TILE tokens. A prompt (M >= PROMPT_ROWS) instead takes a GEMM: on tensor cores the
cooperative-matrix one, dequantizing W's words as it fetches them (4 and 8 bits); elsewhere W is
dequantized into scratch memory first (templates/gather_block_quantized.comp.j2, every row) for
the tiled GEMM of lower/matmul.py.
Either stores through a fused epilogue (passes/fuse_epilogues.py: a SwiGLU gate, a residual
add, a cast to float32 after a float16 product), as the float products do. A paired product
(passes/paired_products.py: two products' packed weights one after the other, SwiGLU's gate and
up) takes ROWS / 2 output columns a workgroup, each from a row of both; a prompt's
cooperative-matrix GEMM computes both, the other GEMMs the two apart (lower/paired.py).
"""
from __future__ import annotations

import numpy as np

from ..dtypes import kernel_types
from ..epilogue_operands import epilogue_strides
from ..errors import CompileError
from ..registry import FLOATS
from ..shapes import prod
from ..ir import Value
from .gather_block_quantized import dequantize_rows, zero_point_row
from .kernel import Kernel, buffer_view, register, unsupported_dtype
from .layernorm import normalized_first
from ..memory import ALIGNMENT
from ..targets import GUARANTEED_BINDING_BYTES
from .matmul import tiled_matmul
from .paired import rows, unpaired
from .store_expression import build_epilogue, operand_types

MS = "com.microsoft"
# Rows of W a workgroup computes, rows of A (tokens) at most, and its invocations.
ROWS = 4
M_TILE = 4
LOCAL = 64
# From this many rows of A on, W is dequantized into scratch for the tiled GEMM (where it fits one
# binding, without bias or float zero points). On an H100 (`python3 -m benchmarks.gpu.matmul_nbits
# 4x4x64v,4x4x64vg,4x4x64vd`, 4096 x 4096 and 4096 x 11008, dequantizing a value an invocation)
# the GEMVs took 103 and 267 us at M = 32, 197 and 518 at M = 64, 383 and 1022 at M = 128; the
# dequantized GEMM 133 and 268 at M = 64, 181 and 274 at M = 128 (float16 weights: 38 and 104,
# 89 and 112), most of it the dequantization. Dequantizing a word an invocation is not measured
# yet; it may move the crossover below 64.
PROMPT_ROWS = 64
# GPU profiles with subgroup arithmetic, where A's rows fit shared memory, with STAGED_GROUPS > 0:
# a workgroup of STAGED_LOCAL invocations stages A once and computes STAGED_GROUPS groups of ROWS
# rows, a subgroup a group, each sum one subgroup addition (no barrier after the staging). 0: the
# workgroup of LOCAL invocations computes ROWS rows, its partial sums added in shared memory. On an
# H100, the decode step of a Llama-3.2-1B-shaped int4-sym decoder at context 128 (benchmarks/
# RESULTS.md) took 1.16 ms with 4 groups of 4 rows, 1.41 with 8 groups, 1.48 with 2, and 1.95
# unstaged; 2 rows a group (1.35 ms of GPU time against 1.24) and STAGED_UNROLL 2 (1.51) were slower.
STAGED_GROUPS = 4
STAGED_LOCAL = 128
STAGED_UNROLL = 1   # chunks of the rows each invocation loads before it computes
# B read 16 bytes (4 words) at a time by each invocation where rows allow, else a word at a time.
# On an H100 (`python3 -m benchmarks.gpu.matmul_nbits 4x4x64,4x4x128,4x4x64v,2x4x64`) 16-byte
# loads were 4-13% faster at M = 1 and within 10% at M = 16; ROWS, M_TILE and LOCAL the best
# there within 10%. At M = 1 the kernel took 12.3, 24.1, 26.5 and 61.2 us for K x N = 4096 x
# 4096, 4096 x 11008, 11008 x 4096, 4096 x 32000: 1.9x to 7.2x faster than float16 weights.
VECTOR_LOADS = True
# Packed weights become floats by shifting them into 1.0's mantissa (1 + q / 2^bits) instead of an
# integer-to-float conversion, which GPUs run at a quarter of the fma rate.
MANTISSA_WEIGHTS = True
LIMITS = ("g_idx (act-order); bits other than 2, 4, 8; block_size not a power of two from 16; "
          "accuracy_level (ignored: A is never quantized); a packed weight over 128 MiB "
          "(maxStorageBufferRange); prompts with a bias or float zero points, or (without cooperative matrices) a "
          "dequantized weight over 128 MiB with fused operands, run as repeated GEMV")


def _output_shape(shapes: list, attrs: dict, dtypes: list) -> tuple | None:
    """[..., N] of A [..., K]."""
    return (*shapes[0][:-1], int(attrs["N"])) if shapes and shapes[0] and "N" in attrs else None


def nbits_kernels(node, target, *, a, b, scales, zero_points, bias, k: int, n: int, bits: int,
                  block_size: int, norm=None):
    """The kernel: `b` uint8 holding N rows of n_blocks * block_size weights of `bits` bits,
    `scales` N * n_blocks floats, `zero_points` None, uint8 packed or floats. norm: (scale,
    epsilon) of an RMS normalization of A's rows the kernel computes as it reads them
    (passes/normalized_products.py); where it cannot (the prompt's GEMM, CPU profiles' kernel),
    the norm's kernel runs first."""
    y = node.outputs[0]
    where = f"{node.op_type} '{node.name}'"
    for v in (a, scales, *([bias] if bias is not None else [])):
        if np.dtype(v.dtype).name not in FLOATS:
            raise unsupported_dtype(node, v, "a quantized matrix product")
    if bits not in (2, 4, 8):
        raise CompileError(f"{where}: bits {bits} is not supported; vkc's kernel takes 2, 4 "
                           "or 8-bit weights.")
    if block_size < 16 or block_size & (block_size - 1):
        raise CompileError(f"{where}: block_size {block_size} must be a power of two, at least "
                           "16 (as onnxruntime requires).")
    if a.shape[-1] != k:
        raise CompileError(f"{where}: A '{a.name}' {list(a.shape)} does not end in K = {k}.")
    blocks = -(-k // block_size)
    row_bytes = blocks * block_size * bits // 8
    if b.size * np.dtype(b.dtype).itemsize != n * row_bytes or np.dtype(b.dtype) != np.uint8:
        raise CompileError(f"{where}: B '{b.name}' ({np.dtype(b.dtype).name} {list(b.shape)}) "
                           f"is not uint8 [N, n_blocks, blob] = [{n}, {blocks}, "
                           f"{block_size * bits // 8}].")
    if b.nbytes > GUARANTEED_BINDING_BYTES:
        raise CompileError(f"{where}: the packed weight '{b.name}' is {b.nbytes >> 20} MiB, over "
                           "the 128 MiB every Vulkan device can bind; split the product "
                           "along N when exporting.")
    if scales.size != n * blocks:
        raise CompileError(f"{where}: scales '{scales.name}' {list(scales.shape)} must hold "
                           f"N * n_blocks = {n * blocks} values.")
    zp_kind = None
    if zero_points is not None:
        zp_bytes = -(-blocks * bits // 8)
        if np.dtype(zero_points.dtype) == np.uint8 and zero_points.size == n * zp_bytes:
            zp_kind = "packed"
        elif np.dtype(zero_points.dtype).name in FLOATS and zero_points.size == n * blocks:
            zp_kind = "float"
        else:
            raise CompileError(f"{where}: zero_points '{zero_points.name}' "
                               f"({np.dtype(zero_points.dtype).name} {list(zero_points.shape)}) "
                               f"are neither uint8 [N * {zp_bytes}] nor [N * n_blocks] floats.")
    if bias is not None and bias.size != n:
        raise CompileError(f"{where}: bias '{bias.name}' {list(bias.shape)} must be [N] = [{n}].")
    m = prod(a.shape[:-1])
    # paired (passes/paired_products.py): W's N rows are two products' weights, `paired` rows each
    paired = node.attrs.get("paired")
    columns = paired or n
    # A fused epilogue (passes/fuse_epilogues.py) sees the output as (batch, m, n): the kernels'
    # rows are the leading dims flattened, out_shape[-2] of them a batch.
    out_shape = tuple(y.shape) if len(y.shape) >= 2 else (1, columns)
    scratch = Value(f"{y.name}/weights", a.dtype, (n, k))
    # CPU profiles (lavapipe): an invocation a group of ROWS rows, no shared memory or barrier.
    # One MatMulNBits node at M = 1 (packed zero points) on lavapipe with 2 cores, compiled for
    # generic (split-K) and for lavapipe, Model.bench's median: split-K took 55, 17 and 132 ms for
    # K x N = 2048 x 8192 4-bit, 2048 x 2048 8-bit and 64 x 32000 8-bit; a row group an
    # invocation 14, 13 and 2.9 ms.
    split_k, local = target.matmul != "texel", min(LOCAL, target.max_invocations)
    if norm is not None and (m >= PROMPT_ROWS or not split_k or local & (local - 1)):
        return normalized_first(node, target, lower_matmul_nbits)
    if m >= PROMPT_ROWS and bias is None and zp_kind != "float" and _rows_of_one_matrix(node, out_shape, m):
        gemm = dict(a=a, m=m, k=k, bits=bits, block_size=block_size, out_shape=out_shape)
        if (kernels := _packed_gemm(node, target, b=b, scales=scales, zero_points=zero_points, y=y, n=n,
                                    paired=paired, **gemm)) is not None:
            return kernels
        if scratch.nbytes <= GUARANTEED_BINDING_BYTES:
            kernels = _dequantized_gemm(node, target, b=b, scales=scales, zero_points=zero_points, w=scratch,
                                        y=node.outputs[0], n=n, paired=paired, **gemm)
            if kernels is None:  # a pair, and the tiled GEMM computes one product
                return [k for half in unpaired(node, _weight_rows) for k in lower_matmul_nbits(half, target)]
            return kernels
        if parts := _row_parts(node, b, scales, zero_points, n, k, a.dtype, paired):
            return [kernel for part in parts for kernel in _dequantized_gemm(node, target, **part, **gemm)]
    weights = dict(BITS=bits, PER_WORD=32 // bits, BLOCKS=blocks, WORDS_PER_BLOCK=block_size * bits // 32,
                   K_EXACT=k == blocks * block_size, MANTISSA=MANTISSA_WEIGHTS, zero_points=zp_kind,
                   has_bias=bias is not None, TS=kernel_types(scales)["T"],
                   TZ=kernel_types(zero_points)["T"] if zp_kind == "float" else None,
                   TBIAS=kernel_types(bias)["T"] if bias is not None else None)
    bindings = [buffer_view(b), scales]
    bindings += [buffer_view(zero_points) if zp_kind == "packed" else zero_points] if zp_kind else []
    bindings += [bias] if bias is not None else []
    return [_gemv_kernel(node, target, a=a, y=y, weights=bindings, params=weights, m=m, n=n, k=k,
                         row_bytes=row_bytes, split_k=split_k, norm=norm, out_shape=out_shape,
                         staged_groups=STAGED_GROUPS)]


def _gemv_kernel(node, target, *, a, y, weights: list, params: dict, m: int, n: int, k: int, row_bytes: int,
                 split_k: bool, norm, out_shape, staged_groups: int) -> Kernel:
    """The GEMV kernel of templates/matmul_nbits.comp.j2: `weights` the bindings after A (the
    packed rows, then scales, zero points and bias where present), `params` what the template
    knows of them; staged_groups: STAGED_GROUPS."""
    where = f"{node.op_type} '{node.name}'"
    paired = node.attrs.get("paired")
    columns = paired or n
    local = min(LOCAL, target.max_invocations)
    m_tile = min(m, M_TILE)
    k_padded = row_bytes * 8 // params["BITS"]
    # A's rows as float vec4s, zero past K, and a subgroup's sum of squares of each
    staged_bytes = m_tile * (k_padded * 4 + (4 * STAGED_LOCAL if norm else 0))
    staged = bool(split_k and staged_groups and target.subgroup_reductions and
                  STAGED_LOCAL <= target.max_invocations and staged_bytes <= target.max_shared_memory)
    if staged:
        local = STAGED_LOCAL
    expr, operands, ep_spec, ep_ops, helpers = build_epilogue(node, "matmul", out_shape, typed=True)
    spec = [("M", "int32", m), ("N", "int32", columns), ("K", "int32", k), ("BLOCKS", "int32", params["BLOCKS"]),
            ("ROW_WORDS", "int32", row_bytes // 4),
            ("ZP_ROW_BYTES", "int32", -(-params["BLOCKS"] * params["BITS"] // 8)), ("ROWS_PER_BATCH", "int32", out_shape[-2])]
    spec += [("PAIR", "int32", paired)] if paired else []
    # 16-byte loads of B where every row starts on 16 bytes (the weights' binding does)
    vec = 4 if VECTOR_LOADS and (row_bytes // 4) % 4 == 0 else 1
    params = dict(params, LOCAL=local, ROWS=ROWS, M_TILE=m_tile, VEC=vec, SPLIT_K=split_k, PAIRED=bool(paired),
                  SUBGROUP_SUM=target.subgroup_reductions, STAGED=staged, GROUPS=staged_groups if staged else 1,
                  UNROLL=STAGED_UNROLL,
                  STAGED_VEC4S=k_padded // 4, LANE_VEC4S=vec * params["PER_WORD"] // 4,
                  # A's rows start on 16 bytes (K a multiple of 4): vec4 loads of A
                  A_VEC4=params["K_EXACT"] and k % 4 == 0,
                  # float16 A and norm scale read 16 bytes (eight values) at a time where a word's
                  # values are whole 16-byte groups (the staged kernel reads A once, as vec4s)
                  A_HALF8=not staged and _half8(a, k, params),
                  NORM_HALF8=bool(norm) and not staged and _half8(norm[0], k, params),
                  # T: what Y stores (float32 under a float16 A where the epilogue widens); AB: A's
                  **kernel_types(y), AB=kernel_types(a)["T"],
                  n_epilogue=len(operands), epilogue_expr=expr, epilogue_helpers=helpers,
                  epilogue_types=operand_types(operands, y),
                  NORM=norm is not None, TN=kernel_types(norm[0])["T"] if norm else None)
    if norm:
        spec.append(("EPS", "float32", float(norm[1])))
    bindings = [a, *weights]
    bindings += [y, *operands, *norm[:1]] if norm else [y, *operands]
    # a workgroup's (CPU profiles: an invocation's) ROWS rows of W: as many output columns, or
    # half as many of a paired product (each from a row of both halves)
    per = (ROWS // 2 if paired else ROWS) * (staged_groups if staged else 1)
    groups = (-(-columns // (per if split_k else per * local)), -(-m // m_tile), 1)
    if groups[0] > 65535:
        raise CompileError(f"{where}: N = {n} needs more than 65535 workgroups of {ROWS} rows.")
    return Kernel("matmul_nbits", params, spec + ep_spec, bindings, writes=[len(bindings) - 1 - len(operands)],
                  groups=groups, local_size=(local, 1, 1), nodes=node.sources,
                  flops=m * columns * (2 * k + ep_ops) + 2 * m * (n - columns) * k,
                  shared_memory_bytes=staged_bytes if staged else 4 * local * (ROWS + bool(norm)) * m_tile if split_k else 0)


def _half8(v, k: int, params: dict) -> bool:
    """Whether float16 `v`, K values a row, is read as 16-byte groups of eight values: rows start
    on 16 bytes and each word of W takes whole groups."""
    return np.dtype(v.dtype) == np.float16 and params["K_EXACT"] and k % 8 == 0 and params["PER_WORD"] % 8 == 0


def _weight_rows(node, part):
    """The MatMulNBits by part 0 or 1 of a paired node's packed rows (lower/paired.py)."""
    inputs = [node.inputs[0]] + [rows(node.inputs[i], part, node.name + f"/{i}")
                                 for i in (1, 2, 3) if node.input(i) is not None]
    attrs = {k: v for k, v in node.attrs.items() if k in ("K", "bits", "block_size")}
    return inputs, {**attrs, "N": node.attrs["paired"]}


def _rows_of_one_matrix(node, out_shape, m: int) -> bool:
    """Whether every fused epilogue operand indexes batch b, row r as row b * rows + r of one
    matrix would, for the m rows of A (what the tiled GEMM's epilogue sees: lower/matmul.py's
    rows_per_batch); an operand broadcast over a batch's rows does not."""
    rows = out_shape[-2]
    fused = node.inputs[node.attrs.get("n_op_inputs", len(node.inputs)):]
    return rows in (1, m) or all(s[0] == rows * s[1] for s in (epilogue_strides("matmul", out_shape, v.shape)
                                                               for v in fused))


def _row_parts(node, b, scales, zero_points, n: int, k: int, dtype, paired) -> list[dict] | None:
    """A prompt's product whose dequantized W would not fit one binding (an LM head: 128256 x
    2048 float16 is 525 MB) in parts of W's rows, each a binding's worth: its packed rows,
    scales and zero points as views of the weights, its scratch, and its columns of Y (a window
    of Y from the part's first column, rows N apart). None where a part's weights or columns
    would not start on a binding boundary (the repeated GEMV runs then), or with fused
    epilogue operands (indexed by whole rows of Y) or a pair."""
    y = node.outputs[0]
    if paired or len(node.inputs) > node.attrs.get("n_op_inputs", len(node.inputs)):
        return None
    row_bytes = {v: v.nbytes // n for v in (b, scales, zero_points) if v is not None}
    part_rows = GUARANTEED_BINDING_BYTES // (k * np.dtype(dtype).itemsize) // ALIGNMENT * ALIGNMENT
    parts = []
    for first in range(0, n, part_rows):
        rows = min(part_rows, n - first)
        if any((first * size) % ALIGNMENT for size in [*row_bytes.values(), np.dtype(y.dtype).itemsize]):
            return None
        view = {v: Value(f"{v.name}/rows{first}", v.dtype, (rows * size // np.dtype(v.dtype).itemsize,), alias_of=v,
                         alias_offset=first * size) for v, size in row_bytes.items()}
        window = Value(f"{y.name}/columns{first}", y.dtype, ((y.size // n - 1) * n + rows,), alias_of=y,
                       alias_offset=first * np.dtype(y.dtype).itemsize)
        parts.append(dict(b=view[b], scales=view[scales], zero_points=view.get(zero_points),
                          w=Value(f"{y.name}/weights{first}", dtype, (rows, k)), y=window, n=rows, row_stride=n))
    return parts


def _prompt_gemm(node, target, *, a, b, y, m, k, columns, row_elements, row_stride, out_shape, paired, **packed):
    """The GEMM of a prompt's product: A [M, K] by B = Wᵀ read from W's rows (row_elements
    apart), Y's rows row_stride apart; `packed`: tiled_matmul's packed and b_mode, where B is W
    as it is packed. None where no kernel fits (a pair the kernel cannot compute, packed weights
    off tensor cores)."""
    strides = dict(SA_B0=0, SA_B1=0, SB_B0=0, SB_B1=0, SC_B0=0, SC_B1=0,
                   SA_M=k, SA_K=1, SB_K=1, SB_N=row_elements, SC_M=row_stride, SC_N=1)
    return tiled_matmul(node, target, a=a, b=b, c=y, M=m, N=columns, K=k, batch0=1, batch1=1, strides=strides,
                        coords="matmul", out_shape=out_shape, paired=paired,
                        rows_per_batch=out_shape[-2] if m > out_shape[-2] else None, **packed)


def _packed_gemm(node, target, *, a, b, scales, zero_points, y, m, k, n, bits, block_size, out_shape, paired):
    """A prompt's product on tensor cores reading W as it is packed: the cooperative-matrix GEMM
    dequantizes each word of W as it fetches it (templates/matmul_coopmat.comp.j2), so no
    scratch holds W and no dispatch dequantizes it first. None where that kernel does not fit
    (no cooperative matrix, 2-bit weights): the dequantized GEMM then."""
    blocks = -(-k // block_size)
    columns = paired or n
    packed = dict(scales=scales, zero_points=buffer_view(zero_points) if zero_points is not None else None,
                  bits=bits, block=block_size, blocks=blocks, zp_row=zero_point_row(blocks, bits))
    return _prompt_gemm(node, target, a=a, b=buffer_view(b), y=y, m=m, k=k, columns=columns,
                        row_elements=blocks * block_size, row_stride=columns, out_shape=out_shape, paired=paired,
                        packed=packed, b_mode="packed")


def _dequantized_gemm(node, target, *, a, b, scales, zero_points, w, y, m, k, n, bits, block_size, out_shape,
                      row_stride=None, paired=None):
    """A prompt's product: W dequantized into scratch ([N, K], A's dtype: a word of W an
    invocation, stores along W's rows), then the tiled GEMM reading it as Bᵀ, each weight once
    per tile of rows instead of once per M_TILE rows. (Dequantized as [K, N], the scratch took
    the GEMM as long and its writes 1.6-5x as long on an H100.) row_stride: Y's rows are this
    many elements apart (N where Y is all of the output). paired: W's rows are two products'
    (`paired` each), computed together where the GEMM kernel can (the cooperative-matrix one);
    None where it cannot."""
    columns = paired or n
    gemm = _prompt_gemm(node, target, a=a, b=w, y=y, m=m, k=k, columns=columns, row_elements=k,
                        row_stride=row_stride or columns, out_shape=out_shape, paired=paired)
    if gemm is None:
        return None
    blocks = -(-k // block_size)
    dequantize = dequantize_rows(node, target, data=b, scales=scales, zero_points=zero_points,
                                 y=w, idx=None, rows=n, k=k, row_stride=blocks * block_size,
                                 bits=bits, block=block_size,
                                 zp_row=zero_point_row(blocks, bits), signed=False,
                                 default_zp=2 ** (bits - 1))
    return dequantize + gemm


@register("MatMulNBits", domain=MS, dtypes=None, float16=True, constant_inputs=(1, 2, 3),
          dtypes_doc="float32, float16; B and uint8 zero points packed 2, 4 or 8 bits",
          limits=LIMITS, output_shape=_output_shape, product="matmul", pairs=True,
          linear_in=lambda node: (0,) if node.input(5) is None else (), normalizes_rows=6)
def lower_matmul_nbits(node, target):
    if node.input(4) is not None:
        raise CompileError(f"MatMulNBits '{node.name}': g_idx (act-order quantization) is not "
                           "supported; quantize without act-order (desc_act off).")
    return nbits_kernels(node, target, a=node.inputs[0], b=node.inputs[1], scales=node.inputs[2],
                         zero_points=node.input(3), bias=node.input(5), k=node.attrs["K"],
                         n=node.attrs["N"], bits=node.attrs.get("bits", 4),
                         block_size=node.attrs["block_size"],
                         norm=(node.input(6), node.attrs["normalized"]["epsilon"]) if "normalized" in node.attrs else None)
