"""Gemm and MatMul on the tiled matmul template; `tiled_matmul` also serves 1x1 and implicit-GEMM
convolution (conv.py)."""
from __future__ import annotations

import numpy as np

from ..dtypes import FLOAT16_NATIVE, kernel_types, texel_format
from ..errors import CompileError
from ..magnitudes import shared_axis, weighted_sum
from ..ir import Value
from ..shapes import broadcast_strides, collapse_dims, contiguous_strides, prod, unpermuted
from ..epilogue_operands import epilogue_strides, operand_perm
from .layernorm import normalized_first
from .paired import column_view, columns, unpaired
from .coopmat_emulation import emulation_shared_bytes
from .store_expression import build_epilogue, operand_types
from ..registry import FLOATS
from ..rows import Rows, aligned
from .kernel import Kernel, grid_1d, register, texel_reads


def _vec4_load(strides, contiguous: str, other: str, extent: int, batch=()) -> bool:
    """vec4 loads need the operand contiguous along one dim, that dim's extent a multiple of 4
    and every other stride a multiple of 4 (so each vec4 is 16-byte aligned)."""
    return (strides[contiguous] == 1 and extent % 4 == 0 and strides[other] % 4 == 0
            and all(strides[b] % 4 == 0 for b in batch))


# Fitted tiles are never narrower than this along M, nor longer than MAX_TILE_SIDE along N.
MIN_TILE_SIDE = 16
MAX_TILE_SIDE = 256


