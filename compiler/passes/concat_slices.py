"""Concat inputs written in place: the kernel that produces an input writes straight into its slice
of the Concat's output, and the Concat copies only the inputs that cannot be placed so.

Along an axis whose leading dims are all 1 (channels of a batch-1 NCHW tensor), input k's slice of
the output is one run of bytes, starting at the byte size of the inputs before it. When that start
is a multiple of memory.ALIGNMENT (minStorageBufferOffsetAlignment) the input can simply BE those
bytes: it becomes a view of the output at that offset (Value.alias_of + alias_offset), so every
kernel that writes or reads it binds its slice as a tensor of its own, with no template knowing.
The memory plan then plans the output as one root, alive from the first write into any slice.

An input stays a copy when its bytes cannot be the slice's: a graph input, a constant, a value
whose bytes are a graph output (the I/O copies own those), a value already placed elsewhere (an
input used twice in one Concat, or by two Concats: the first slot takes it), a slice that is not
contiguous (an inner axis: producers would have to write strided) or starts off the binding
alignment (lower/concat.py still drops that copy where the one kernel writing the input can shift
its stores), and a byte count that is not whole 32-bit words (a kernel writing 8/16-bit elements
binds whole words, buffer_view, and would spill into the next slice). A Concat output that is
itself placed in a later Concat nests: its slices' offsets add up.
"""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Node, Value
from ..memory import ALIGNMENT
from ..shapes import prod


def place_concat_inputs(graph: Graph) -> Graph:
    inputs = {id(v) for v in graph.inputs}
    output_roots = {id(v.root()) for v in graph.outputs}
    for node in graph.nodes:
        if node.op_type != "Concat" or node.domain not in ("", "ai.onnx"):
            continue
        out = node.outputs[0]
        axis = node.attrs["axis"] % len(out.shape)
        if prod(out.shape[:axis]) != 1 or any(not x.shape or x.nbytes == 0 for x in node.inputs):
            continue  # strided slices (or nothing to place)
        placed, offset = [], 0
        for x in node.inputs:
            root = x.root()
            ok = (offset % ALIGNMENT == 0 and x.nbytes % 4 == 0 and root.nbytes == x.nbytes
                  and not root.is_constant and root is not out.root() and id(root) not in inputs
                  and id(root) not in output_roots and root.producer is not None)
            if ok:
                # x's bytes are all of root's (a root holds its views), so placing root places x.
                root.alias_of, root.alias_offset = out, offset
            placed.append(ok)
            offset += x.nbytes
        node.attrs["written_in_place"] = tuple(placed)
    return graph

