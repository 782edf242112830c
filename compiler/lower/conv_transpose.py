"""ConvTranspose (1-D, 2-D, 3-D; groups, dilations, output_padding, output_shape, auto_pad)
on templates/conv_transpose.comp.j2."""
from __future__ import annotations

from ..dtypes import kernel_types
from ..errors import CompileError
from ..magnitudes import transposed_conv_taps, weighted_sum
from ..registry import FLOATS
from .kernel import Kernel, grid_1d, register


def transpose_pads(node, in_spatial, out_spatial, kernel, strides, dilations) -> list[int]:
    """Begin pads. With output_shape or auto_pad SAME_*, ONNX derives them from the total
    padding the output size implies; otherwise they are the explicit pads."""
    nd = len(kernel)
    auto_pad = node.text("auto_pad", "NOTSET")
    if "output_shape" not in node.attrs and auto_pad not in ("SAME_UPPER", "SAME_LOWER"):
        return list(node.attrs.get("pads", [0] * 2 * nd))[:nd]
    out_pad = list(node.attrs.get("output_padding", [0] * nd))
    begins = []
    for i, o, k, s, d, op in zip(in_spatial, out_spatial, kernel, strides, dilations, out_pad):
        total = s * (i - 1) + op + (k - 1) * d + 1 - o
        begins.append(total // 2 if auto_pad == "SAME_UPPER" else total - total // 2)
    return begins


def _pad3(values, fill):
    return [fill] * (3 - len(values)) + list(values)


@register("ConvTranspose", dtypes=FLOATS, limits="4-D and higher spatial ranks",
          magnitude=weighted_sum(transposed_conv_taps),
          # never folded: onnx 1.23's reference computes some grouped, strided ones wrongly (2
          # groups, strides [2, 1], a [1, 5] kernel: 0.79 off); the kernel computes them right
          unfolded=lambda graph, node: True)
def lower_conv_transpose(node, target):
    x, w, bias = node.inputs[0], node.inputs[1], node.input(2)
    out = node.outputs[0]
    nd = len(x.shape) - 2
    if not 1 <= nd <= 3:
        raise CompileError(f"ConvTranspose '{node.name}' is {nd}-D; vkc runs 1-D to 3-D.")
    group = node.attrs.get("group", 1)
    kernel = list(w.shape[2:])
    strides = list(node.attrs.get("strides", [1] * nd))
    dilations = list(node.attrs.get("dilations", [1] * nd))
    begins = transpose_pads(node, x.shape[2:], out.shape[2:], kernel, strides, dilations)
    n, c_in = x.shape[:2]
    c_out = out.shape[1]
    if w.shape[0] != c_in or w.shape[1] * group != c_out:
        raise CompileError(f"ConvTranspose '{node.name}': weight {list(w.shape)} does not fit "
                           f"{c_in} input and {c_out} output channels in {group} groups.")
    spec = [("TOTAL", "int32", out.size), ("C_IN", "int32", c_in), ("C_OUT", "int32", c_out),
            ("GROUPS", "int32", group)]
    for tag, i, o, k, s, d, p in zip("DHW", _pad3(x.shape[2:], 1), _pad3(out.shape[2:], 1),
                                     _pad3(kernel, 1), _pad3(strides, 1), _pad3(dilations, 1),
                                     _pad3(begins, 0)):
        spec += [(f"I{tag}", "int32", i), (f"O{tag}", "int32", o), (f"K{tag}", "int32", k),
                 (f"STRIDE_{tag}", "int32", s), (f"DIL_{tag}", "int32", d),
                 (f"PAD_{tag}", "int32", p)]
    local = target.elementwise_local
    bindings = [x, w, out] + ([bias] if bias is not None else [])
    taps = 1
    for k in kernel:
        taps *= k
    params = dict(LOCAL=local, bias=bias is not None, **kernel_types(out))
    return [Kernel("conv_transpose", params, spec, bindings,
                   writes=[2], groups=grid_1d(out.size, local), local_size=(local, 1, 1),
                   nodes=node.sources, flops=2 * x.size * (c_out // group) * taps)]
