"""Resize (nearest, linear, cubic, antialias; every coordinate_transformation_mode) and Upsample on
templates/resize.comp.j2. Up to two adjacent axes may change; every other axis keeps its size.

Scales follow onnx's reference: given scales are used as given (not out / in), sizes give
out / in, and keep_aspect_ratio_policy picks the smaller or larger of those.
"""
from __future__ import annotations

import numpy as np

from ..dtypes import kernel_types
from ..errors import CompileError
from ..shapes import prod
from ..registry import FLOATS
from .kernel import Kernel, grid_1d, register

RESIZE_LIMIT = ("more than two resized axes, or two that are not adjacent; roi, scales and sizes "
                "computed at run time")
UPSAMPLE_LIMIT = "cubic mode; scales computed at run time"

TRANSFORMS = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
              "asymmetric", "tf_crop_and_resize")


def _const(node, index):
    v = node.input(index)
    if v is None:
        return None
    if not v.is_constant:
        raise CompileError(f"{node.op_type} '{node.name}': input '{v.name}' comes from the "
                           "computation; vkc needs Resize's roi, scales and sizes constant.")
    return None if v.size == 0 else v.data.astype(np.float64).reshape(-1)


def _transform(mode, scale, n_in, n_out, roi=(0.0, 1.0)):
    """(A, MUL, DIV, B) with source coordinate = (y + A) * MUL / DIV + B, evaluated in float32
    in that order, which rounds like onnx's reference and onnxruntime do (dividing by the scale
    rather than multiplying by its inverse keeps nearest-mode ties on the same side). Like the
    reference, align_corners and tf_crop_and_resize use the unrounded output length scale * n_in."""
    width = scale * n_in
    if mode == "align_corners":
        return (0.0, 0.0, 1.0, 0.0) if width == 1 else (0.0, n_in - 1, width - 1, 0.0)
    if mode == "asymmetric":
        return (0.0, 1.0, scale, 0.0)
    if mode == "pytorch_half_pixel":  # ONNX: 0 where the output length (not scale * n_in) is 1
        return (0.0, 0.0, 1.0, 0.0) if n_out == 1 else (0.5, 1.0, scale, -0.5)
    if mode == "half_pixel":
        return (0.5, 1.0, scale, -0.5)
    if mode == "half_pixel_symmetric":
        adjustment = n_out / width
        return (0.5, 1.0, scale, n_in / 2 * (1 - adjustment) - 0.5)
    if mode == "tf_crop_and_resize":
        r0, r1 = roi
        if width == 1:
            return (0.0, 0.0, 1.0, (r1 - r0) * (n_in - 1) / 2 + r0 * (n_in - 1))
        return (0.0, (r1 - r0) * (n_in - 1), width - 1, r0 * (n_in - 1))
    raise ValueError(mode)


def _filter(mode: str, scale: float, antialias: bool) -> tuple[int, int, float]:
    """(first tap offset from floor(x), number of taps, distance scale S) of one axis."""
    s = min(scale, 1.0) if antialias else 1.0
    if mode == "nearest":
        return 0, 1, 1.0
    if mode == "linear":
        start = int(np.floor(-1 / s) + 1) if antialias else 0
        return start, 2 - 2 * start, s
    start = int(np.floor(-2 / s) + 1) if antialias else -1
    return start, 2 - 2 * start, s


def resize_kernel(node, target, *, mode, transform, nearest_mode, scales, roi=None,
                  cubic_a=-0.75, exclude_outside=False, extrapolation=0.0, antialias=False):
    x, out = node.inputs[0], node.outputs[0]
    rank = len(x.shape)
    roi = roi if roi is not None else [0.0] * rank + [1.0] * rank
    identity = [x.shape[a] == out.shape[a] and scales[a] == 1.0
                and (transform != "tf_crop_and_resize" or (roi[a], roi[a + rank]) == (0.0, 1.0))
                for a in range(rank)]
    moving = [a for a in range(rank) if not identity[a]]
    if moving and (len(moving) > 2 or moving[-1] - moving[0] > 1):
        raise CompileError(f"{node.op_type} '{node.name}' resizes axes {moving}; vkc resizes at "
                           "most two adjacent axes (H and W).")
    w_axis = moving[-1] if moving else rank - 1
    h_axis = moving[0] if len(moving) == 2 else None
    inner = prod(x.shape[w_axis + 1:])
    spec = [("TOTAL", "int32", out.size), ("INNER", "int32", inner)]
    n_taps = {}
    for tag, axis in (("H", h_axis), ("W", w_axis)):
        if axis is None or identity[axis]:
            n_in = n_out = 1
            a, mul, div, b = 0.0, 1.0, 1.0, 0.0
            start, n_taps[tag], s = _filter(mode, 1.0, False)
        else:
            n_in, n_out = x.shape[axis], out.shape[axis]
            width = scales[axis] * n_in
            if transform == "align_corners" and abs(width - n_out) > 1e-6 * n_out:
                # ONNX's reference (and its node-test data) divide by width - 1; onnxruntime and
                # torch by the output length - 1: no answer is right for both
                raise CompileError(
                    f"{node.op_type} '{node.name}': align_corners with scale {scales[axis]:g} on axis {axis} "
                    f"makes {width:g} of {n_in} elements, not the {n_out} it outputs, where ONNX's "
                    "reference and onnxruntime map coordinates differently; give the output size "
                    "(sizes) or a scale whose product with the input length is whole.")
            a, mul, div, b = _transform(transform, scales[axis], n_in, n_out,
                                        (roi[axis], roi[axis + rank]))
            start, n_taps[tag], s = _filter(mode, scales[axis], antialias)
        spec += [(f"I{tag}", "int32", n_in), (f"O{tag}", "int32", n_out),
                 (f"A_{tag}", "float32", a), (f"MUL_{tag}", "float32", mul),
                 (f"DIV_{tag}", "float32", div), (f"B_{tag}", "float32", b),
                 (f"START_{tag}", "int32", start), (f"S_{tag}", "float32", s)]
    extrapolate = transform == "tf_crop_and_resize"
    if mode == "cubic":
        spec.append(("CUBIC_A", "float32", float(cubic_a)))
    if extrapolate:
        spec.append(("EXTRAPOLATION", "float32", float(extrapolation)))
    local = target.elementwise_local
    params = dict(LOCAL=local, mode=mode, nearest_mode=nearest_mode,
                  exclude_outside=bool(exclude_outside), extrapolate=extrapolate,
                  antialias=bool(antialias), taps_h=n_taps["H"], taps_w=n_taps["W"],
                  **kernel_types(out))
    return [Kernel("resize", params, spec, [x, out], writes=[1], groups=grid_1d(out.size, local),
                   local_size=(local, 1, 1), nodes=node.sources,
                   flops=2 * n_taps["H"] * n_taps["W"] * out.size)]


