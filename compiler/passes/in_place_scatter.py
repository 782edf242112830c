"""TensorScatter writes into its cache in place where nothing else reads the cache's bytes: its
output becomes a view of its input, and its kernel writes only the update's rows. A bundle
state's cache (compiler/state.py) is written in place this way, so a decoding step moves only
its new rows. Runs after the precision pass, which may give the cache another dtype's version."""
from __future__ import annotations

from ..ir import Graph, is_onnx


def scatter_in_place(graph: Graph) -> Graph:
    for node in graph.nodes:
        if not is_onnx(node, "TensorScatter"):
            continue
        cache, out = node.inputs[0], node.outputs[0]
        if cache.root().is_constant or cache.dtype != out.dtype or out.alias_of is not None \
                or not graph.used_only_by(cache, node):
            continue
        out.alias_of, out.alias_offset = cache, 0
    return graph
