"""DFT (opset 17: the axis an attribute; opset 20: an input): the discrete Fourier transform of
one axis, as a direct sum: one invocation per output value, over the line's terms, each times a
root of unity from a table computed at compile time in float64 (templates/dft.comp.j2). Forward
and inverse (scaled by 1/N), of real or complex input; onesided forward (a real signal's
spectrum up to N/2) and onesided inverse (IRFFT: a real signal from its one-sided spectrum).

torch.fft's functions export as DFT (FNet's fftn over the sequence and hidden axes). The direct
sum costs N multiply-adds per output value, which is what a transform over a model's short axes
wants; it reads the roots of unity instead of computing sin and cos, whose GLSL versions Vulkan
holds only to 2^-11.
"""
from __future__ import annotations

import numpy as np

from ..dtypes import kernel_types
from ..errors import CompileError
from ..ir import Value
from ..magnitudes import rotated_sum
from ..registry import FLOATS
from ..shapes import prod
from .kernel import Kernel, constant_input, grid_1d, register


def _scalar(node, index: int, what: str) -> int | None:
    data = constant_input(node, index, what)
    return None if data is None else int(np.asarray(data).reshape(-1)[0])


def _layout(node, axis: int | None):
    """(axis, transform length N, output length along the axis, terms summed per output,
    onesided, inverse) of a DFT node, or a CompileError naming what vkc does not take."""
    x = node.inputs[0]
    rank = len(x.shape)
    if axis is None:
        axis = _scalar(node, 2, "the axis")
        axis = -2 if axis is None else axis
    if not (-rank <= axis <= -2 or 0 <= axis <= rank - 2):
        raise CompileError(f"DFT '{node.name}': axis {axis} is not a signal axis of the rank-{rank} input "
                           f"'{x.name}' (the last axis holds the real and imaginary parts).")
    axis %= rank
    inverse, onesided = bool(node.attrs.get("inverse", 0)), bool(node.attrs.get("onesided", 0))
    parts, length = x.shape[-1], x.shape[axis]
    if parts not in (1, 2):
        raise CompileError(f"DFT '{node.name}': the last axis of '{x.name}' has {parts} values; ONNX's "
                           "DFT takes 1 (a real signal) or 2 (real and imaginary parts).")
    if onesided and parts != (2 if inverse else 1):
        raise CompileError(f"DFT '{node.name}': a onesided {'inverse' if inverse else 'forward'} DFT takes "
                           f"{'complex' if inverse else 'real'} input, and '{x.name}' is "
                           f"{'real' if parts == 1 else 'complex'} (onnxruntime refuses it too).")
    n = _scalar(node, 1, "the DFT length")
    if n is None:
        n = 2 * (length - 1) if inverse and onesided else length
    if n < 1:
        raise CompileError(f"DFT '{node.name}': the DFT length is {n}; it must be at least 1.")
    if onesided and not inverse:
        outputs, terms = n // 2 + 1, min(length, n)
    elif onesided:  # IRFFT: the first N/2 + 1 values of the spectrum make the real signal
        if length != n // 2 + 1:
            raise CompileError(
                f"DFT '{node.name}': an inverse onesided DFT of length {n} takes {n // 2 + 1} values of the "
                f"spectrum, and '{x.name}' has {length} along axis {axis}; ONNX defines the others as "
                "cut off or zero (numpy's irfft), and onnxruntime computes something else, so vkc refuses "
                f"rather than pick one. Give a DFT length of {2 * (length - 1)} or {2 * length - 1}, or "
                "slice or pad the spectrum to the length's N/2 + 1.")
        outputs, terms = n, length
    else:
        outputs, terms = n, min(length, n)
    return axis, n, outputs, terms, onesided, inverse


def _roots(n: int) -> np.ndarray:
    """cos and sin of 2 pi j / n for j < n, [n, 2] float32, exact at the quarter turns (where
    float64's cos(pi / 2) is 6e-17, not 0: an infinity times it must stay out of the sum)."""
    angle = 2.0 * np.pi * np.arange(n, dtype=np.float64) / n
    table = np.stack([np.cos(angle), np.sin(angle)], axis=1)
    table[np.abs(table) < 1e-12] = 0.0
    return table.astype(np.float32)


def _lower(node, target, axis: int | None):
    x, out = node.inputs[0], node.outputs[0]
    axis, n, outputs, terms, onesided, inverse = _layout(node, axis)
    if out.size == 0:
        return []
    roots = Value(f"{node.name}/roots_of_unity_{n}", np.dtype(np.float32), (n, 2), data=_roots(n))
    inner = prod(x.shape[axis + 1:-1])
    total = prod(x.shape[:axis]) * outputs * inner
    spec = [("TOTAL", "int32", total), ("OUTPUTS", "int32", outputs), ("INNER", "int32", inner),
            ("LENGTH", "int32", x.shape[axis]), ("TERMS", "int32", terms), ("N", "int32", n),
            ("SCALE", "float32", 1.0 / n if inverse else 1.0)]
    local = target.elementwise_local
    params = dict(LOCAL=local, complex_input=x.shape[-1] == 2, inverse=inverse,
                  real_output=inverse and onesided, **kernel_types(out))
    return [Kernel("dft", params, spec, [x, roots, out], writes=[2], groups=grid_1d(total, local),
                   local_size=(local, 1, 1), nodes=node.sources, flops=8 * total * terms)]


def _counted(axis_of):
    """For the magnitude rule: (terms summed per output, the scale: 1/N for an inverse, whose
    onesided form counts most terms twice), or None where the layout is not known."""
    def count(node):
        try:
            _, n, _, terms, onesided, inverse = _layout(node, axis_of(node))
        except CompileError:
            return None
        return terms, ((2.0 if onesided else 1.0) / n if inverse else 1.0)
    return count


def _axis_attribute(node) -> int:
    return int(node.attrs.get("axis", 1))


def _axis_input(node) -> None:
    return None


@register("DFT", since=17, dtypes=FLOATS, constant_inputs=(1,), schema=17,
          magnitude=rotated_sum(_counted(_axis_attribute)), limits="the DFT length computed at run time")
def lower_dft_17(node, target):
    return _lower(node, target, _axis_attribute(node))


@register("DFT", since=20, dtypes=FLOATS, constant_inputs=(1, 2), schema=20,
          magnitude=rotated_sum(_counted(_axis_input)), limits="the DFT length or axis computed at run time")
def lower_dft(node, target):
    return _lower(node, target, _axis_input(node))
