"""Conv: the depthwise template for one input channel per group, a plain GEMM for 1x1 stride-1
layers, and for the other 1-D and 2-D layers a GEMM over im2col: written out where the profile
allows the scratch (im2col_max_bytes), else gathered on the fly (implicit GEMM). GPU profiles
write it with the batch's images side by side along its rows; texel profiles (lavapipe) one image
a plane. Profiles that set `winograd` (lavapipe F(4x4, 3x3), nvidia F(2x2, 3x3)) run float32 3x3
stride-1 layers as Winograd F(m x m, 3x3). 3-D layers (video models) run on a direct kernel."""
from __future__ import annotations

import numpy as np

from ..dtypes import kernel_types, texel_format
from ..errors import CompileError
from ..magnitudes import conv_taps, weighted_sum
from ..ir import Value
from .store_expression import build_epilogue, channel_view
from .matmul import tiled_matmul
from ..registry import FLOATS
from ..shapes import unpermuted
from .kernel import Kernel, grid_1d, register, texel_reads
from ..targets import GUARANTEED_BINDING_BYTES


def conv_geometry(node, in_spatial, out_spatial, kernel):
    """Begin pads (top, left) from explicit pads or auto_pad, checked against the output size."""
    nd = len(kernel)
    strides = list(node.attrs.get("strides", [1] * nd))
    dilations = list(node.attrs.get("dilations", [1] * nd))
    auto_pad = node.text("auto_pad", "NOTSET")
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        begins = []
        for i, o, k, s, d in zip(in_spatial, out_spatial, kernel, strides, dilations):
            total = max((o - 1) * s + (k - 1) * d + 1 - i, 0)
            begins.append(total // 2 if auto_pad == "SAME_UPPER" else total - total // 2)
    elif auto_pad == "VALID":
        begins = [0] * nd
    else:
        begins = list(node.attrs.get("pads", [0] * 2 * nd))[:nd]
    ends = []
    for i, o, k, s, d, b in zip(in_spatial, out_spatial, kernel, strides, dilations, begins):
        ends.append((o - 1) * s + (k - 1) * d + 1 - i - b)
    return strides, dilations, begins, ends


def _as_2d(shape):
    """N, C, L -> N, C, 1, L so 1-D convolutions run on the 2-D kernels."""
    return tuple(shape[:2]) + (1,) + tuple(shape[2:]) if len(shape) == 3 else tuple(shape)


def _depthwise_2d(node) -> bool:
    x, w = node.inputs[0], node.inputs[1]
    return len(x.shape) == 4 and w.shape[1] == 1 and node.attrs.get("group", 1) == x.shape[1] > 1


def _stores_transposed(node, perm) -> bool:
    """The depthwise kernel stores channels-last (NCHW permuted by (0, 2, 3, 1)) as readily."""
    return list(perm) == [0, 2, 3, 1] and _depthwise_2d(node)


@register("Conv", dtypes=FLOATS, limits="convolution over 4 or more spatial dims",
          magnitude=weighted_sum(conv_taps), product="conv",
          linear_in=lambda node: (0, 1) if node.input(2) is None else (), stores_transposed=_stores_transposed)
def lower_conv(node, target):
    x, w, bias = node.inputs[0], node.inputs[1], node.input(2)
    out = node.outputs[0]
    # output_perm (passes/transposes_in_place.py): `out` is the result permuted, channels-last
    perm = node.attrs.get("output_perm")
    shape = tuple(out.shape) if perm is None else tuple(unpermuted(out.shape, perm))
    if perm is not None and not _stores_transposed(node, perm):
        raise CompileError(f"Conv '{node.name}': only a depthwise convolution stores its result permuted "
                           f"(by {list(perm)}: a vkc bug).")
    if len(x.shape) == 5:
        return [_conv3d(node, target, x, w, bias, out)]
    if len(x.shape) not in (3, 4):
        raise CompileError(f"Conv '{node.name}' is {len(x.shape) - 2}-D; vkc runs 1-D, 2-D and "
                           "3-D convolutions.")
    n, cin, ih, iw = _as_2d(x.shape)
    cout, cin_g, kh, kw = _as_2d(w.shape)
    _, _, oh, ow = _as_2d(shape)
    group = node.attrs.get("group", 1)
    strides, dils, begins, _ = conv_geometry(node, x.shape[2:], shape[2:], w.shape[2:])
    if len(x.shape) == 3:
        strides, dils, begins = [1] + strides, [1] + dils, [0] + begins
    own = (channel_view(bias, len(shape)),) if bias is not None else ()
    tail = ("add", ("acc",), ("in", 0)) if bias is not None else ("acc",)
    geometry = [("IH", "int32", ih), ("IW", "int32", iw), ("KH", "int32", kh), ("KW", "int32", kw),
                ("STRIDE_H", "int32", strides[0]), ("STRIDE_W", "int32", strides[1]),
                ("PAD_H", "int32", begins[0]), ("PAD_W", "int32", begins[1]),
                ("DIL_H", "int32", dils[0]), ("DIL_W", "int32", dils[1])]

    if cin_g == 1 and group == cin and group > 1:
        return [_depthwise(node, target, x, w, out, shape, n, cout, oh, ow, cout // cin, geometry,
                           tail, own)]
    if _winograd_fits(target, node, x, w, out, group, (kh, kw), strides, dils):
        return _winograd(node, target, x, w, out, n, cin, cout, (ih, iw), (oh, ow), begins, tail, own)
    cout_g = cout // group
    K = cin_g * kh * kw
    strides_mm = dict(SA_B0=0, SA_B1=cout_g * K, SA_M=K, SA_K=1,
                      SB_B0=cin * ih * iw, SB_B1=cin_g * ih * iw,
                      SC_B0=cout * oh * ow, SC_B1=cout_g * oh * ow, SC_M=oh * ow, SC_N=1)
    pointwise = kh == kw == 1 and strides == [1, 1] and begins == [0, 0] and (oh, ow) == (ih, iw)
    common = dict(a=w, c=out, M=cout_g, N=oh * ow, K=K, batch0=n, batch1=group,
                  coords="conv", out_shape=out.shape, own_tail=tail, own_operands=own)
    if _images_as_columns(target, pointwise, n, group, K, oh * ow, x.dtype):
        return _im2col_columns(node, target, x, geometry, n, group, K, (oh, ow), common)
    # On texel profiles a pointwise layer whose pixel count is not a multiple of 4 (7x7) still
    # gets rgba32f fetches: its input is copied into padded rows (im2col of a 1x1 kernel).
    if pointwise and not (target.matmul == "texel" and (oh * ow) % 4):
        return tiled_matmul(node, target, b=x, strides=dict(strides_mm, SB_K=ih * iw, SB_N=1), **common)
    np_ = -(-oh * ow // 4) * 4
    col_bytes = n * group * K * np_ * np.dtype(x.dtype).itemsize
    # im2col reads X one element a texel; the GEMM reads its output four.
    if (target.matmul == "texel" and texel_format(x.dtype, 4)
            and col_bytes <= target.im2col_max_bytes):
        return _explicit_im2col(node, target, x, out, geometry, n, group, K, (oh, ow), np_,
                                dict(common, strides=dict(strides_mm, SB_B0=group * K * np_,
                                                          SB_B1=K * np_, SB_K=np_, SB_N=1)))
    conv_spec = [g for g in geometry] + [("OW", "int32", ow)]
    return tiled_matmul(node, target, b=x, strides=strides_mm, b_mode="im2col", conv_spec=conv_spec,
                        **common)


def _im2col_kernel(node, target, x, col, geometry, planes, group, col_images, out_hw, texel, taps):
    """templates/im2col.comp.j2 writing `col` ([planes][K][NP]) from x: `taps` rows of kernel taps,
    zero rows after them up to K."""
    (oh, ow), local = out_hw, target.elementwise_local
    _, K, np_ = col.shape
    rows = planes * K
    types = kernel_types(x)
    vec = 8 if types["T"].native and not texel else 4   # columns an invocation writes: 16 bytes
    return Kernel("im2col", dict(LOCAL=local, texel=texel, VEC=vec, **types),
                  [("ROWS", "int32", rows), ("K", "int32", K), ("TAPS", "int32", taps), ("NP", "int32", np_),
                   ("GROUPS", "int32", group), ("COL_IMAGES", "int32", col_images),
                   ("OH", "int32", oh), ("OW", "int32", ow), *geometry],
                  [x, col], writes=[1], groups=grid_1d(rows * np_ // vec, local),
                  local_size=(local, 1, 1), nodes=node.sources,
                  texel_buffers={0: texel_format(x.dtype)} if texel else {})


def _explicit_im2col(node, target, x, out, geometry, n, group, K, out_hw, np_, gemm_args):
    """On texel profiles: im2col written out once (rows padded to whole rgba32f texels), then the
    plain GEMM, which fetches B four pixels a texel instead of one (implicit GEMM's fetches)."""
    col = Value(f"{out.name}/im2col", x.dtype, (n * group, K, np_))
    first = _im2col_kernel(node, target, x, col, geometry, n * group, group, 1, out_hw, texel=True,
                           taps=K)
    return [first, *tiled_matmul(node, target, b=col, **gemm_args)]


# im2col rows on GPU profiles are padded to whole 16-byte vectors of float16 (the widest load).
COL_ALIGN = 8


def _images_as_columns(target, pointwise, n, group, K, pixels, dtype) -> bool:
    """Whether a GPU profile writes this layer's im2col out, the images side by side along its
    rows: then the GEMM loads B 16 bytes at a time instead of gathering it one element at a
    time, and its tiles run across images instead of padding each small image to whole tiles (a
    7x7 image fills 49 of a 128-wide tile). A pointwise layer needs no im2col; it gets the copy
    for the second reason only: several images whose pixel count is not a multiple of 64."""
    if target.matmul == "texel" or (pointwise and (n == 1 or pixels % 64 == 0)):
        return False
    np_ = -(-n * pixels // COL_ALIGN) * COL_ALIGN
    return group * K * np_ * np.dtype(dtype).itemsize <= target.im2col_max_bytes


def _im2col_columns(node, target, x, geometry, n, group, taps, out_hw, common):
    """im2col with the images side by side (COL[group][k][image * OH*OW + pixel], rows padded to
    COL_ALIGN), then one GEMM a group over all images' pixels. Constant weights with a tap count
    that is not a multiple of COL_ALIGN (a 7x7 stem over 3 channels: 147) are padded with zero
    columns, and im2col with zero rows, so that the GEMM loads both operands 16 bytes at a time."""
    pixels = out_hw[0] * out_hw[1]
    np_ = -(-n * pixels // COL_ALIGN) * COL_ALIGN
    cout_g, w = common["M"], common["a"]
    K = taps
    if w.is_constant and taps % COL_ALIGN:
        K = -(-taps // COL_ALIGN) * COL_ALIGN
        padded = np.zeros((group * cout_g, K), w.data.dtype)
        padded[:, :taps] = w.data.reshape(group * cout_g, taps)
        common = dict(common, a=Value(f"{w.name}/taps_padded", w.data.dtype, padded.shape, data=padded), K=K)
    col = Value(f"{common['c'].name}/im2col", x.dtype, (group, K, np_))
    first = _im2col_kernel(node, target, x, col, geometry, group, group, n, out_hw, texel=False,
                           taps=taps)
    strides = dict(SA_B0=0, SA_B1=cout_g * K, SA_M=K, SA_K=1, SB_B0=0, SB_B1=K * np_, SB_K=np_, SB_N=1,
                   SC_B0=0, SC_B1=cout_g * pixels, SC_M=pixels, SC_N=1,
                   SC_IMG=group * cout_g * pixels, PIX=pixels)
    gemm = dict(common, N=n * pixels, batch0=1, coords="conv_cols")
    return [first, *tiled_matmul(node, target, b=col, strides=strides, b_row_elements=np_, **gemm)]


def _depthwise(node, target, x, w, out, shape, n, cout, oh, ow, mult, geometry, tail, own):
    """`out` holds the result of `shape`, or where the node has an output_perm, that result
    channels-last."""
    expr, operands, ep_spec, ep_ops, helpers = build_epilogue(node, "conv", shape, tail, own)
    total = n * cout * oh * ow
    sizes = dict((name, value) for name, _, value in geometry)
    # The W-direction window is structure: each invocation keeps the input segment its TW
    # outputs share in registers, indexed by constants.
    row = {k: sizes[k] for k in ("KW", "STRIDE_W", "DIL_W")}
    tw = min(4, ow)
    seg = (tw - 1) * row["STRIDE_W"] + (row["KW"] - 1) * row["DIL_W"] + 1
    spec = [("TOTAL", "int32", total), ("C_OUT", "int32", cout), ("MULT", "int32", mult),
            ("OH", "int32", oh), ("OW", "int32", ow),
            *[g for g in geometry if g[0] not in row], *ep_spec]
    local = target.elementwise_local
    invocations = total // ow * -(-ow // tw)
    bindings = [x, w, out, *operands]
    read = (0, 1, *range(3, len(bindings)))
    texel = (all(texel_format(bindings[b].dtype) for b in read)
             and texel_reads(target, x, w, *operands))
    return Kernel("conv2d_depthwise", dict(LOCAL=local, TW=tw, SEG=seg, TEXEL=texel, EP_TEXEL=texel,
                                           channels_last="output_perm" in node.attrs,
                                           n_epilogue=len(operands), epilogue_expr=expr,
                                           epilogue_helpers=helpers, **row,
                                           **kernel_types(out)),
                  spec, bindings, writes=[2], groups=grid_1d(invocations, local),
                  local_size=(local, 1, 1), nodes=node.sources,
                  flops=total * (2 * sizes["KH"] * sizes["KW"] + ep_ops),
                  texel_buffers={b: texel_format(bindings[b].dtype) for b in read} if texel else {})


def _conv3d(node, target, x, w, bias, out):
    """3-D convolution, direct: each invocation computes COT output channels of one output voxel,
    reading each input value once for all of them (video models' few 3-D layers; their 2-D
    layers keep the GEMM paths)."""
    n, cin, *in_dhw = x.shape
    cout, cin_g, *k_dhw = w.shape
    out_dhw = out.shape[2:]
    group = node.attrs.get("group", 1)
    strides, dils, begins, _ = conv_geometry(node, in_dhw, out_dhw, k_dhw)
    cout_g = cout // group
    cot = next(c for c in (4, 2, 1) if cout_g % c == 0)
    own = (channel_view(bias, len(out.shape)),) if bias is not None else ()
    tail = ("add", ("acc",), ("in", 0)) if bias is not None else ("acc",)
    expr, operands, ep_spec, ep_ops, helpers = build_epilogue(node, "conv", out.shape, tail, own)
    voxels = int(np.prod(out_dhw))
    total = n * (cout // cot) * voxels
    spec = [("TOTAL", "int32", total), ("C_IN", "int32", cin), ("C_IN_G", "int32", cin_g),
            ("C_OUT", "int32", cout), ("C_OUT_G", "int32", cout_g)]
    for axis, name in enumerate("DHW"):
        spec += [(f"I{name}", "int32", in_dhw[axis]), (f"O{name}", "int32", out_dhw[axis]),
                 (f"K{name}", "int32", k_dhw[axis]), (f"STRIDE_{name}", "int32", strides[axis]),
                 (f"PAD_{name}", "int32", begins[axis]), (f"DIL_{name}", "int32", dils[axis])]
    bindings = [x, w, out, *operands]
    read = (0, 1, *range(3, len(bindings)))
    texel = (all(texel_format(bindings[b].dtype) for b in read)
             and texel_reads(target, x, w, *operands))
    local = target.elementwise_local
    return Kernel("conv3d", dict(LOCAL=local, COT=cot, TEXEL=texel, EP_TEXEL=texel,
                                 n_epilogue=len(operands), epilogue_expr=expr,
                                 epilogue_helpers=helpers, **kernel_types(out)),
                  spec + ep_spec, bindings, writes=[2], groups=grid_1d(total, local),
                  local_size=(local, 1, 1), nodes=node.sources,
                  flops=n * cout * voxels * (2 * cin_g * int(np.prod(k_dhw)) + ep_ops),
                  texel_buffers={b: texel_format(bindings[b].dtype) for b in read} if texel else {})


# Winograd F(m x m, 3x3) (Lavin & Gray, 2015): Y = A^T [ (G g G^T) * (B^T d B) ] A per (m+2)^2
# input tile and m x m output block. F(2, 3): 16 multiplies per 4 outputs, F(4, 3): 36 per 16,
# where direct convolution takes 9 per output. Matrices from the interpolation points 0, 1, -1
# (and 2, -2) plus infinity.
WINOGRAD = {
    2: dict(BT=[[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]],
            G=[[1, 0, 0], [1 / 2, 1 / 2, 1 / 2], [1 / 2, -1 / 2, 1 / 2], [0, 0, 1]],
            AT=[[1, 1, 1, 0], [0, 1, -1, -1]]),
    4: dict(BT=[[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0],
                [0, -2, -1, 2, 1, 0], [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]],
            G=[[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6],
               [1 / 24, 1 / 12, 1 / 6], [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]],
            AT=[[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]]),
}


def _winograd_fits(target, node, x, w, out, group, kernel, strides, dils) -> bool:
    """3x3, stride 1, undilated, ungrouped 2-D layers with constant weights and enough channels
    for the batched GEMMs to pay for the two transforms, on profiles that enable it, whose
    transformed tensors stay within the scratch budget (im2col_max_bytes) and whose transformed
    weights ((m + 2)^2 / 9 times the kernel's: 36 x 1024 x 1024 float32 in Wide ResNet-50's last
    stage) stay within one binding."""
    # The transforms read their inputs through texel buffers (the GEMM between them takes the
    # profile's matmul kernel).
    if not (target.winograd in WINOGRAD and len(x.shape) == 4
            and texel_format(x.dtype, 1) and texel_format(x.dtype, 4)
            and w.is_constant and group == 1 and tuple(kernel) == (3, 3)
            and list(strides) == [1, 1] and list(dils) == [1, 1]):
        return False
    (n, cout, oh, ow), cin, mo = out.shape, w.shape[1], target.winograd
    tiles = -(-(-(-oh // mo) * -(-ow // mo)) // 4) * 4
    scratch = np.dtype(out.dtype).itemsize * n * (mo + 2) ** 2 * tiles * max(cin, cout)
    fetched = max(x.size, n * (mo + 2) ** 2 * tiles * cout)   # X and the GEMMs' output, as texels
    weights = np.dtype(w.dtype).itemsize * (mo + 2) ** 2 * cin * cout
    return (min(cin, cout) >= target.winograd_min_channels and scratch <= target.im2col_max_bytes
            and fetched <= target.max_texel_elements and weights <= GUARANTEED_BINDING_BYTES)


def winograd_weights(w: np.ndarray, m: int) -> np.ndarray:
    """U[xi][co][ci] = (G g G^T)[xi // alpha][xi % alpha] for each 3x3 filter g = w[co][ci]
    (alpha = m + 2), in float64 before the one rounding to w's dtype."""
    g = np.array(WINOGRAD[m]["G"])
    u = np.einsum("ai,ocij,bj->aboc", g, w.astype(np.float64), g)
    return np.ascontiguousarray(u.reshape((m + 2) ** 2, w.shape[0], w.shape[1]).astype(w.dtype))


def _winograd(node, target, x, w, out, n, cin, cout, in_hw, out_hw, begins, tail, own):
    (ih, iw), (oh, ow) = in_hw, out_hw
    mo = target.winograd
    alpha = mo + 2
    xis = alpha * alpha   # GEMMs, one per point of the transformed tile
    th, tw = -(-oh // mo), -(-ow // mo)
    tiles = th * tw
    tp = -(-tiles // 4) * 4   # GEMM columns: whole rgba32f texels
    dt = np.dtype(out.dtype)   # U, V and M: the transformed tensors
    # The GEMMs put their longer side on the SIMD lanes: U[xi] (cout x cin) x V[xi] (cin x
    # tiles) when there are more tiles than output channels, else V[xi]^T x U[xi]^T.
    transposed = tp < cout
    u = winograd_weights(w.data, mo)
    if transposed:
        u = np.ascontiguousarray(u.transpose(0, 2, 1))
    u = Value(f"{w.name}/winograd_u", dt, u.shape, data=u)
    v = Value(f"{out.name}/winograd_v", dt, (n, xis, cin, tp))
    m = Value(f"{out.name}/winograd_m", dt,
              (n, xis, tp, cout) if transposed else (n, xis, cout, tp))
    local = target.elementwise_local
    tile_spec = [("T", "int32", tiles), ("TP", "int32", tp), ("TW", "int32", tw)]
    matrices = dict(M_OUT=mo, ALPHA=alpha, BT=WINOGRAD[mo]["BT"], AT=WINOGRAD[mo]["AT"])
    first = Kernel("winograd_input", dict(LOCAL=local, **matrices, **kernel_types(v)),
                   [("BATCH", "int32", n), ("C", "int32", cin), ("IH", "int32", ih), ("IW", "int32", iw),
                    ("PAD_H", "int32", begins[0]), ("PAD_W", "int32", begins[1]), *tile_spec],
                   [x, v], writes=[1], groups=grid_1d(n * cin * tp, local), local_size=(local, 1, 1),
                   nodes=node.sources, flops=n * cin * tp * 4 * alpha ** 3,
                   texel_buffers={0: texel_format(x.dtype)})
    c_strides = dict(SC_B0=xis * cout * tp, SC_B1=cout * tp, SC_M=cout if transposed else tp, SC_N=1)
    if transposed:
        gemm = tiled_matmul(node, target, a=v, b=u, c=m, M=tp, N=cout, K=cin, batch0=n, batch1=xis,
                            strides=dict(SA_B0=xis * cin * tp, SA_B1=cin * tp, SA_M=1, SA_K=tp,
                                         SB_B0=0, SB_B1=cin * cout, SB_K=cout, SB_N=1, **c_strides),
                            coords="matmul", out_shape=m.shape, fused=False)
    else:
        gemm = tiled_matmul(node, target, a=u, b=v, c=m, M=cout, N=tp, K=cin, batch0=n, batch1=xis,
                            strides=dict(SA_B0=0, SA_B1=cout * cin, SA_M=cin, SA_K=1,
                                         SB_B0=xis * cin * tp, SB_B1=cin * tp, SB_K=tp, SB_N=1,
                                         **c_strides),
                            coords="matmul", out_shape=m.shape, fused=False)
    expr, operands, ep_spec, ep_ops, helpers = build_epilogue(node, "conv", out.shape, tail, own)
    ep_texel = all(texel_format(e.dtype) for e in operands) and texel_reads(target, *operands)
    last = Kernel("winograd_output", dict(LOCAL=local, TRANSPOSED=transposed, n_epilogue=len(operands),
                                          epilogue_expr=expr, epilogue_helpers=helpers,
                                          EP_TEXEL=ep_texel, **matrices,
                                          **kernel_types(out)),
                  [("BATCH", "int32", n), ("C_OUT", "int32", cout), ("OH", "int32", oh),
                   ("OW", "int32", ow), *tile_spec, *ep_spec],
                  [m, out, *operands], writes=[1], groups=grid_1d(n * cout * tiles, local),
                  local_size=(local, 1, 1), nodes=node.sources, store_offset=1,
                  flops=n * cout * tiles * (4 * alpha * alpha * mo + mo * mo * ep_ops),
                  texel_buffers={0: texel_format(m.dtype),
                                 **({2 + j: texel_format(e.dtype) for j, e in enumerate(operands)}
                                    if ep_texel else {})})
    return [first, *gemm, last]
