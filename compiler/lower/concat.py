"""Concat: one slice copy per input into the output, except for the inputs whose producers write
straight into their slice: those the graph places there (passes/concat_slices.py), and, once
every node is lowered, those whose slice starts off the binding alignment but whose one
producing kernel can shift its stores (write_slices_with_shifted_stores)."""
from __future__ import annotations

import numpy as np

from ..dtypes import TYPES, kernel_types
from ..ir import Value
from ..memory import ALIGNMENT
from ..noops import rest_empty
from ..registry import FLOATS
from ..shapes import prod
from .kernel import Kernel, grid_1d, kernels_by_root, register
from .strided_copy import element_words

# Integer Concats (positions and block ids computed from a mask: LongT5's) move 32-bit words.
MOVED = ("int32", "int64", "uint32", "uint64")


@register("Concat", dtypes=FLOATS + MOVED, noop=rest_empty)
def lower_concat(node, target):
    out = node.outputs[0]
    axis = node.attrs["axis"] % len(out.shape)
    outer, inner = prod(out.shape[:axis]), prod(out.shape[axis + 1:])
    local = target.elementwise_local
    if np.dtype(out.dtype).name in FLOATS:
        params = dict(LOCAL=local, **kernel_types(out))
    else:  # copied bit for bit as 32-bit words (an int64 element is two)
        inner *= element_words(node, [*node.inputs, out])
        params = dict(LOCAL=local, T=TYPES["float32"], ACC=TYPES["float32"])
    kernels, offset = [], 0
    # Set by passes/concat_slices.py: the inputs already written into their slice.
    placed_inputs = node.attrs.get("written_in_place", (False,) * len(node.inputs))
    for x, placed in zip(node.inputs, placed_inputs):
        a_in = x.shape[axis]
        total = outer * a_in * inner
        if total and not placed:
            spec = [("TOTAL", "int32", total), ("INNER", "int32", inner), ("A_IN", "int32", a_in),
                    ("A_OUT", "int32", out.shape[axis]), ("OFFSET", "int32", offset)]
            kernels.append(Kernel("copy_slice", params, spec, [x, out], writes=[1],
                                  groups=grid_1d(total, local), local_size=(local, 1, 1),
                                  nodes=node.sources))
        offset += a_in
    return kernels


def write_slices_with_shifted_stores(kernels: list[Kernel], graph) -> list[Kernel]:
    """Drop the copy of a contiguous Concat slice that starts off the binding alignment when one
    kernel alone writes the input, nothing else reads it, and that kernel can shift its stores
    (Kernel.store_offset): it binds instead a window of the output from the aligned byte below
    the slice, and stores STORE_OFFSET elements into it. The window's first bytes belong to the
    slice before; the barrier rule sees the overlap and orders the two writers."""
    outside = {id(v.root()) for v in graph.inputs + graph.outputs}
    users = kernels_by_root(kernels)
    dropped = set()
    for copy in kernels:
        if copy.template != "copy_slice":
            continue
        x, out = copy.bindings
        if np.dtype(x.dtype).name not in FLOATS:
            continue  # moved as words: the producers that shift their stores compute floats
        spec = {name: value for name, _, value in copy.spec}
        itemsize = np.dtype(x.dtype).itemsize
        start = spec["OFFSET"] * spec["INNER"] * itemsize
        shift = start % ALIGNMENT // itemsize
        if (spec["TOTAL"] != spec["A_IN"] * spec["INNER"] or shift % 4 or x.nbytes % 4
                or x.alias_of is not None or x.is_constant or id(x) in outside):
            continue  # strided, a shift vec4 stores cannot take, or bytes x must keep
        writers = [k for k in users.get(id(x), []) if k is not copy]
        if len(writers) != 1 or writers[0].store_offset is None:
            continue
        producer = writers[0]
        if producer.bindings[producer.store_offset] is not x or any(
                v.root() is x for i, v in enumerate(producer.bindings) if i != producer.store_offset):
            continue
        window = Value(f"{x.name}/in_{out.name}", x.dtype, (shift + x.size,), alias_of=out,
                       alias_offset=start - shift * itemsize)
        producer.bindings[producer.store_offset] = window
        producer.params = dict(producer.params, store_offset=True)
        producer.spec = [*producer.spec, ("STORE_OFFSET", "int32", shift)]
        dropped.add(id(copy))
    return [k for k in kernels if id(k) not in dropped]
