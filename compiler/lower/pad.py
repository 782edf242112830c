"""Pad (constant, reflect, edge, wrap), Tile (a wrap pad) and vkc.Roll (a wrap of the whole input,
started part way) on templates/pad.comp.j2."""
from __future__ import annotations

import numpy as np

from ..errors import CompileError
from ..noops import zero_pads
from ..shapes import contiguous_strides, prod
from .kernel import Kernel, buffer_view, constant_input, grid_1d, register
from ..dtypes import element_bits
from .strided_copy import element_words

MODES = ("constant", "reflect", "edge", "wrap")
PAD_LIMIT = "pads or constant_value computed at run time"
PADS = "8-, 16-, 32- and 64-bit types (float16, int8, bool, float32, int64, ...)"


def pad_kernel(node, target, x, out, begins, mode: str, value=0.0) -> list[Kernel]:
    if prod(out.shape) and not prod(x.shape):
        raise CompileError(f"{node.op_type} '{node.name}' pads an empty tensor.")
    # Negative pads crop first; the mode then pads the cropped tensor (onnxruntime's reading:
    # edge, reflect and wrap see the cropped edges).
    lows = [max(-b, 0) for b in begins]
    ends = [o - i - b for o, i, b in zip(out.shape, x.shape, begins)]
    lengths = [i - lo - max(-e, 0) for i, lo, e in zip(x.shape, lows, ends)]
    if prod(out.shape) and min(lengths, default=1) <= 0:
        raise CompileError(f"{node.op_type} '{node.name}' crops an axis to nothing.")
    return _kernel(node, target, x, out, lengths, [max(b, 0) for b in begins], lows, mode, value)


def roll_kernel(node, target, x, out, shifts: dict[int, int]) -> list[Kernel]:
    """out[c] = x[(c - shift) mod n] along each rolled axis (torch.roll): a wrap of the whole
    input, started `shift` elements in."""
    return _kernel(node, target, x, out, list(x.shape), [shifts.get(d, 0) for d in range(len(x.shape))],
                   [0] * len(x.shape), "wrap")


def _kernel(node, target, x, out, lengths, starts, lows, mode: str, value=0.0) -> list[Kernel]:
    """Output coordinate c_d reads input coordinate c_d - starts_d of the input cropped to
    `lengths` from `lows`, by `mode` outside it."""
    sizes = {element_bits(v.dtype) for v in (x, out)}
    bits = min(sizes) if len(sizes) == 1 and min(sizes) in (8, 16) else 32
    words = 1 if bits < 32 else element_words(node, [x, out])
    in_shape, out_shape = list(x.shape), list(out.shape)
    if words == 2:   # a 64-bit element is two words: an innermost axis of 2, never padded
        in_shape, out_shape = in_shape + [2], out_shape + [2]
        lengths, starts, lows = list(lengths) + [2], list(starts) + [0], list(lows) + [0]
    total = prod(out_shape)
    if total == 0:
        return []
    value_bits = np.asarray(value).astype(np.dtype(x.dtype)).reshape(1).view(
        {8: np.uint8, 16: np.uint16}.get(bits, np.uint32))
    rank = len(out_shape)
    strides = contiguous_strides(in_shape)
    spec = [("TOTAL", "int32", total)]
    spec += [(f"D{d}", "int32", out_shape[d]) for d in range(1, rank)]
    spec += [(f"I{d}", "int32", lengths[d]) for d in range(rank)]
    spec += [(f"P{d}", "int32", starts[d]) for d in range(rank)]
    spec += [(f"S{d}", "int32", strides[d]) for d in range(rank)]
    spec += [("OFFSET", "int32", sum(lo * st for lo, st in zip(lows, strides)))]
    if mode == "constant":
        spec += [(f"VALUE{w}", "uint32", int(b)) for w, b in enumerate(value_bits)]
    local = target.elementwise_local
    per_word = 32 // bits
    return [Kernel("pad", dict(LOCAL=local, rank=rank, mode=mode, words=words, bits=bits), spec,
                   [buffer_view(x), buffer_view(out)],
                   writes=[1], groups=grid_1d(-(-total // per_word), local), local_size=(local, 1, 1),
                   nodes=node.sources)]


def _mode(node) -> str:
    mode = node.text("mode", "constant")
    if mode not in MODES:
        raise CompileError(f"Pad '{node.name}': mode '{mode}' is not one of {', '.join(MODES)}.")
    return mode


@register("Pad", since=1, dtypes=None, float16=True, dtypes_doc=PADS, limits=PAD_LIMIT, noop=zero_pads)
def lower_pad_v1(node, target):
    pads = list(node.attrs.get("pads", node.attrs.get("paddings", [])))
    return pad_kernel(node, target, node.inputs[0], node.outputs[0], pads[:len(pads) // 2],
                      _mode(node), node.attrs.get("value", 0.0))


@register("Pad", since=11, dtypes=None, float16=True, dtypes_doc=PADS, constant_inputs=(1, 2, 3),
          limits=PAD_LIMIT, noop=zero_pads)
def lower_pad(node, target):
    x = node.inputs[0]
    rank = len(x.shape)
    pads = [int(p) for p in constant_input(node, 1, "pads")]
    value = constant_input(node, 2, "constant_value")
    axes = constant_input(node, 3, "axes")
    axes = list(range(rank)) if axes is None else [int(a) % rank for a in axes.reshape(-1)]
    begins = [0] * rank
    for a, p in zip(axes, pads[:len(axes)]):
        begins[a] = p
    value = 0 if value is None or value.size == 0 else value.reshape(-1)[0]
    return pad_kernel(node, target, x, node.outputs[0], begins, _mode(node), value)


@register("Tile", since=6, dtypes=None, float16=True, dtypes_doc=PADS, constant_inputs=(1,),
          limits="repeats computed at run time")
def lower_tile(node, target):
    """out[c] = x[c mod len]: a wrap pad at the end of every axis."""
    return pad_kernel(node, target, node.inputs[0], node.outputs[0],
                      [0] * len(node.inputs[0].shape), "wrap")


@register("vkc.Roll", dtypes=None, float16=True, dtypes_doc=PADS)
def lower_roll(node, target):
    """torch.roll over the axes of attribute `shifts` ({axis: shift}; passes/rolls.py)."""
    return roll_kernel(node, target, node.inputs[0], node.outputs[0], node.attrs["shifts"])
