"""Concat: one slice copy per input into the output, except for the inputs whose producers write
straight into their slice: those the graph places there (passes/concat_slices.py), and, once
every node is lowered, those whose slice starts off the binding alignment but whose one
producing kernel can shift its stores (write_slices_with_shifted_stores)."""
from __future__ import annotations

import numpy as np

from ..dtypes import TYPES, element_bits, kernel_types
from ..errors import CompileError
from ..ir import Value
from ..memory import ALIGNMENT
from ..noops import rest_empty
from ..registry import FLOATS
from ..shapes import prod
from .kernel import Kernel, buffer_view, grid_1d, kernels_by_root, register
from .strided_copy import element_words

# Integer Concats (positions and block ids computed from a mask: LongT5's) move 32-bit words;
# 8- and 16-bit ones (CPM-Ant's bool attention mask) too, where each input's part of an output
# row is whole words.
MOVED = ("int32", "int64", "uint32", "uint64")
PACKED = ("bool", "int8", "uint8", "int16", "uint16")


@register("Concat", dtypes=FLOATS + MOVED + PACKED, noop=rest_empty,
          limits="8- and 16-bit parts of an output row that are not whole 32-bit words")
def lower_concat(node, target):
    out = node.outputs[0]
    axis = node.attrs["axis"] % len(out.shape)
    outer, inner = prod(out.shape[:axis]), prod(out.shape[axis + 1:])
    local = target.elementwise_local
    lengths = [x.shape[axis] for x in node.inputs]  # each input's part of the axis, in units
    a_out = out.shape[axis]
    if np.dtype(out.dtype).name in FLOATS:
        params = dict(LOCAL=local, **kernel_types(out))
    else:  # copied bit for bit as 32-bit words (an int64 element is two)
        if np.dtype(out.dtype).name in PACKED:  # the axis and the dims after it as words
            lengths, a_out, inner = _packed_words(node, lengths, inner, element_bits(out.dtype))
        else:
            inner *= element_words(node, [*node.inputs, out])
        params = dict(LOCAL=local, T=TYPES["float32"], ACC=TYPES["float32"])
    kernels, offset = [], 0
    # Set by passes/concat_slices.py: the inputs already written into their slice.
    placed_inputs = node.attrs.get("written_in_place", (False,) * len(node.inputs))
    for x, a_in, placed in zip(node.inputs, lengths, placed_inputs):
        total = outer * a_in * inner
        if total and not placed:
            spec = [("TOTAL", "int32", total), ("INNER", "int32", inner), ("A_IN", "int32", a_in),
                    ("A_OUT", "int32", a_out), ("OFFSET", "int32", offset)]
            kernels.append(Kernel("copy_slice", params, spec, [buffer_view(x), buffer_view(out)],
                                  writes=[1], groups=grid_1d(total, local), local_size=(local, 1, 1),
                                  nodes=node.sources))
        offset += a_in
    return kernels


def _packed_words(node, lengths: list[int], inner: int, bits: int) -> tuple[list[int], int, int]:
    """(each input's words of an output row, the row's words, 1): a Concat of 8- or 16-bit
    elements copies whole words, so each input's part of an output row must be whole words."""
    per_word = 32 // bits
    if any(a * inner % per_word for a in lengths):
        raise CompileError(f"Concat '{node.name}' joins {np.dtype(node.outputs[0].dtype).name} parts of "
                           f"{[a * inner for a in lengths]} elements per row; vkc's kernel moves "
                           f"{bits}-bit elements {per_word} to a word, so each part must be a multiple "
                           f"of {per_word} (Cast to int32 before the Concat otherwise).")
    return [a * inner // per_word for a in lengths], sum(lengths) * inner // per_word, 1


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
