"""A node whose every result holds no element (an empty Slice: what Phi-3's export leaves of a
head it rotates whole) computes nothing: its results become empty constants and the node goes,
so that no later pass counts it as a reader of its inputs (merge_projections merges Phi-3's
q, k and v products only where their readers read columns in place). A graph output stays
computed, as the graph declares it.

Runs on ONNX nodes, after make_views and before slice_products.
"""
from __future__ import annotations

import numpy as np

from ..ir import Graph


def drop_empty_results(graph: Graph) -> Graph:
    kept = []
    for node in graph.nodes:
        outs = [v for v in node.outputs if v is not None]
        if not outs or any(v.shape is None or v.dtype is None or 0 not in tuple(v.shape) or graph.is_output(v)
                           for v in outs):
            kept.append(node)
            continue
        for v in outs:
            v.data = np.zeros(v.shape, v.dtype)
    if len(kept) < len(graph.nodes):
        graph.nodes = kept
        graph.relink()
    return graph
