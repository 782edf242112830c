"""A decode step's rotary embedding whose kernel stores the new K row and carries the new V row
into their caches (passes/cache_row_stores.py) is folded into the attention that reads its
results: the attention kernel reads Q from the packed projection and rotates it as it loads it,
takes this step's K and V rows from the projection too (K rotated) instead of from the caches,
and stores them into the caches' rows itself. The rotary dispatch goes, and with it a barrier
in every layer. Taken where the rotary's op declares `decode_rotation` and describes the node,
the attention's op declares `absorbs_rotary` and takes it, the rotated Q is read by the
attention alone, and no node between the two reads the caches. Where the attention's kernel
cannot rotate (a texel profile's, the cooperative-matrix one), its lowering runs the two kernels
as before.

Runs after store_rows_in_cache.
"""
from __future__ import annotations

from ..ir import Graph
from ..registry import fact


def rotate_in_attention(graph: Graph) -> Graph:
    changed = False
    for node in list(graph.nodes):
        absorbs = fact(node, "absorbs_rotary")
        q = node.inputs[0] if node.inputs else None
        rotary = q.producer if absorbs is not None and q is not None else None
        describe = fact(rotary, "decode_rotation") if rotary is not None else None
        rotation = describe(rotary) if describe is not None else None
        if rotation is None or q is not rotary.outputs[0] or not graph.used_only_by(q, node):
            continue
        first, at = graph.nodes.index(rotary), graph.nodes.index(node)
        if graph.read_between(rotary.outputs[1:], first, at):
            continue
        fused = absorbs(node, rotary, rotation, graph.opset)
        if fused is None:
            continue
        graph.nodes[at] = fused
        graph.nodes.remove(rotary)
        changed = True
    if changed:
        graph.relink()
    return graph