def _scales(node, scales, sizes, axes):
    x = node.inputs[0]
    rank = len(x.shape)
    axes = list(range(rank)) if axes is None else [a % rank for a in axes]
    full = [1.0] * rank
    if scales is not None:
        for a, s in zip(axes, scales):
            full[a] = float(np.float32(s))
        return full
    if sizes is None:
        raise CompileError(f"{node.op_type} '{node.name}' has neither scales nor sizes.")
    ratios = {a: s / x.shape[a] for a, s in zip(axes, sizes)}
    policy = node.text("keep_aspect_ratio_policy", "stretch")
    if policy != "stretch":
        pick = min if policy == "not_larger" else max
        ratios = dict.fromkeys(ratios, pick(ratios.values()))
    for a, r in ratios.items():
        full[a] = r
    return full


def _mode(node):
    mode = node.text("mode", "nearest")
    if mode not in ("nearest", "linear", "cubic"):
        raise CompileError(f"{node.op_type} '{node.name}': mode '{mode}' is not nearest, linear "
                           "or cubic.")
    return mode


def _legacy(node, target, scales):
    """Upsample and Resize-10: asymmetric coordinates; nearest takes the floor, as
    onnxruntime does."""
    mode = _mode(node)
    if mode == "cubic":
        raise CompileError(f"{node.op_type} '{node.name}': cubic needs Resize-11 or later.")
    return resize_kernel(node, target, mode=mode, transform="asymmetric", nearest_mode="floor",
                         scales=[float(np.float32(s)) for s in scales])


@register("Upsample", since=7, dtypes=FLOATS, limits=UPSAMPLE_LIMIT)
def lower_upsample_v7(node, target):
    return _legacy(node, target, node.attrs["scales"])


@register("Upsample", since=9, dtypes=FLOATS, constant_inputs=(1,), limits=UPSAMPLE_LIMIT)
def lower_upsample(node, target):
    return _legacy(node, target, _const(node, 1))


@register("Resize", since=10, dtypes=FLOATS, constant_inputs=(1,), limits=RESIZE_LIMIT)
def lower_resize_v10(node, target):
    return _legacy(node, target, _const(node, 1))


def _reference_differs(graph, node) -> bool:
    """Whether onnx's reference evaluator, which folds Resize of constants, computes another
    answer than onnxruntime and this kernel: pytorch_half_pixel maps an output of length 1 to
    source coordinate 0 (ONNX's text, onnxruntime), where the reference tests scale * n_in == 1
    (-0.5 then, (y + 0.5) / scale - 0.5 otherwise: row 1 of 3 at scale 0.5). Such a node is
    left to the kernel (registry `unfolded`)."""
    if node.text("coordinate_transformation_mode", "half_pixel") != "pytorch_half_pixel":
        return False
    x, y = node.inputs[0], node.outputs[0]
    return y.shape is None or any(o == 1 and i != 1 for i, o in zip(x.shape, y.shape))


@register("Resize", since=11, dtypes=FLOATS, constant_inputs=(1, 2, 3),
          limits=RESIZE_LIMIT, unfolded=_reference_differs)
def lower_resize(node, target):
    transform = node.text("coordinate_transformation_mode", "half_pixel")
    if transform not in TRANSFORMS:
        raise CompileError(f"Resize '{node.name}': coordinate_transformation_mode "
                           f"'{transform}' is not one of {', '.join(TRANSFORMS)}.")
    axes = node.attrs.get("axes")
    rank = len(node.inputs[0].shape)
    roi = _const(node, 1)
    if roi is not None and axes is not None:
        full = [0.0] * rank + [1.0] * rank
        for i, a in enumerate(axes):
            full[a % rank], full[a % rank + rank] = roi[i], roi[i + len(axes)]
        roi = full
    scales = _scales(node, _const(node, 2), _const(node, 3), axes)
    return resize_kernel(node, target, mode=_mode(node), transform=transform,
                         nearest_mode=node.text("nearest_mode", "round_prefer_floor"),
                         scales=scales, roi=None if roi is None else list(roi),
                         cubic_a=node.attrs.get("cubic_coeff_a", -0.75),
                         exclude_outside=node.attrs.get("exclude_outside", 0),
                         extrapolation=node.attrs.get("extrapolation_value", 0.0),
                         antialias=bool(node.attrs.get("antialias", 0)))
