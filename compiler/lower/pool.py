"""MaxPool (with its Indices output), AveragePool, GlobalMaxPool and GlobalAveragePool on one
pooling template over up to three spatial dims (1-D and 2-D as size-1 depth and height); on GPU
profiles the global pools are reductions (lower/reduce.py), whose lanes share each long row."""
from __future__ import annotations

import numpy as np

from ..dtypes import kernel_types, texel_format
from ..errors import CompileError
from ..magnitudes import averaged
from ..shapes import prod
from .conv import conv_geometry
from ..registry import FLOATS
from .kernel import Kernel, buffer_view, grid_1d, register, texel_reads
from .reduce import reduce_kernel

SPATIAL_LIMIT = "4-D and higher spatial ranks"


def _pad3(values, fill):
    """Spatial parameters of 1-, 2- or 3-D pooling as (depth, height, width)."""
    return [fill] * (3 - len(values)) + list(values)


def _pool(node, target, mode, kernel, strides, dilations, begins, ends, count_include_pad=False,
          indices=None, storage_order=0):
    x, out = node.inputs[0], node.outputs[0]
    nd = len(x.shape) - 2
    if not 1 <= nd <= 3:
        raise CompileError(f"{node.op_type} '{node.name}' pools {nd}-D windows; vkc pools 1-D, "
                           "2-D and 3-D.")
    i_d, i_h, i_w = _pad3(x.shape[2:], 1)
    o_d, o_h, o_w = _pad3(out.shape[2:], 1)
    (kd, kh, kw), (sd, sh, sw) = _pad3(kernel, 1), _pad3(strides, 1)
    (dd, dh, dw), (pf, pt, pl), (pk, pb, pr) = (_pad3(dilations, 1), _pad3(begins, 0),
                                                _pad3(ends, 0))
    total = out.size
    spec = [("TOTAL", "int32", total), ("ID", "int32", i_d), ("IH", "int32", i_h),
            ("IW", "int32", i_w), ("OD", "int32", o_d), ("OH", "int32", o_h), ("OW", "int32", o_w),
            ("KD", "int32", kd), ("KH", "int32", kh), ("KW", "int32", kw),
            ("STRIDE_D", "int32", sd), ("STRIDE_H", "int32", sh), ("STRIDE_W", "int32", sw),
            ("DIL_D", "int32", dd), ("DIL_H", "int32", dh), ("DIL_W", "int32", dw),
            ("PAD_F", "int32", pf), ("PAD_T", "int32", pt), ("PAD_L", "int32", pl),
            ("PAD_K", "int32", pk), ("PAD_B", "int32", pb), ("PAD_R", "int32", pr)]
    bindings = [buffer_view(x), buffer_view(out)] + ([indices] if indices is not None else [])
    local = target.elementwise_local
    fmt = texel_format(x.dtype)
    texel = fmt is not None and texel_reads(target, x)
    types = kernel_types(out)
    params = dict(LOCAL=local, mode=mode, count_include_pad=bool(count_include_pad),
                  indices=indices is not None, storage_order=bool(storage_order), TEXEL=texel,
                  **types)
    words = -(-total // types["T"].per_word)  # 8-bit outputs: a packed word per invocation
    return [Kernel("pool", params, spec, bindings, writes=list(range(1, len(bindings))),
                   groups=grid_1d(words, local), local_size=(local, 1, 1), nodes=node.sources,
                   flops=total * prod(kernel), texel_buffers={0: fmt} if texel else {},
                   store_offset=None if types["T"].packed else 1)]


def _windowed(node, target, mode):
    x, out = node.inputs[0], node.outputs[0]
    kernel = list(node.attrs["kernel_shape"])
    nd = len(kernel)
    strides, dilations, begins, ends = conv_geometry(node, x.shape[2:], out.shape[2:], kernel)
    if node.text("auto_pad", "NOTSET") == "NOTSET":
        # Explicit end pads bound the divisor; ceil_mode windows past them are clipped.
        ends = list(node.attrs.get("pads", [0] * 2 * nd))[nd:]
    for axis, (i, o, s, b) in enumerate(zip(x.shape[2:], out.shape[2:], strides, begins)):
        if node.attrs.get("ceil_mode", 0) and (o - 1) * s >= i + b:
            raise CompileError(
                f"{node.op_type} '{node.name}': with ceil_mode=1 the last of its {o} windows along "
                f"spatial axis {axis} starts past the input ({i}) and its begin padding ({b}); "
                "ONNX drops such a window but onnx's shape inference counts it, so the output's "
                "shape is in doubt. Use ceil_mode=0, or pads that keep every window's start inside.")
    indices = node.outputs[1] if len(node.outputs) > 1 else None
    if indices is not None and np.dtype(indices.dtype) != np.int64:
        raise CompileError(f"MaxPool '{node.name}': Indices '{indices.name}' must be int64.")
    return _pool(node, target, mode, kernel, strides, dilations, begins, ends,
                 node.attrs.get("count_include_pad", 0), indices,
                 node.attrs.get("storage_order", 0))


@register("MaxPool", dtypes=FLOATS + ("int8", "uint8"),
          dtypes_doc="float32, float16, int8, uint8; Indices int64", limits=SPATIAL_LIMIT)
def lower_maxpool(node, target):
    return _windowed(node, target, "max")


@register("AveragePool", dtypes=FLOATS, limits=SPATIAL_LIMIT, magnitude=averaged)
def lower_averagepool(node, target):
    return _windowed(node, target, "avg")


def _global(node, target, mode):
    spatial = list(node.inputs[0].shape[2:])
    nd = len(spatial)
    if target.matmul != "texel":  # GPUs: the reduction kernel, whose lanes share each long row
        return reduce_kernel(node, target, node.inputs[0], node.outputs[0],
                             set(range(2, 2 + nd)), {"avg": "mean", "max": "max"}[mode])
    return _pool(node, target, mode, spatial, [1] * nd, [1] * nd, [0] * nd, [0] * nd)


@register("GlobalAveragePool", dtypes=FLOATS, limits=SPATIAL_LIMIT, magnitude=averaged)
def lower_global_average_pool(node, target):
    return _global(node, target, "avg")


def _global_max(node, x):
    """The maximum over every spatial axis (onnx's reference evaluator reduces axes rank - 2 and
    rank - 1: the channels too for a rank-3 input)."""
    return [np.max(x, axis=tuple(range(2, x.ndim)), keepdims=True)]


@register("GlobalMaxPool", dtypes=FLOATS, limits=SPATIAL_LIMIT, evaluate=_global_max)
def lower_global_max_pool(node, target):
    return _global(node, target, "max")
