"""Every graph output gets arena bytes of its own: an output that is a graph input, a constant,
or a view of either is materialized by an identity copy (but a state's output written in place
into its input's bytes, compiler/state.py: those bytes are the state's)."""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Node, Value


def materialize_outputs(graph: Graph) -> Graph:
    inputs = {id(v) for v in graph.inputs}
    in_place = {id(o) for i, o in graph.state if o.root() is i}
    for i, out in enumerate(graph.outputs):
        root = out.root()
        if id(out) in in_place or not (root.is_constant or id(root) in inputs):
            continue
        fresh = Value(out.name, out.dtype, out.shape)
        # float32 copies are elementwise kernels (and fuse like them); other dtypes (a Shape
        # output is int64) are copied word by word.
        if np.dtype(out.dtype) == np.float32:
            op, attrs = "vkc.Elementwise", {"expr": ("in", 0)}
        else:
            op, attrs = "vkc.Copy", {}
        graph.nodes.append(Node(op, f"{out.name}/vkc_copy", [out], [fresh], attrs,
                                sources=[f"copy to output {out.name}"]))
        graph.outputs[i] = fresh
        graph.state = [(si, fresh if so is out else so) for si, so in graph.state]
    graph.relink()
    return graph


def remove_dead_nodes(graph: Graph) -> Graph:
    """Drop nodes whose outputs nothing reads (after folding and fusion)."""
    live = {id(v.root()) for v in graph.outputs} | {id(v) for v in graph.outputs}
    kept = []
    for node in reversed(graph.nodes):
        if any(id(o) in live for o in node.outputs):
            kept.append(node)
            for v in node.inputs:
                if v is not None:
                    live.add(id(v))
                    live.add(id(v.root()))
    graph.nodes = kept[::-1]
    graph.relink()
    return graph
