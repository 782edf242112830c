"""MaxPool, AveragePool and GlobalAveragePool on one 2-D pooling template (1-D as H = 1)."""
from __future__ import annotations

from ..errors import CompileError
from ..shapes import prod
from .conv import conv_geometry
from .registry import Kernel, grid_1d, register, require_float32


def _pool(node, target, mode, kernel, strides, dilations, begins, ends, count_include_pad=False):
    x, out = node.inputs[0], node.outputs[0]
    require_float32(node, [x, out])
    if len(x.shape) not in (3, 4):
        raise CompileError(f"{node.op_type} '{node.name}' pools {len(x.shape) - 2}-D windows; "
                           "vkc pools 1-D and 2-D.")
    if len(x.shape) == 3:  # 1-D pooling as a 2-D window of height 1
        kernel, strides, dilations = [1, *kernel], [1, *strides], [1, *dilations]
        begins, ends = [0, *begins], [0, *ends]
    ih, iw = ([1] + list(x.shape[2:]))[-2:]
    oh, ow = ([1] + list(out.shape[2:]))[-2:]
    total = out.size
    spec = [("TOTAL", "int32", total), ("IH", "int32", ih), ("IW", "int32", iw),
            ("OH", "int32", oh), ("OW", "int32", ow), ("KH", "int32", kernel[0]),
            ("KW", "int32", kernel[1]), ("STRIDE_H", "int32", strides[0]),
            ("STRIDE_W", "int32", strides[1]), ("DIL_H", "int32", dilations[0]),
            ("DIL_W", "int32", dilations[1]), ("PAD_T", "int32", begins[0]),
            ("PAD_L", "int32", begins[1]), ("PAD_B", "int32", ends[0]), ("PAD_R", "int32", ends[1])]
    local = target.elementwise_local
    return [Kernel("pool2d", dict(LOCAL=local, mode=mode, count_include_pad=bool(count_include_pad)),
                   spec, [x, out], writes=[1], groups=grid_1d(total, local),
                   local_size=(local, 1, 1), nodes=node.sources, flops=total * prod(kernel))]


def _windowed(node, target, mode):
    x, out = node.inputs[0], node.outputs[0]
    kernel = list(node.attrs["kernel_shape"])
    nd = len(kernel)
    if len(node.outputs) > 1 and (node.outputs[1].consumers):
        raise CompileError(f"MaxPool '{node.name}': the Indices output is not supported.")
    if node.attrs.get("storage_order", 0):
        raise CompileError(f"MaxPool '{node.name}': storage_order=1 is not supported.")
    strides, dilations, begins, ends = conv_geometry(node, x.shape[2:], out.shape[2:], kernel)
    if node.attrs.get("auto_pad", b"NOTSET") in (b"NOTSET", "NOTSET"):
        # Explicit end pads bound the divisor; ceil_mode windows past them are clipped.
        ends = list(node.attrs.get("pads", [0] * 2 * nd))[nd:]
    return _pool(node, target, mode, kernel, strides, dilations, begins, ends,
                 node.attrs.get("count_include_pad", 0))


@register("MaxPool")
def lower_maxpool(node, target):
    return _windowed(node, target, "max")


@register("AveragePool")
def lower_averagepool(node, target):
    return _windowed(node, target, "avg")


@register("GlobalAveragePool")
def lower_global_average_pool(node, target):
    spatial = list(node.inputs[0].shape[2:])
    nd = len(spatial)
    return _pool(node, target, "avg", spatial, [1] * nd, [1] * nd, [0] * nd, [0] * nd)
