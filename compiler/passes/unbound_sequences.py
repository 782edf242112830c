"""A tensor split into a sequence and read back piece by piece becomes slices of the tensor.

The dynamo exporter writes torch.unbind (and split/chunk into a list) as SplitToSequence, each
piece then read by SequenceAt at a constant position (Pixtral's patch embeddings: `for p in
x.unbind(0)`). With the split sizes constant (each 1 when the split input is absent), every
SequenceAt reads a known range along the axis: a Slice of it, or, where SplitToSequence drops
the axis (keepdims=0 with no split input), a Gather at that one index, its shape set here (onnx
infers none for a piece of unequal splits; fold_constants then walks the graph again for its
readers). The sequence goes once nothing else reads it. Runs at the end of fold_constants, before
the unsupported-op check.
"""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Node, ancestors, constant, drop_unread, expand_nodes, is_onnx


def rewrite_unbound_sequences(graph: Graph) -> Graph:
    feeding = []

    def rewrite(node: Node) -> list[Node] | None:
        read = _as_slice(node) if is_onnx(node, "SequenceAt") else None
        if read:
            feeding.append(node.inputs[0])
        return read
    graph = expand_nodes(graph, rewrite)
    return drop_unread(graph, ancestors(feeding))


def _ranges(split: Node) -> list[tuple[int, int]] | None:
    """[start, end) of each piece along the axis, or None where the sizes are not constant."""
    x = split.inputs[0]
    axis = int(split.attrs.get("axis", 0))
    if x.shape is None or not -len(x.shape) <= axis < len(x.shape):
        return None
    dim = x.shape[axis]
    sizes = split.inputs[1] if len(split.inputs) > 1 else None
    if sizes is None:
        lengths = [1] * dim
    elif not sizes.is_constant:
        return None
    elif np.ndim(sizes.data) == 0:
        step = int(sizes.data)
        lengths = [min(step, dim - s) for s in range(0, dim, step)] if step > 0 else None
    else:
        lengths = [int(n) for n in np.asarray(sizes.data).ravel()]
    if not lengths or sum(lengths) != dim:
        return None
    ends = np.cumsum(lengths)
    return [(int(e - n), int(e)) for n, e in zip(lengths, ends)]


def _as_slice(node: Node) -> list[Node] | None:
    seq, position = node.inputs[0], node.inputs[1]
    split = seq.producer if seq is not None else None
    if split is None or not is_onnx(split, "SplitToSequence") or not position.is_constant:
        return None
    ranges = _ranges(split)
    if ranges is None:
        return None
    at = int(np.asarray(position.data).ravel()[0])
    if not -len(ranges) <= at < len(ranges):
        return None
    start, end = ranges[at]
    x, name, sources = split.inputs[0], node.name, list(node.sources)
    axis = int(split.attrs.get("axis", 0)) % len(x.shape)
    dropped = (len(split.inputs) < 2 or split.inputs[1] is None) and not split.attrs.get("keepdims", 1)
    out = node.outputs[0]   # onnx infers no shape for a piece of a split into unequal sizes
    shape = list(x.shape)
    shape[axis:axis + 1] = [] if dropped else [end - start]
    out.shape, out.dtype = tuple(shape), out.dtype if out.dtype is not None else x.dtype
    if dropped:
        return [Node("Gather", name, [x, constant(f"{name}/index", np.array(start, np.int64))],
                     list(node.outputs), {"axis": axis}, sources=sources)]
    bounds = [constant(f"{name}/{what}", np.array([v], np.int64))
              for what, v in (("start", start), ("end", end), ("axis", axis))]
    return [Node("Slice", name, [x, *bounds], list(node.outputs), sources=sources)]
