"""Slice and Split: strided copies out of the input (strided_copy.py), except where the part is
one run of the input's bytes that its readers can load in place (read_slices_with_shifted_loads)."""
from __future__ import annotations

import numpy as np

from ..errors import CompileError
from ..ir import Value
from ..memory import ALIGNMENT
from ..noops import whole_slice
from ..shapes import contiguous_strides
from .strided_copy import COPIES, strided_copy
from .kernel import Kernel, constant_input, kernels_by_root, register

SLICE_LIMIT = "starts, ends, axes, steps computed at run time"


def _constant_ints(node, index: int, what: str):
    data = constant_input(node, index, what)
    return None if data is None else [int(i) for i in data.reshape(-1)]


def _slice(node, target, starts, ends, axes, steps):
    x, out = node.inputs[0], node.outputs[0]
    rank = len(x.shape)
    axes = list(range(len(starts))) if axes is None else axes
    steps = [1] * len(starts) if steps is None else steps
    in_strides = contiguous_strides(x.shape)
    strides, offset = list(in_strides), 0
    for start, end, axis, step in zip(starts, ends, axes, steps):
        axis %= rank
        if step == 0:
            raise CompileError(f"Slice '{node.name}': step 0 on axis {axis}.")
        # ONNX clamps starts and ends exactly as Python's slice.indices does.
        first, _, _ = slice(start, end, step).indices(x.shape[axis])
        offset += first * in_strides[axis]
        strides[axis] = in_strides[axis] * step
    return strided_copy(node, target, x, out, strides, offset)


@register("Slice", since=1, dtypes=None, float16=True, dtypes_doc=COPIES, limits=SLICE_LIMIT, noop=whole_slice)
def lower_slice_v1(node, target):
    a = node.attrs
    return _slice(node, target, list(a["starts"]), list(a["ends"]), a.get("axes"), None)


@register("Slice", since=10, dtypes=None, float16=True, dtypes_doc=COPIES,
          constant_inputs=(1, 2, 3, 4), limits=SLICE_LIMIT, noop=whole_slice)
def lower_slice(node, target):
    starts = _constant_ints(node, 1, "starts")
    ends = _constant_ints(node, 2, "ends")
    return _slice(node, target, starts, ends, _constant_ints(node, 3, "axes"),
                  _constant_ints(node, 4, "steps"))


@register("Split", dtypes=None, float16=True, dtypes_doc=COPIES, constant_inputs=(1,),
          limits="split sizes computed at run time")
def lower_split(node, target):
    """Each output is the next block along the axis; its shape (from shape inference) already
    says how long, whichever of the split attribute, input or num_outputs set it."""
    x = node.inputs[0]
    axis = node.attrs.get("axis", 0) % len(x.shape)
    strides = contiguous_strides(x.shape)
    kernels, begin = [], 0
    for out in node.outputs:
        if out.shape is None:
            raise CompileError(f"Split '{node.name}': output '{out.name}' has no static shape.")
        kernels += strided_copy(node, target, x, out, strides, begin * strides[axis])
        begin += out.shape[axis]
    if begin != x.shape[axis]:
        raise CompileError(f"Split '{node.name}': the parts cover {begin} of the {x.shape[axis]} "
                           f"elements on axis {axis}.")
    return kernels


def read_slices_with_shifted_loads(kernels: list[Kernel], graph) -> list[Kernel]:
    """Drop the copy of a part that is one run of its input's 16- or 32-bit elements (a Split or
    Slice of channels at batch 1: ShuffleNet's channel split) when every kernel reading the part can
    shift its loads of it (Kernel.load_offsets): each binds instead a window of the input from
    the aligned byte at or below the part and adds the shift to its indices. A part at an aligned
    offset takes a shift of 0. The part stays a copy when it or its input is graph I/O (bytes the
    I/O copies own), a constant, placed in a Concat (the copy is then that slice's write), written
    or bound (or viewed) by a kernel that cannot shift, or off a 16-byte boundary (vec4 loads)."""
    outside = {id(v.root()) for v in graph.inputs + graph.outputs}
    users = kernels_by_root(kernels)
    dropped = set()
    for copy in kernels:
        if copy.template != "strided_copy" or copy.params["rank"] != 1:
            continue
        src, part = copy.bindings
        spec, size = {name: value for name, _, value in copy.spec}, np.dtype(part.dtype).itemsize
        # (a 64-bit element moves as two words: bits 32; a part of an odd number of 16-bit elements
        # is bound as a view rounded to whole words: alias_of)
        if (spec["S0"] != 1 or copy.params["bits"] != 8 * size or size not in (2, 4)
                or part.alias_of is not None or id(part) in outside or id(src.root()) in outside
                or src.root().is_constant):
            continue
        start = src.root_offset() + spec["OFFSET"] * size   # bytes into src's root
        if start % 16:
            continue
        readers = [k for k in users.get(id(part), []) if k is not copy]
        if not readers or any(not _shifts_loads(k, part) for k in readers):
            continue
        shift = start % ALIGNMENT // size
        window = Value(f"{part.name}/in_{src.name}", part.dtype, (shift + part.size,),
                       alias_of=src.root(), alias_offset=start - shift * size)
        for k in readers:
            names = [k.load_offsets[i] for i, v in enumerate(k.bindings) if v is part]
            k.bindings = [window if v is part else v for v in k.bindings]
            k.params = dict(k.params, load_shifts=(*k.params.get("load_shifts", ()), *names))
            k.spec = [*k.spec, *((name, "int32", shift) for name in names)]
        dropped.add(id(copy))
    return [k for k in kernels if id(k) not in dropped]


def _shifts_loads(kernel: Kernel, part: Value) -> bool:
    """Whether `kernel` binds `part` itself (no view of it) only where it can shift its loads."""
    at = [i for i, v in enumerate(kernel.bindings) if v.root() is part]
    return all(kernel.bindings[i] is part and i in kernel.load_offsets and i not in kernel.writes
               for i in at)