def _registers(target, tile_m: int, tile_n: int) -> tuple[int, int]:
    """Registers a tile's invocation takes along M and N: the profile's, fewer on a small tile (a
    32-wide tile keeps 8 invocations along it)."""
    return min(target.reg_m, max(4, tile_m // 16)), min(target.reg_n, max(4, tile_n // 16))


def _invocations(target, tile_m: int, tile_n: int) -> int:
    reg_m, reg_n = _registers(target, tile_m, tile_n)
    return (tile_m // reg_m) * (tile_n // reg_n)


def _fit_short_side(target, M: int, N: int, tile_m: int, tile_n: int) -> tuple[int, int]:
    """Rows that fill half the tile or less (a convolution's 16 or 32 output channels against
    nvidia's 128 rows: 12 or 25 % of every tile busy) take a tile halved along M, and twice as
    long along N where N has the work and the profile's invocations a tile allow (UNet's 16- and
    32-channel layers take a third less GPU time: `python3 -m benchmarks.gpu.models nvidia
    unet_small 1`). A short N keeps the profile's
    tile: no model measured needs the same along N (squeeze-excite's 1-pixel convolutions take
    a few microseconds either way)."""
    most = _invocations(target, tile_m, tile_n)
    pow2 = lambda n: 1 << max(0, n - 1).bit_length()  # noqa: E731
    while tile_m > MIN_TILE_SIDE and tile_m // 2 >= M:
        tile_m //= 2
        if tile_n < min(MAX_TILE_SIDE, pow2(N)) and _invocations(target, tile_m, 2 * tile_n) <= most:
            tile_n *= 2
    return tile_m, tile_n


def choose_tile(target, M: int, N: int, K: int, batches: int) -> tuple[int, int, int, int]:
    """(tile_m, tile_n, reg_m, reg_n): the profile's tile fitted to a short side
    (_fit_short_side; a tuned problem's tile is taken as measured), then halved (largest side
    first, down to 32) until the output has at least `min_workgroups` tiles or cannot shrink
    further."""
    tile_m, tile_n = target.tile_m, target.tile_n
    if not target.exact_tile:
        tile_m, tile_n = _fit_short_side(target, M, N, tile_m, tile_n)
    def groups(bm, bn):
        return -(-M // bm) * -(-N // bn) * batches
    if target.splitk_workgroups and groups(tile_m, tile_n) < target.min_workgroups and \
            groups(tile_m, tile_n) * _max_split(target, K, target.tile_k) >= target.splitk_workgroups:
        return (tile_m, tile_n, *_registers(target, tile_m, tile_n))   # split-K gives the workgroups
    # Deep reductions stop at 64-wide tiles and split K instead (see _split_k).
    floor = 64 if K >= 512 else 32
    while groups(tile_m, tile_n) < target.min_workgroups and max(tile_m, tile_n) > floor:
        if tile_m >= tile_n:
            tile_m //= 2
        else:
            tile_n //= 2
    return (tile_m, tile_n, *_registers(target, tile_m, tile_n))


def tiled_params(target, M, N, K, strides, b_mode, batches: int, vec4: bool, b_row=None) -> dict:
    """Tile sizes and load modes for templates/matmul_tiled.comp.j2; vec4=False (a dtype with no
    4-vector storage type) keeps both operands on scalar loads; b_row: the allocated length of
    B's rows along N (N unless they are padded)."""
    tile_m, tile_n, tm, tn = choose_tile(target, M, N, K, batches)
    bk = target.tile_k
    wg_m, wg_n = tile_m // tm, tile_n // tn
    bm, bn, threads = wg_m * tm, wg_n * tn, wg_m * wg_n
    if (bm * bk) % threads or (bn * bk) % threads:
        raise CompileError(f"target '{target.name}': a {bm}x{bn}x{bk} tile cannot be shared evenly "
                           f"by {threads} invocations; choose tile and register sizes that divide.")
    a_batch, b_batch = ("SA_B0", "SA_B1"), ("SB_B0", "SB_B1")
    # Whole vec4s per thread, for dtypes with a 4-vector storage type.
    vec_ok = lambda extent: vec4 and (extent * bk // 4) % threads == 0  # noqa: E731
    if _vec4_load(strides, "SA_K", "SA_M", K, a_batch) and vec_ok(bm):
        a_load = "k4"
    elif _vec4_load(strides, "SA_M", "SA_K", M, a_batch) and vec_ok(bm):
        a_load = "m4"
    else:
        a_load = "scalar"
    if b_mode == "im2col":
        b_load = "im2col"
    elif _vec4_load(strides, "SB_N", "SB_K", b_row or N, b_batch) and vec_ok(bn):
        b_load = "n4"
    elif _vec4_load(strides, "SB_K", "SB_N", K, b_batch) and vec_ok(bn):
        b_load = "k4"
    else:
        b_load = "scalar"
    return dict(TM=tm, TN=tn, BK=bk, WG_M=wg_m, WG_N=wg_n, BM=bm, BN=bn, THREADS_=threads,
                a_load=a_load, b_load=b_load, aligned=M % bm == 0 and N % bn == 0 and K % bk == 0,
                a_k_contiguous=strides["SA_K"] == 1,
                b_n_contiguous=b_mode == "strided" and strides["SB_N"] == 1)


def tiled_matmul(node, target, *, a, b, c, M, N, K, batch0, batch1, strides, coords, out_shape,
                 b_mode="strided", conv_spec=(), own_tail=("acc",), own_operands=(),
                 fused=True, rows_per_batch=None, b_row_elements=None, paired=None,
                 norm=None, packed=None) -> list[Kernel] | None:
    """The dispatches of one matmul: the device profile picks shared-memory tiles (GPUs) or
    texel-buffer register tiles (texel profiles: CPUs), or register tiles (a few rows, and
    operands over the texel limit); on a GPU a matmul with too few tiles also splits K. `strides` holds SA_*, SB_*, SC_* in elements. fused=False stores the plain products
    (a step inside a larger lowering, such as Winograd's, that applies the epilogue itself).
    coords "conv_cols": a convolution whose images lie side by side along N (strides PIX and
    SC_IMG say where each image's pixels go in C). b_row_elements: B's rows (along N) are
    allocated this many elements long, so vector loads may run past N (padded im2col rows).
    paired: B holds two products' weights side by side, the second `paired` columns after the
    first, and the epilogue reads both (passes/paired_products.py): the GEMV kernel computes
    them together; None where another kernel fits (the caller lowers the two apart then).
    norm: (scale, epsilon) of an RMS normalization of A's rows that the product computes as it
    reads them (passes/normalized_products.py): A is the norm's input, and only the GEMV kernel
    takes it; None where another kernel fits (the caller normalizes first then).
    packed: B is block-quantized weights Wᵀ read as they are packed (b_mode "packed", B bound as
    32-bit words; lower/matmul_nbits.py): {scales, zero_points (packed uint8 or None), bits,
    block, blocks, zp_row}; only the cooperative-matrix kernel dequantizes them as it fetches
    them, so None where another kernel fits (the caller dequantizes W into scratch then)."""
    if fused:
        expr, operands, ep_spec, ep_ops, helpers = build_epilogue(
            node, "conv" if coords.startswith("conv") else "matmul", out_shape, own_tail, own_operands,
            typed=not coords.startswith("conv"))
    else:
        expr, operands, ep_spec, ep_ops, helpers = "acc_v", [], [], 0, []
    if rows_per_batch:  # batches folded into rows (lower_matmul): row m is batch m / rows_per_batch
        sb = {n[:-3]: v for n, _, v in ep_spec if n.endswith("_SB")}
        ep_spec = [(n, t, 0 if n.endswith("_SB") else sb[n[:-3]] // rows_per_batch if n.endswith("_SM") else v)
                   for n, t, v in ep_spec]
    batches = batch0 * batch1
    # T: what C stores; AB: what A and B hold (float16 under a float32 C: --precision fp16-matmul's
    # products with their Cast to float32 fused, fuse_epilogues._widens).
    # TA: A's own type where it is not B's (a normalized product reads the norm's input).
    types = dict(kernel_types(c), AB=kernel_types(b if norm else a)["T"], TA=kernel_types(a)["T"])
    vec4 = types["AB"].vec4 is not None
    # The tuner's key; float16 problems apart from float32 ones (other kernels, other best tiles).
    problem = f"{M}x{N}x{K}x{batches}:{b_mode}" + ("" if a.dtype == np.float32 else f":{np.dtype(a.dtype).name}")
    target = target.for_problem(problem)
    # matmul_texel fetches one and four elements a texel.
    texel = (all(texel_format(v.dtype, 1) and texel_format(v.dtype, 4) for v in (a, b, c))
             and texel_reads(target, a, b))
    if packed and texel:
        return None
    if texel:
        a, strides = _rows_last(a, M, K, strides)
        b, strides = _padded_columns(b, K, N, b_mode, strides)
    spec = [("M", "int32", M), ("N", "int32", N), ("K", "int32", K), ("BATCH1", "int32", batch1)]
    spec += [(name, "int32", strides[name]) for name in
             ("SA_B0", "SA_B1", "SA_M", "SA_K", "SB_B0", "SB_B1", "SC_B0", "SC_B1", "SC_M", "SC_N")]
    if b_mode in ("strided", "packed"):
        spec += [("SB_K", "int32", strides["SB_K"]), ("SB_N", "int32", strides["SB_N"])]
    spec += list(conv_spec)
    store_spec = [(name, "int32", strides[name]) for name in ("PIX", "SC_IMG")] if coords == "conv_cols" else []
    spec += store_spec
    # A few rows (a batch-1 Linear layer) would waste most of a shared-memory tile.
    if texel:
        template, params, groups, extra = _texel_params(target, M, N, K, batches, strides, b_mode,
                                                        (batch0, batch1), b.size, c.dtype)
        params["EP_TEXEL"] = (all(texel_format(e.dtype) for e in operands)
                              and texel_reads(target, *operands))
        if params["EP_TEXEL"]:
            formats = {3 + j: texel_format(e.dtype) for j, e in enumerate(operands)}
            extra["texel_buffers"] = {**extra["texel_buffers"], **formats}
        split, depth = 1, K
    elif (coop2 := None if packed else _coopmat2_params(target, a, b, c, M, N, strides, b_mode, coords, batches)):
        if target.emulate_cooperative_matrix:
            raise CompileError(f"{node.op_type} '{node.name}': target '{target.name}' emulates cooperative "
                               "matrices, and VK_NV_cooperative_matrix2 kernels have no emulation; "
                               "compile without the tuned coopmat2 tile.")
        template, (params, groups, extra) = "matmul_coopmat2", coop2
        split, depth = 1, K
    elif (coop := None if M <= 8 else _coopmat_params(target, a, b, c, M, N, K, strides,
                                                          b_mode, batches, b_row_elements or N, paired or 0,
                                                          packed["bits"] if packed else 0)):
        template, (params, groups, extra) = "matmul_coopmat", coop
        # A pair's slices would add two products' partial sums, and packed weights bind their
        # scales where the slices' sums go: both take deeper K steps instead.
        split, depth = _split_k(target, groups, K, params["BK"], enough=coopmat_workgroups(target),
                                min_steps=target.coopmat_split_steps) \
            if _coopmat_splits(params) and not (paired or packed) and not _short_k(target, K, params["LK"], groups) \
            else (1, K)
        if paired:
            spec.append(("PAIR", "int32", paired))
    elif (gemv := _gemv_params(target, M, N, K, strides, b_mode, coords, batches, types["AB"].vec4,
                               paired or 0, bool(norm))) is not None:
        template, params, groups, extra, (split, depth) = gemv
        if paired:
            spec.append(("PAIR", "int32", paired))
    elif target.matmul == "texel" or M <= 8:
        template, params, groups, extra = _register_params(target, M, N, batches, strides, b_mode,
                                                           vec4)
        # The register kernel walks convolution windows channel by channel: no split there.
        split, depth = (1, K) if target.matmul == "texel" or b_mode == "im2col" else \
            _split_k(target, groups, K, 16)
    else:
        template = "matmul_tiled"
        params, groups, extra = _tiled_params(target, M, N, K, strides, b_mode, batches, vec4,
                                              types, b_row_elements or N)
        split, depth = _split_k(target, groups, K, params["BK"],
                                max(target.min_workgroups, target.splitk_workgroups))
    if (paired and template not in ("matmul_gemv", "matmul_coopmat")) or (norm and template != "matmul_gemv") \
            or (packed and template != "matmul_coopmat"):
        return None
    weights = []   # packed weights' scales and zero points: bindings after the epilogue's operands
    if packed:
        weights = [packed["scales"]] + ([packed["zero_points"]] if packed["zero_points"] is not None else [])
        params.update(BITS=packed["bits"], TS=kernel_types(packed["scales"])["T"], has_zp=len(weights) == 2)
        spec += [("BLOCK", "int32", packed["block"]), ("BLOCKS", "int32", packed["blocks"]),
                 ("ZP_ROW", "int32", packed["zp_row"])]
    norm_scale = []   # the norm's scale: a binding after all others, the epsilon a constant
    if norm:
        norm_scale = [norm[0]]
        params["TS"] = kernel_types(norm[0])["T"]
        spec.append(("EPS", "float32", float(norm[1])))
    if max(groups[0], groups[1], batches * split) > 65535:
        raise CompileError(f"{node.op_type} '{node.name}' needs {groups} workgroups, over "
                           "Vulkan's guaranteed 65535 per axis.")
    params.update(coords=coords, split_k=split > 1, splitk_fused=False, epilogue_types=operand_types(operands, c), **types)
    common = dict(nodes=node.sources, writes=[2], problem=problem, **extra)
    if template in ("matmul_tiled", "matmul_register", "matmul_gemv"):
        common["load_offsets"] = {0: "A_SHIFT", 1: "B_SHIFT"}   # slice.read_slices_with_shifted_loads
    if split == 1:
        return [Kernel(template, dict(params, n_epilogue=len(operands), epilogue_expr=expr,
                                      epilogue_helpers=helpers),
                       spec + ep_spec, [a, b, c, *operands, *weights, *norm_scale], groups=groups,
                       flops=batches * M * N * ((4 if paired else 2) * K + ep_ops),
                       # coopmat2's tensor-layout store keeps C's rows 16-byte aligned: no shifted window
                       store_offset=None if template == "matmul_coopmat2" else 2, **common)]
    # Split-K: slices of K write partial sums; who adds them up depends on how much there is to add.
    fused = params["splitk_fused"] = _fuse_split_k(target, template, params, split)
    slices = spec + [("SPLIT", "int32", split), ("KS", "int32", depth)]
    # The cooperative-matrix kernel stores whole accumulator tiles: its slices are padded to them.
    rows, cols = (groups[1] * params["BM"], groups[0] * params["BN"]) if template == "matmul_coopmat" else (M, N)
    partial = Value(f"{c.name}/split_k_partials", np.dtype(types["ACC"].name),
                    (batches * split * rows * cols * (2 if paired else 1),))
    if fused:
        # One dispatch: the last slice of each output tile to finish (counted in a per-tile
        # counter the run zeroes first: lower/counters.py) adds them and applies the epilogue.
        count = Value(f"{c.name}/split_k_counts", np.dtype(np.uint32), (groups[0] * groups[1] * batches,))
        n_ep = len(operands)
        return [Kernel(template, dict(params, n_epilogue=n_ep, epilogue_expr=expr, epilogue_helpers=helpers),
                       slices + ep_spec, [a, b, c, *operands, partial, count, *norm_scale],
                       groups=(groups[0], groups[1], batches * split),
                       flops=batches * M * N * ((4 if paired else 2) * K + split + ep_ops), store_offset=2,
                       zeroed=(4 + n_ep,), **dict(common, writes=[2, 3 + n_ep, 4 + n_ep],
                                                  shared_memory_bytes=common.get("shared_memory_bytes", 0) + 4))]
    # Else a second pass adds them up over the whole device and applies the epilogue.
    first = Kernel(template, dict(params, n_epilogue=0, epilogue_expr="acc_v", epilogue_helpers=[]),
                   slices, [a, b, partial], groups=(groups[0], groups[1], batches * split),
                   flops=2 * batches * M * N * K, **common)
    total, local = batches * M * N, target.elementwise_local
    reduce_spec = [("TOTAL", "int32", total), ("M", "int32", M), ("N", "int32", N),
                   ("SPLIT", "int32", split), ("BATCH1", "int32", batch1)]
    reduce_spec += [(name, "int32", strides[name]) for name in ("SC_B0", "SC_B1", "SC_M", "SC_N")]
    reduce_spec += store_spec
    second = Kernel("splitk_reduce", dict(LOCAL=local, coords=coords, n_epilogue=len(operands),
                                          epilogue_expr=expr, epilogue_helpers=helpers,
                                          epilogue_types=params["epilogue_types"], **types),
                    reduce_spec + ep_spec, [partial, c, *operands], writes=[1],
                    groups=grid_1d(total, local), local_size=(local, 1, 1), nodes=node.sources,
                    flops=total * (split + ep_ops), problem=problem, store_offset=1)
    return [first, second]


def _fuse_split_k(target, template: str, params: dict, split: int) -> bool:
    """Whether the last slice of each tile adds the partial sums up itself (always on the
    cooperative-matrix kernel, which keeps no separate pass for its padded partial tiles), or a
    separate dispatch adds them up over the whole device (target.splitk_fused_sums). A fused finish
    of hundreds of sums per invocation costs the kernel more than the separate pass (ResNets at
    batch 1 a quarter slower); one of a few dozen gains."""
    if template in ("matmul_coopmat", "matmul_gemv"):   # the GEMV kernel's columns are few: so are their sums
        return True
    if template == "matmul_tiled":
        tile, threads = params["BM"] * params["BN"], params["WG_M"] * params["WG_N"]
    else:  # matmul_register
        tile, threads = params["TM"] * params["TN"] * params["LX"] * params["VEC"], params["LX"]
    return tile * split <= target.splitk_fused_sums * threads


def _max_split(target, K: int, bk: int, min_steps: int = 0) -> int:
    """The most slices K splits into: each at least `min_steps` (default splitk_min_steps) K
    steps deep, at most 32."""
    return min(K // ((min_steps or target.splitk_min_steps) * bk), 32)


def _split_k(target, groups, K: int, bk: int, want: int | None = None,
             enough: int | None = None, min_steps: int = 0) -> tuple[int, int]:
    """(slices, depth of each): where the tiles give fewer than `enough` (default
    min_workgroups) workgroups, enough slices of K for `want` (default `enough`), as deep as
    _max_split allows."""
    have = groups[0] * groups[1] * groups[2]
    enough = enough or target.min_workgroups
    if have >= enough:
        return 1, K
    split = min(-(-(want or enough) // have), _max_split(target, K, bk, min_steps))
    if split < 2:
        return 1, K
    depth = -(-K // (split * bk)) * bk
    return -(-K // depth), depth


def _tiled_params(target, M, N, K, strides, b_mode, batches, vec4, types, b_row):
    tiles = tiled_params(target, M, N, K, strides, b_mode, batches, vec4, b_row)
    groups = (-(-N // tiles["BN"]), -(-M // tiles["BM"]), batches)
    # Shared memory holds a BK-deep slice of A's and B's tiles in the accumulator type.
    acc_bytes = types["ACC"].bits // 8
    extra = dict(local_size=(tiles["WG_N"], tiles["WG_M"], 1),
                 shared_memory_bytes=acc_bytes * tiles["BK"] * (tiles["BM"] + tiles["BN"]))
    return tiles, groups, extra


F16 = np.dtype(np.float16)
# float16 A and B, float32 accumulator and result: the cooperative-matrix shapes the kernel takes.
COOPMAT_TYPES = ("float16", "float16", "float32", "float32")
COOPMAT_PAD = 8   # float16 elements padding each shared-memory row (16 bytes, against bank conflicts)
COOPMAT_SLACK = 1.25   # a larger tile may pad the output this much more than the tightest


def coopmat_shape(target, a, b, c) -> tuple[int, int, int] | None:
    """(LM, LN, LK): the largest float16 x float16 -> float32 shape the profile's device lists,
    for a matmul of float16 operands; None otherwise: a float32 model never runs on the tensor
    cores, whose float16 rounding of the operands it did not ask for."""
    if not (a.dtype == b.dtype == F16 and c.dtype in (F16, np.dtype(np.float32))):
        return None
    # The epilogue gives each lane of a subgroup the same number of neighbours in one row of a tile.
    lanes = target.subgroup_size
    shapes = [s[:3] for s in target.cooperative_matrix if tuple(s[3:]) == COOPMAT_TYPES
              and (s[0] * s[1]) % lanes == 0 and s[1] % (s[0] * s[1] // lanes) == 0]
    return max(shapes, key=lambda s: (s[0] * s[1] * s[2], s[2]), default=None)


def coopmat_workgroups(target) -> int:
    """The workgroups the cooperative-matrix kernel's tiles and split-K aim at."""
    return target.coopmat_workgroups or target.min_workgroups


def _coopmat_params(target, a, b, c, M, N, K, strides, b_mode, batches, b_row, pair=0, packed_bits=0):
    """templates/matmul_coopmat.comp.j2 where the device has a cooperative-matrix shape for
    float16 operands: the largest of the profile's workgroup tiles (coopmat_tiles) that gives
    min_workgroups workgroups and pads the output at most COOPMAT_SLACK over the tile that pads
    it least (larger tiles load less per product: an im2col convolution on 32x32 tiles runs at a
    third of the rate of 64x64 ones); else the smallest, and split-K adds workgroups.
    pair: B holds two products' weights, the second `pair` columns after the first: a tile of
    B is half each's (tiles of an even SN), the output BN / 2 columns a workgroup. packed_bits:
    b_mode "packed"'s weight width (4 or 8 bits: a word is one fetch of 8 or 4 elements).
    None where no tile fits the device (today's kernels then)."""
    # packed: B's words hold 32 / bits weights along K, dequantized to float16 as they are fetched
    shape = coopmat_shape(target, a, a if b_mode == "packed" else b, c)
    if shape is None or (b_mode == "packed" and strides["SB_K"] != 1):
        return None
    lm, ln, lk = shape
    base_k = _coopmat_base_k(target, lk)
    # Deeper K steps first, as deep as leave coopmat_k_steps steps (coopmat_k alone where 0).
    depths = [d for d in (4 * base_k, 2 * base_k) if target.coopmat_k_steps
              and K // d >= target.coopmat_k_steps] + [base_k]
    a_batch, b_batch = ("SA_B0", "SA_B1"), ("SB_B0", "SB_B1")
    # Each operand keeps its global layout in shared memory: contiguous along its inner dim.
    a_rows = strides["SA_K"] == 1
    b_rows = b_mode == "im2col" or (b_mode != "packed" and strides["SB_N"] == 1)
    # Loads of 8 (16 bytes), 4 or 1 elements along the contiguous dim, as its strides allow (and
    # `offset`, where a pair's second product starts, so that no load straddles the two).
    def vec(contiguous, other, extent, batch, offset=0):
        return next(v for v in (8, 4, 1) if v <= target.coopmat_load and (v == 1 or (
            strides[contiguous] == 1 and extent % v == 0 and strides[other] % v == 0 and offset % v == 0
            and all(strides[b] % v == 0 for b in batch))))
    a_vec = vec("SA_K", "SA_M", K, a_batch) if a_rows else vec("SA_M", "SA_K", M, a_batch)
    if b_mode == "packed" and packed_bits not in (4, 8):   # a fetch is one word: 8 or 4 weights
        return None
    b_vec = 1 if b_mode == "im2col" else 32 // packed_bits if b_mode == "packed" else \
        vec("SB_N", "SB_K", b_row, b_batch, pair) if b_rows else vec("SB_K", "SB_N", K, b_batch)
    def shared_bytes(bm, bn, bk, wm, wn):
        a_tile = (bm * (bk + COOPMAT_PAD) if a_rows else bk * (bm + COOPMAT_PAD))
        b_tile = (bk * (bn + COOPMAT_PAD) if b_rows else bn * (bk + COOPMAT_PAD))
        return 2 * target.coopmat_stages * (a_tile + b_tile) + 4 * wm * wn * lm * ln * (2 if pair else 1)
    def fit(wm, wn, sm, sn, depths):
        bm, bn, threads = wm * sm * lm, wn * sn * ln, wm * wn * target.subgroup_size
        out_n = bn // 2 if pair else bn
        if pair and sn % 2:
            return None
        # im2col: every invocation fetches one column of B at every K step.
        bk = next((d for d in depths if shared_bytes(bm, bn, d, wm, wn) <= target.max_shared_memory),
                  None)
        if bk is None or threads > target.max_invocations or (b_mode == "im2col" and threads % bn) \
                or (bm * bk) % (a_vec * threads) or (bk * bn) % (b_vec * threads):
            return None
        shared = shared_bytes(bm, bn, bk, wm, wn)
        loads = bm * bk // (a_vec * threads) + bk * bn // (b_vec * threads)
        groups = (-(-N // out_n), -(-M // bm), batches)
        return (dict(LM=lm, LN=ln, LK=lk, BM=bm, BN=bn, BK=bk, WM=wm, WN=wn, SM=sm, SN=sn, PAIRED=bool(pair),
                     SUBGROUP=target.subgroup_size, PAD=COOPMAT_PAD, STAGES=target.coopmat_stages,
                     A_MAJOR="row" if a_rows else "col", B_MAJOR="row" if b_rows else "col",
                     A_VEC=a_vec, B_VEC=b_vec, b_mode=b_mode, AB=FLOAT16_NATIVE,
                     aligned=M % bm == 0 and N % out_n == 0 and K % bk == 0,
                     DEEP_PREFETCH=target.coopmat_stages == 1 and loads <= target.coopmat_deep_prefetch,
                     emulate_coopmat=target.emulate_cooperative_matrix),
                groups, dict(local_size=(threads, 1, 1),
                             shared_memory_bytes=shared + emulation_shared_bytes(target, lm, ln, lk, wm * wn)))

    tiles = [(t, f) for t in target.coopmat_tiles if (f := fit(*t, depths))]
    if not tiles:
        return None
    fits = [f for _, f in tiles]
    enough = [f for f in fits if f[1][0] * f[1][1] * f[1][2] >= coopmat_workgroups(target)]
    if not enough:
        # Too few workgroups even on the smallest tile, and K too short for split-K slices of
        # coopmat_short_k steps: deeper K steps instead (at least 3 of them), where shared memory
        # holds them, and no split (tiled_matmul).
        if _short_k(target, K, lk, fits[-1][1]):
            deeper = [d for d in (4 * base_k, 2 * base_k) if K // d >= 3]
            return fit(*tiles[-1][0], deeper + [base_k]) or fits[-1]
        return fits[-1]
    padded = lambda f: f[1][0] * f[0]["BN"] * f[1][1] * f[0]["BM"]  # noqa: E731
    least = min(map(padded, enough))
    return next(f for f in enough if padded(f) <= COOPMAT_SLACK * least)


def _short_k(target, K: int, lk: int, groups: tuple) -> bool:
    """Whether a product on too few workgroups takes deeper K steps unsplit (Target.coopmat_short_k):
    `groups` (on the smallest tile) under coopmat_workgroups but at least an eighth of it (fewer
    are what split-K's slices fill the device with), K too short for two split-K slices of
    coopmat_short_k steps."""
    wanted, have = coopmat_workgroups(target), groups[0] * groups[1] * groups[2]
    return (bool(target.coopmat_short_k) and wanted // 8 <= have < wanted
            and K < 2 * target.coopmat_short_k * _coopmat_base_k(target, lk))


def _coopmat_base_k(target, lk: int) -> int:
    """The cooperative-matrix kernel's K step before any deepening: coopmat_k in whole steps of the
    device shape's K (lk), at least one."""
    return max(1, target.coopmat_k // lk) * lk


def coopmat2_fits(target, tile: tuple) -> bool:
    """Whether the device's VK_NV_cooperative_matrix2 shapes (target.coopmat2) allow a workgroup
    tile (BM, BN, BK, invocations, ...): multiples of the granularity listed for that many
    invocations."""
    bm, bn, bk, threads = tile[:4]
    return any(t == threads and bm % gm == 0 and bn % gn == 0 and bk % gk == 0
               for gm, gn, gk, t in target.coopmat2)


def _coopmat2_params(target, a, b, c, M, N, strides, b_mode, coords, batches):
    """templates/matmul_coopmat2.comp.j2 where the problem's tuned choice (target.coopmat2_tile)
    asks for it and the device allows the tile: float16 operands, A row-major, B row- or column-
    major, C row-major, every row and batch start 16-byte aligned (tensor-layout loads); plain
    matmuls only (a convolution's images side by side are not one matrix of C). None otherwise."""
    tile = target.coopmat2_tile
    if (not tile or b_mode != "strided" or strides["SC_N"] != 1 or coopmat_shape(target, a, b, c) is None
            or not coopmat2_fits(target, tile)):
        return None
    b_major = "row" if strides["SB_N"] == 1 else "col" if strides["SB_K"] == 1 else None
    aligned = [strides[s] for s in ("SA_M", "SA_B0", "SA_B1", "SC_M", "SC_B0", "SC_B1", "SB_B0", "SB_B1")]
    aligned.append(strides["SB_K"] if b_major == "row" else strides["SB_N"])
    if (coords != "matmul" or strides["SA_K"] != 1 or strides["SC_N"] != 1
            or b_major is None or any(s % 8 for s in aligned)):
        return None
    bm, bn, bk, threads, unroll = tile
    groups = (-(-N // bn), -(-M // bm), batches)
    return (dict(BM=bm, BN=bn, BK=bk, THREADS=threads, UNROLL=unroll, B_MAJOR=b_major, AB=FLOAT16_NATIVE,
                 BATCHED=batches > 1),
            groups, dict(local_size=(threads, 1, 1)))


def _coopmat_splits(params: dict) -> bool:
    """Whether the cooperative-matrix kernel may split K: only where both operands are fetched 16
    bytes at a time: with 8- and 2-byte B fetches (a convolution's 7x7 pixels, an N of 20) its
    slices summed to wrong results on NVIDIA, for a reason not found yet; those matmuls run unsplit."""
    return params["A_VEC"] == params["B_VEC"] == 8


def _rows_last(a, M: int, K: int, strides: dict):
    """Constant A (convolution weights) stored [groups][K][M] instead of [groups][M][K], so that
    one rgba32f texel holds four rows at one K step and the K loop walks the convolution window
    in its natural order."""
    if not (a.is_constant and strides["SA_B0"] == 0 and strides["SA_K"] == 1
            and strides["SA_M"] == K and M % 4 == 0 and a.size % (M * K) == 0):
        return a, strides
    groups = a.size // (M * K)
    if strides["SA_B1"] not in (0, M * K) or (groups > 1 and strides["SA_B1"] == 0):
        return a, strides
    data = np.ascontiguousarray(a.data.reshape(groups, M, K).transpose(0, 2, 1))
    relaid = Value(a.name + "/k_major", a.dtype, data.shape, data=data)
    return relaid, dict(strides, SA_M=1, SA_K=M)


def _padded_columns(b, K: int, N: int, b_mode: str, strides: dict):
    """Constant B (weights) whose N is not a multiple of 4 stored with zero columns up to one,
    so the kernel fetches it four columns a texel (a 10-class classifier: 3 fetches a row, not 10)."""
    if not (b.is_constant and b_mode == "strided" and N % 4 and b.size == K * N
            and strides["SB_N"] == 1 and strides["SB_K"] == N
            and strides["SB_B0"] == 0 and strides["SB_B1"] == 0):
        return b, strides
    padded = np.zeros((K, -(-N // 4) * 4), b.dtype)
    padded[:, :N] = b.data.reshape(K, N)
    return Value(b.name + "/padded", b.dtype, padded.shape, data=padded), dict(strides, SB_K=padded.shape[1])


def _padded_rows(strides, K, N, batch_counts, b_size) -> bool:
    """B rows whose stride is a whole number of texels and covers the last, partial texel of
    every row, inside B's allocation (im2col's padded rows): rgba32f fetches need no N % 4."""
    s = strides
    if s["SB_N"] != 1 or s["SB_K"] % 4 or s["SB_B0"] % 4 or s["SB_B1"] % 4 or s["SB_K"] < -(-N // 4) * 4:
        return False
    last = (batch_counts[0] - 1) * s["SB_B0"] + (batch_counts[1] - 1) * s["SB_B1"] + (K - 1) * s["SB_K"]
    return last + -(-N // 4) * 4 <= b_size


def _texel_params(target, M, N, K, batches, strides, b_mode, batch_counts, b_size, dtype):
    """templates/matmul_texel.comp.j2: register tiles fetching A and B through texel buffers
    (lavapipe). rgba32f fetches where the operand is contiguous along the fetched dim and every
    other stride keeps the vec4s aligned, r32f fetches otherwise."""
    a_batch = ("SA_B0", "SA_B1")
    tm = min(target.cpu_rows, M)
    if _vec4_load(strides, "SA_M", "SA_K", M, a_batch) and tm % 4 == 0:
        a_mode = "m4"
        while M % tm:  # whole row tiles: a texel holds four rows
            tm -= 4
    elif b_mode == "strided" and _vec4_load(strides, "SA_K", "SA_M", K, a_batch):
        a_mode = "k4"
    else:
        a_mode = "scalar"
    b_vec = 4 if b_mode == "strided" and (_vec4_load(strides, "SB_N", "SB_K", N, ("SB_B0", "SB_B1"))
                                          or _padded_rows(strides, K, N, batch_counts, b_size)) else 1
    lx = target.cpu_lanes
    cols = -(-N // b_vec)
    # No more column registers than the lanes have columns for (a narrow GEMM such as a
    # 10-class classifier would fetch clamped duplicates).
    tn = min(target.cpu_cols if b_vec == 4 else 4 * target.cpu_cols, -(-cols // lx))
    groups = (-(-cols // (lx * tn)), -(-M // tm), batches)
    # Whole vec4 stores where C's rows are contiguous, aligned and a multiple of 4 long.
    vec_store = b_vec == 4 and N % 4 == 0 and strides["SC_N"] == 1 and all(
        strides[s] % 4 == 0 for s in ("SC_M", "SC_B0", "SC_B1"))
    params = dict(TM=tm, TN=tn, LX=lx, A_MODE=a_mode, B_VEC=b_vec, VEC_STORE=vec_store,
                  b_mode=b_mode)
    texels = {0: texel_format(dtype, 1 if a_mode == "scalar" else 4), 1: texel_format(dtype, b_vec)}
    return "matmul_texel", params, groups, dict(local_size=(lx, 1, 1), texel_buffers=texels)


# K steps the register kernel unrolls on GPU profiles (a few rows' matmul streams its weights:
# with one step's loads in flight at a time, its latency bounds them). CPU profiles keep the
# plain loop.
REGISTER_UNROLL_K = 8


# A decoder step's products (a few rows against a weight) on GPUs: templates/matmul_gemv.comp.j2.
GEMV_ROWS = 4
GEMV_THREADS = 256
GEMV_UNROLL = 4
# Column invocations a workgroup, most first: the first that still gives the target's
# min_workgroups workgroups, else the last (K split across more invocations instead).
GEMV_COLUMN_THREADS = (64, 32, 16, 8, 4)
# float16 weights read 8 columns (16 bytes) an invocation where N and B's strides allow, else 4,
# with at least 4 column invocations a workgroup (two 32-byte sectors of a row): at Llama-3.2-1B's
# five decode shapes on an H100 (`python3 -m benchmarks.gpu.gemv t256u4,t256u4wc4,t256u4w`) the
# products took 74.4 us in all against 78.9 with 4-column loads and 77.2 with 2 column invocations.
GEMV_WIDE_LOADS = True
GEMV_WIDE_COLUMN_THREADS = (64, 32, 16, 8, 4)
# The invocations' partial sums of a column are added in pairs by all invocations (log2(KT)
# barriers) instead of one after another by one invocation a column.
GEMV_TREE_SUM = True
# A product whose columns give fewer than 1 / GEMV_SPLIT_BELOW of the target's min_workgroups
# workgroups (under one a core: a decoder's q/k/v, attention output and down projections) splits
# K into slices across workgroups, for GEMV_SPLIT_WORKGROUPS times min_workgroups (at most
# GEMV_MAX_SPLIT slices, each at least one unrolled step of every invocation deep). On an H100
# (`python3 -m benchmarks.gpu.decode --layers 4`, one call) that made the Llama-3.2-1B-shaped
# decode step 4.8 % faster (0.630 against 0.662 ms); splitting the products of a few hundred
# workgroups too (gate/up, the head) made it slower than no split at all.
GEMV_SPLIT_WORKGROUPS = 2
GEMV_MAX_SPLIT = 16
GEMV_SPLIT_BELOW = 2


def _gemv_params(target, M, N, K, strides, b_mode, coords, batches, vec4, pair=0, norm=False):
    """templates/matmul_gemv.comp.j2's parameters, or None where it does not apply: GPU profiles,
    at most GEMV_ROWS rows, B contiguous along N in whole, aligned vec4s, the partial sums
    within the target's shared memory. pair: B holds two products' weights, the second `pair`
    columns after the first (paired_products); norm: the kernel normalizes A's rows (a float per
    row and invocation more). Returns (template, params, groups, extra, (split, depth)): split
    slices of K, each `depth` rows deep."""
    if (target.matmul == "texel" or M > GEMV_ROWS or not vec4 or b_mode != "strided" or coords != "matmul"
            or strides["SB_N"] != 1 or N % 4 or any(strides[s] % 4 for s in ("SB_K", "SB_B0", "SB_B1"))
            or GEMV_THREADS > target.max_invocations):
        return None
    wide = (GEMV_WIDE_LOADS and vec4 == "f16vec4" and N % 8 == 0 and pair % 8 == 0
            and not any(strides[s] % 8 for s in ("SB_K", "SB_B0", "SB_B1")))
    for cols in (8, 4) if wide else (4,):
        shared = 4 * GEMV_THREADS * M * (cols * (2 if pair else 1) + norm)   # a float per column, row and invocation
        if shared <= target.max_shared_memory:
            break
    else:
        return None
    choices = GEMV_WIDE_COLUMN_THREADS if cols == 8 else GEMV_COLUMN_THREADS
    ct = next((c for c in choices if -(-N // (cols * c)) * batches >= target.min_workgroups), choices[-1])
    kt = GEMV_THREADS // ct
    params = dict(CT=ct, KT=kt, MR=M, UNROLL=GEMV_UNROLL, b_mode=b_mode, PAIRED=bool(pair), COLS=cols, NORM=norm,
                  TREE_SUM=GEMV_TREE_SUM and kt & (kt - 1) == 0)   # the tree halves KT
    groups = (-(-N // (cols * ct)), 1, batches)
    have, want = groups[0] * batches, GEMV_SPLIT_WORKGROUPS * target.min_workgroups
    step = kt * GEMV_UNROLL   # a slice is whole unrolled steps deep
    split = min(-(-want // have), GEMV_MAX_SPLIT, K // step) if have * GEMV_SPLIT_BELOW < target.min_workgroups else 1
    depth = -(-K // (split * step)) * step if split > 1 else K
    return ("matmul_gemv", params, groups, dict(local_size=(GEMV_THREADS, 1, 1), shared_memory_bytes=shared),
            (-(-K // depth), depth))


def _register_params(target, M, N, batches, strides, b_mode, vec4):
    """templates/matmul_register.comp.j2 (matmuls of a few rows, and on texel profiles operands
    over the texel limit): up to cpu_rows rows and one vec4 of columns per invocation, 64
    invocations a workgroup."""
    # vec4 loads of B need a 4-vector storage type and four consecutive, aligned columns.
    vec = 4 if (vec4 and b_mode == "strided" and strides["SB_N"] == 1 and N % 4 == 0 and
                all(strides[s] % 4 == 0 for s in ("SB_K", "SB_B0", "SB_B1"))) else 1
    tm, tn, lx = min(target.cpu_rows, M), 1, 64
    cols = -(-N // vec)
    groups = (-(-cols // (lx * tn)), -(-M // tm), batches)
    params = dict(TM=tm, TN=tn, LX=lx, VEC=vec, b_mode=b_mode,
                  UNROLL_K=1 if target.matmul == "texel" else REGISTER_UNROLL_K)
    return "matmul_register", params, groups, dict(local_size=(lx, 1, 1))


def _gemm_rows(graph, node, rows: Rows):
    """Rows of Y are rows of A (and of a per-row bias)."""
    if node.attrs.get("transA", 0) or rows.axis != 0:
        return None
    c = node.input(2)
    per_row = c is not None and len(c.shape) == 2 and c.shape[0] == node.outputs[0].shape[0]
    return [rows, None, rows if per_row else None]


def _matmul_rows(graph, node, rows: Rows):
    """Rows of the product are rows of A, or a batch axis of both."""
    a, b = node.inputs
    y = node.outputs[0]
    if len(a.shape) < 2 or len(b.shape) < 2 or rows.axis == len(y.shape) - 1:
        return None
    if rows.axis == len(y.shape) - 2:   # A's rows
        return [Rows(len(a.shape) - 2, rows.start, rows.stop), None]
    return [aligned(a, y, rows), aligned(b, y, rows)]   # a batch axis


@register("Gemm", dtypes=FLOATS, magnitude=weighted_sum(shared_axis), row_wise=_gemm_rows, product="matmul",
          linear_in=lambda node: (0, 1) if node.input(2) is None else ())
def lower_gemm(node, target):
    a, b, c = node.inputs[0], node.inputs[1], node.input(2)
    out = node.outputs[0]
    trans_a, trans_b = node.attrs.get("transA", 0), node.attrs.get("transB", 0)
    if trans_b and b.is_constant:
        # PyTorch's Linear exports W as [N, K] with transB=1. Stored as [K, N] instead, the
        # kernels read B with vec4 loads along N that neighbouring invocations share.
        b = Value(b.name + "/transposed", b.dtype, tuple(b.shape[::-1]),
                  data=np.ascontiguousarray(b.data.T))
        trans_b = 0
    alpha, beta = float(node.attrs.get("alpha", 1.0)), float(node.attrs.get("beta", 1.0))
    # A's rows may come grouped in leading dims ([..., K]: move_row_transposes regroups them so an
    # attention writes them in place); Y's are grouped alike.
    M, N = prod(out.shape[:-1]), out.shape[-1]
    K = a.shape[0] if trans_a else a.shape[-1]
    strides = dict(SA_B0=0, SA_B1=0, SB_B0=0, SB_B1=0, SC_B0=0, SC_B1=0, SC_M=N, SC_N=1,
                   SA_M=1 if trans_a else K, SA_K=M if trans_a else 1,
                   SB_K=1 if trans_b else N, SB_N=K if trans_b else 1)
    tail = ("acc",) if alpha == 1.0 else ("mul", ("const", alpha), ("acc",))
    own = ()
    if c is not None and beta != 0.0:
        own = (c,)
        tail = ("add", tail, ("in", 0) if beta == 1.0 else ("mul", ("const", beta), ("in", 0)))
    return tiled_matmul(node, target, a=a, b=b, c=out, M=M, N=N, K=K, batch0=1, batch1=1,
                        strides=strides, coords="matmul", out_shape=out.shape, own_tail=tail,
                        own_operands=own)


def _permuted_strides(shape, perm) -> list[int]:
    """The element strides of every dim of `shape` in a tensor holding it permuted by perm."""
    return unpermuted(contiguous_strides([shape[p] for p in perm]), perm)


def _transposed_store(shape, perm) -> tuple[int, int] | None:
    """(row stride, column stride) of a product's result [..., M, N] stored permuted by perm,
    where every row of every batch is one stride apart (one GEMM of all the rows), else None."""
    strides = _permuted_strides(shape, perm)
    rows = [(d, st) for d, st in zip(shape[:-1], strides[:-1]) if d != 1]
    if any(outer != inner * d for (_, outer), (d, inner) in zip(rows, rows[1:])):
        return None
    return (rows[-1][1] if rows else 0), strides[-1]


def _permuted_batches(a_shape, shape, perm):
    """(batch dims, (A's, C's batch strides)) of a MatMul by a 2-D weight whose result [..., M, N]
    is stored permuted by perm, in at most two groups; None where they need more."""
    batch = tuple(shape[:-2])
    if not batch:
        return [1, 1], ([0, 0], [0, 0])
    m, k = a_shape[-2:]
    a_b = [s * m * k for s in broadcast_strides(a_shape[:-2], batch)]
    dims, (sa, sc) = collapse_dims(batch, [a_b, _permuted_strides(shape, perm)[:-2]])
    if len(dims) > 2:
        return None
    pad = 2 - len(dims)
    return [1] * pad + dims, ([0] * pad + sa, [0] * pad + sc)


def _stores_transposed(node, perm) -> bool:
    """A MatMul by one constant 2-D weight stores its result permuted: its rows at one stride and
    its columns at another, batch groups at theirs (lower_matmul)."""
    a, b = node.input(0), node.input(1)
    y = node.outputs[0]
    if b is None or not b.is_constant or len(b.shape) != 2 or a is None or len(a.shape) < 2 or \
            len(perm) != len(y.shape) or sorted(perm) != list(range(len(y.shape))) or \
            "paired" in node.attrs or "normalized" in node.attrs:
        return False
    return _permuted_batches(tuple(a.shape), tuple(y.shape), perm) is not None


def _weight_columns(node, part):
    """The MatMul by part 0 or 1 of a paired node's weight columns (lower/paired.py): by the
    paired weight itself, read from the part's columns (`weight_part`), or where those cannot
    be bound in place, by a copy of them."""
    b = node.inputs[1]
    if column_view(b, part) is not None:
        return [node.inputs[0], b], {"weight_part": part}
    return [node.inputs[0], columns(b, part, node.name)], {}


@register("MatMul", dtypes=FLOATS, magnitude=weighted_sum(shared_axis), row_wise=_matmul_rows, product="matmul",
          linear_in=lambda node: (0, 1), pairs=True, normalizes_rows=2, stores_transposed=_stores_transposed,
          limits="batch dims that broadcast in more than two separate groups")
def lower_matmul(node, target):
    a, b = node.input(0), node.input(1)
    out = node.outputs[0]
    a_shape = (1,) + tuple(a.shape) if len(a.shape) == 1 else tuple(a.shape)
    b_shape = tuple(b.shape) + (1,) if len(b.shape) == 1 else tuple(b.shape)
    M, K = a_shape[-2:]
    # paired (passes/paired_products.py): B [K, 2N] holds two products' weights side by side
    paired = node.attrs.get("paired")
    # normalized (passes/normalized_products.py): A is an RMS normalization's input, its scale input 2
    normalized = node.attrs.get("normalized")
    norm = (node.input(2), normalized["epsilon"]) if normalized else None
    # weight_part (_weight_columns): the product by B's first or second half of columns alone
    part = node.attrs.get("weight_part")
    N = paired or (b_shape[-1] // 2 if part is not None else b_shape[-1])
    if part is not None:
        b = column_view(b, part)
    batch = _batch_dims(a_shape, b_shape)
    # Walk the broadcast batch dims of A, B and C as (b0, b1): at most two groups of dims.
    a_b = broadcast_strides(a_shape[:-2], batch)
    b_b = broadcast_strides(b_shape[:-2], batch)
    c_b = broadcast_strides(batch, batch)
    a_b = [s * M * K for s in a_b]
    b_b = [s * K * N for s in b_b]
    c_b = [s * M * N for s in c_b]
    dims, (sa, sb, sc) = collapse_dims(batch, [a_b, b_b, c_b]) if batch else ([1], [[0], [0], [0]])
    if len(dims) > 2:
        raise CompileError(f"MatMul '{node.name}': its batch dims {list(batch)} broadcast in "
                           f"{len(dims)} separate groups; vkc handles two.")
    if len(dims) == 1:
        dims, sa, sb, sc = [1] + dims, [0] + sa, [0] + sb, [0] + sc
    # The epilogue sees the output as [..batch, M, N] even when an operand was 1-D.
    ep_shape = tuple(batch) + (M, N)
    if prod(ep_shape) != out.size:
        raise CompileError(f"MatMul '{node.name}': output shape {out.shape} does not match "
                           f"{a.shape} x {b.shape}.")
    # output_perm (passes/fuse_epilogues.py, transposes_in_place.py): C holds the result permuted
    perm = node.attrs.get("output_perm")
    rows = _batches_are_rows(node, dims, sa, sb, sc, M, K, N, ep_shape)
    sc_m, sc_n = N, 1
    if perm is not None:
        store = _transposed_store(ep_shape, perm) if rows else None
        if store is None:   # batch by batch, each dim of C at its permuted stride
            found = _permuted_batches(a_shape, ep_shape, perm)
            if found is None:
                raise CompileError(f"MatMul '{node.name}': its result stored permuted by {list(perm)} needs more "
                                   "than two batch groups (a vkc bug: fuse_epilogues asks stores_transposed).")
            rows, (dims, (sa, sc)), sb = False, found, [0, 0]
            store = tuple(_permuted_strides(ep_shape, perm)[-2:])
        sc_m, sc_n = store
    if rows:
        # One weight for every batch, A and C contiguous: the batches are more rows (a seq-first
        # [L, B, E] x [E, F] projection is one GEMM of L*B rows, not L GEMMs of B rows that each
        # read the whole weight). Stored permuted (output_perm), a row and a column are each one
        # stride apart.
        strides = dict(SA_B0=0, SA_B1=0, SB_B0=0, SB_B1=0, SC_B0=0, SC_B1=0,
                       SA_M=K, SA_K=1, SB_K=b_shape[-1], SB_N=1, SC_M=sc_m, SC_N=sc_n)
        kernels = tiled_matmul(node, target, a=a, b=b, c=out, M=prod(dims) * M, N=N, K=K, batch0=1,
                               batch1=1, strides=strides, coords="matmul", out_shape=ep_shape,
                               rows_per_batch=M, paired=paired, norm=norm)
    else:
        strides = dict(SA_B0=sa[0], SA_B1=sa[1], SB_B0=sb[0], SB_B1=sb[1], SC_B0=sc[0], SC_B1=sc[1],
                       SA_M=K, SA_K=1, SB_K=b_shape[-1], SB_N=1, SC_M=sc_m, SC_N=sc_n)
        kernels = tiled_matmul(node, target, a=a, b=b, c=out, M=M, N=N, K=K, batch0=dims[0],
                               batch1=dims[1], strides=strides, coords="matmul", out_shape=ep_shape,
                               paired=paired, norm=norm)
    if kernels is None and normalized:   # the kernel that fits cannot normalize: the norm first
        return normalized_first(node, target, lower_matmul)
    if kernels is None:  # the kernel that fits cannot pair
        return [k for half in unpaired(node, _weight_columns) for k in lower_matmul(half, target)]
    return kernels


def _batches_are_rows(node, dims, sa, sb, sc, M, K, N, ep_shape) -> bool:
    """Whether a batched MatMul is one GEMM of prod(dims) * M rows: B is the same for every batch,
    A and C are walked batch after batch without gaps, and every fused epilogue operand indexes
    batch b, row m as row b * M + m would (its batch stride is M times its row stride)."""
    def walked_in_order(strides, size):  # batch (b0, b1) starts at (b0 * dims[1] + b1) * size
        return all(d == 1 or s == step for d, s, step in zip(dims, strides, (dims[1] * size, size)))
    if prod(dims) == 1 or any(sb) or not walked_in_order(sa, M * K) or not walked_in_order(sc, M * N):
        return False
    fused = node.inputs[node.attrs.get("n_op_inputs", len(node.inputs)):]
    for k, v in enumerate(fused):
        strides = epilogue_strides("matmul", ep_shape, v.shape, operand_perm(node, k))
        if strides is None or (M > 1 and strides[0] != M * strides[1]):
            return False
    return True


def _batch_dims(a_shape, b_shape) -> tuple[int, ...]:
    ra, rb = a_shape[:-2], b_shape[:-2]
    n = max(len(ra), len(rb))
    ra, rb = (1,) * (n - len(ra)) + tuple(ra), (1,) * (n - len(rb)) + tuple(rb)
    return tuple(max(x, y) for x, y in zip(ra, rb))
