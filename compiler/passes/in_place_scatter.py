"""An op that updates a tensor (it declares `updates_in_place`: TensorScatter's cache) writes
into it in place where nothing else reads its bytes: the output becomes a view of the input, and
the kernel writes only the update (lower/tensor_scatter.py skips the copy then). A bundle state's
cache (compiler/state.py) is written in place this way, so a decoding step moves only its new
rows. Runs after the precision pass, which may give the cache another dtype's version."""
from __future__ import annotations

from ..ir import Graph
from ..registry import fact


def scatter_in_place(graph: Graph) -> Graph:
    for node in graph.nodes:
        for out_index, in_index in fact(node, "updates_in_place") or ():
            cache, out = node.inputs[in_index], node.outputs[out_index]
            if cache.root().is_constant or cache.dtype != out.dtype or out.alias_of is not None \
                    or not graph.used_only_by(cache, node):
                continue
            out.alias_of, out.alias_offset = cache, 0
    return graph
