"""Weights over 128 MiB (VGG's and AlexNet's first classifier layers, an LM head of a large
vocabulary) cannot be bound in one descriptor on every device: Vulkan only guarantees
maxStorageBufferRange >= 2^27 bytes. A Gemm or MatMul with such a constant B becomes one product
per column block of B, concatenated. Blocks are whole COLUMNS columns where such a block fits the
range: the GEMV kernel reads B four columns at a time, and each product writes its slice of the
Concat in place (a Llama-3.2-1B head at float16: 9 GEMVs, no split-K and copies)."""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Node, Value, is_onnx
from ..targets import GUARANTEED_BINDING_BYTES

MAX_BINDING_BYTES = GUARANTEED_BINDING_BYTES
COLUMNS = 128


def split_large_weights(graph: Graph) -> Graph:
    for node in list(graph.nodes):
        if not is_onnx(node, "Gemm", "MatMul") or len(node.inputs) < 2:
            continue
        b = node.inputs[1]
        if b is None or not b.is_constant or b.nbytes <= MAX_BINDING_BYTES or len(b.shape) != 2:
            continue
        out = node.outputs[0]
        n_axis = 0 if node.op_type == "Gemm" and node.attrs.get("transB", 0) else 1
        n = b.shape[n_axis]
        blocks = -(-b.nbytes // MAX_BINDING_BYTES) + 1  # a margin for alignment padding
        step = -(-n // blocks)
        whole = -(-step // COLUMNS) * COLUMNS
        step = whole if b.nbytes // n * whole <= MAX_BINDING_BYTES else step
        parts, pieces = [], []
        for i, start in enumerate(range(0, n, step)):
            stop = min(n, start + step)
            weight = np.take(b.data, np.arange(start, stop), axis=n_axis)
            inputs = [node.inputs[0], _constant(f"{b.name}/cols{start}", weight)]
            c = node.input(2)
            if c is not None:  # Gemm's C: sliced where it varies along N, else shared
                varies = c.shape and c.shape[-1] == n and n > 1
                inputs.append(_constant(f"{c.name}/cols{start}", c.data[..., start:stop]) if varies else c)
            piece = Value(f"{out.name}/cols{start}", out.dtype, tuple(out.shape[:-1]) + (stop - start,))
            parts.append(Node(node.op_type, f"{node.name}/cols{start}", inputs, [piece],
                              dict(node.attrs), node.domain, list(node.sources)))
            pieces.append(piece)
        concat = Node("Concat", f"{node.name}/concat", pieces, [out], {"axis": len(out.shape) - 1},
                      sources=list(node.sources))
        at = graph.nodes.index(node)
        graph.nodes[at:at + 1] = [*parts, concat]
    graph.relink()
    return graph


def _constant(name: str, data: np.ndarray) -> Value:
    data = np.ascontiguousarray(data)
    return Value(name, data.dtype, tuple(data.shape), data=data)
