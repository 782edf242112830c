"""Conv: depthwise template for one input channel per group, plain GEMM for 1x1 stride-1
layers, implicit GEMM (im2col on the fly, never materialized) for everything else."""
from __future__ import annotations

from ..errors import CompileError
from .epilogue import build_epilogue, channel_view
from .matmul import tiled_matmul
from .registry import Kernel, grid_1d, register, require_float32


def conv_geometry(node, in_spatial, out_spatial, kernel):
    """Begin pads (top, left) from explicit pads or auto_pad, checked against the output size."""
    nd = len(kernel)
    strides = list(node.attrs.get("strides", [1] * nd))
    dilations = list(node.attrs.get("dilations", [1] * nd))
    auto_pad = node.attrs.get("auto_pad", b"NOTSET")
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
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


@register("Conv")
def lower_conv(node, target):
    x, w, bias = node.inputs[0], node.inputs[1], node.input(2)
    out = node.outputs[0]
    require_float32(node, [x, w, bias, out])
    if len(x.shape) not in (3, 4):
        raise CompileError(f"Conv '{node.name}' is {len(x.shape) - 2}-D; vkc runs 1-D and 2-D "
                           "convolutions.")
    n, cin, ih, iw = _as_2d(x.shape)
    cout, cin_g, kh, kw = _as_2d(w.shape)
    _, _, oh, ow = _as_2d(out.shape)
    group = node.attrs.get("group", 1)
    strides, dils, begins, _ = conv_geometry(node, x.shape[2:], out.shape[2:], w.shape[2:])
    if len(x.shape) == 3:
        strides, dils, begins = [1] + strides, [1] + dils, [0] + begins
    own = (channel_view(bias, len(out.shape)),) if bias is not None else ()
    tail = ("add", ("acc",), ("in", 0)) if bias is not None else ("acc",)
    geometry = [("IH", "int32", ih), ("IW", "int32", iw), ("KH", "int32", kh), ("KW", "int32", kw),
                ("STRIDE_H", "int32", strides[0]), ("STRIDE_W", "int32", strides[1]),
                ("PAD_H", "int32", begins[0]), ("PAD_W", "int32", begins[1]),
                ("DIL_H", "int32", dils[0]), ("DIL_W", "int32", dils[1])]

    if cin_g == 1 and group == cin and group > 1:
        return [_depthwise(node, target, x, w, out, n, cout, oh, ow, cout // cin, geometry,
                           tail, own)]
    cout_g = cout // group
    K = cin_g * kh * kw
    strides_mm = dict(SA_B0=0, SA_B1=cout_g * K, SA_M=K, SA_K=1,
                      SB_B0=cin * ih * iw, SB_B1=cin_g * ih * iw,
                      SC_B0=cout * oh * ow, SC_B1=cout_g * oh * ow, SC_M=oh * ow, SC_N=1)
    pointwise = kh == kw == 1 and strides == [1, 1] and begins == [0, 0] and (oh, ow) == (ih, iw)
    common = dict(a=w, b=x, c=out, M=cout_g, N=oh * ow, K=K, batch0=n, batch1=group,
                  coords="conv", out_shape=out.shape, own_tail=tail, own_operands=own)
    if pointwise:
        return tiled_matmul(node, target, strides=dict(strides_mm, SB_K=ih * iw, SB_N=1), **common)
    conv_spec = [g for g in geometry] + [("OW", "int32", ow)]
    return tiled_matmul(node, target, strides=strides_mm, b_mode="im2col", conv_spec=conv_spec,
                        **common)


def _depthwise(node, target, x, w, out, n, cout, oh, ow, mult, geometry, tail, own):
    expr, operands, ep_spec, ep_ops = build_epilogue(node, "conv", out.shape, tail, own)
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
    return Kernel("conv2d_depthwise", dict(LOCAL=local, TW=tw, SEG=seg, n_epilogue=len(operands),
                                           epilogue_expr=expr, **row),
                  spec, [x, w, out, *operands], writes=[2], groups=grid_1d(invocations, local),
                  local_size=(local, 1, 1), nodes=node.sources,
                  flops=total * (2 * sizes["KH"] * sizes["KW"] + ep_ops))
