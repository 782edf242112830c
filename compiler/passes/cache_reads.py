"""Every read of a growing cache compiled to a fixed capacity (compiler/growing_cache.py) becomes
an attention over its first position + S rows: the vkc.Attention nodes fuse_attention wrote over
a cache get the run-time key count position + S (int32 [1]), so that rows past it (not written
yet in this sequence) are neither attended nor read, and their causal rule counts from it.

The cache is sound only where nothing else reads it: a node that reads a cache other than its
write and the K and V of an attention (an attention that did not fuse), one that still reads
what the graph computed from the past's length (a mask fuse_attention did not take as causal,
repeat_kv's shapes outside an attention), or an attention with a mask over the cache, is
refused, naming the node.

Runs after fuse_attention and before apply_precision.
"""
from __future__ import annotations

import numpy as np

from ..errors import CompileError
from ..ir import Graph, Node, Value

FIX = ("vkc bounds a growing cache's reads only in the attention it fuses (passes/fuse_attention.py: "
       "MatMul, scale, causal mask, Softmax, MatMul, as transformers' eager and sdpa attention export)")


def bound_cache_reads(graph: Graph) -> Graph:
    growing = graph.growing
    if growing is None:
        return graph
    for node in graph.nodes:
        for v in node.inputs:
            if v is not None and id(v) in growing.past_dependent:
                raise CompileError(f"{node.op_type} '{node.name}' reads '{v.name}' ({growing.past_dependent[id(v)]}, "
                                   f"computed from the past's length) that no attention took in; {FIX}.")
    caches = {id(c.root()): c for c in growing.caches}
    counts = None
    for node in list(graph.nodes):
        reads = [i for i, v in enumerate(node.inputs) if v is not None and id(v.root()) in caches]
        if not reads or (node.op_type == "vkc.TensorScatter" and reads == [0] and node.outputs[0] in growing.caches):
            continue
        cache = caches[id(node.inputs[reads[0]].root())]
        if node.op_type != "vkc.Attention" or not set(reads) <= {1, 2}:
            raise CompileError(f"{node.op_type} '{node.name}' reads the cache '{cache.name}' outside an attention "
                               f"over it; {FIX}.")
        a = node.attrs
        if node.input(3) is not None or node.input(4) is not None:
            raise CompileError(f"Attention '{node.name}' reads the cache '{cache.name}' with a mask or key counts of "
                               f"its own; {FIX}.")
        for i, what in ((1, "k"), (2, "v")):
            _check_rows(node, node.inputs[i], a["layouts"][what], growing.capacity, a.get("parts", {}).get(what))
        if a["dims"][2] != growing.rows:
            raise CompileError(f"Attention '{node.name}': {a['dims'][2]} query rows over the cache '{cache.name}', "
                               f"not the run's {growing.rows}; {FIX}.")
        if counts is None:
            counts = _key_counts(graph, growing)
        node.inputs = [*node.inputs[:3], None, counts]
    graph.relink()
    return graph


def _check_rows(node: Node, kv: Value, layout, capacity: int, parts) -> None:
    """K or V is the whole cache [1, heads, N, size], its keys the cache's rows."""
    root = kv.root()
    offset, strides = layout
    b, heads, rows, size = root.shape
    if kv.root_offset() or offset or rows != capacity or node.attrs["dims"][3] != capacity or \
            strides[2] != size or strides[3] != 1 or parts:
        raise CompileError(f"Attention '{node.name}' reads the cache '{root.name}' in another layout than its "
                           f"{capacity} rows of keys; {FIX}.")


def _key_counts(graph: Graph, growing) -> Value:
    """position + S as int32 [1]: the cache rows filled once this run has written its own."""
    rows = Value("cache/rows", np.dtype(np.int64), (), data=np.array(growing.rows, np.int64))
    filled = Value("cache/filled", np.dtype(np.int64), (1,))
    counts = Value("cache/key_counts", np.dtype(np.int32), (1,))
    graph.nodes[:0] = [Node("Add", "cache/filled", [growing.position, rows], [filled],
                            sources=["cache rows filled: position + S"]),
                       Node("Cast", "cache/key_counts", [filled], [counts], {"to": 6},
                            sources=["cache rows filled: position + S"])]
    return counts
