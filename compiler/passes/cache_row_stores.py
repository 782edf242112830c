"""A cache update whose rows one kernel computes (the rotated keys: the rotary embedding's output,
which the KV cache's TensorScatter alone reads, a decode step's row or a prompt's rows read
through their head split) is stored by that kernel into the cache's rows itself: the cache write's dispatch goes, and with it the barrier between
the two. Taken where the update (its op declares `writes_rows`) is written in place
(passes/in_place_scatter.py) and its producer's op declares `stores_rows` and takes this one;
otherwise the update kernel stays. The fused kernel runs after the cache's own producer, if it
has one (a cast of a float32 cache input), so that it writes the rows last.

A cache update that is columns of a packed projection's rows (V's rows, right after Q's and
K's), written in place, is carried into its cache by the kernel that reads the
columns before them and already stores the other cache's rows, where that node's op declares
`carries_rows` and takes it (the rotary embedding of Q and K): V's cache write goes too.

Runs after scatter_in_place.
"""
from __future__ import annotations

from ..ir import Graph
from ..registry import fact
from .split_parts import view_of_all


def store_rows_in_cache(graph: Graph) -> Graph:
    changed = False
    for node in list(graph.nodes):
        rows = fact(node, "writes_rows")
        found = rows(node) if rows is not None else None
        if found is None:
            continue
        update, indices, axis, mode, perm = found
        cache, out, result = node.inputs[0], node.outputs[0], update.root()
        producer = result.producer
        # the update is the producer's result, or a view of all of it (a head split)
        if out.alias_of is not cache or producer is None or not view_of_all(update, result) or \
                not graph.used_only_by(result, node):
            continue
        stores = fact(producer, "stores_rows")
        index = next(i for i, o in enumerate(producer.outputs) if o is result)
        fused = stores(producer, index, update, out, indices, axis, mode, perm) if stores is not None else None
        if fused is None:
            continue
        # The fused node runs where the producer ran, unless the cache is computed after that (a
        # cast of a float32 cache input): then where the update ran, if nothing reads the
        # producer's other results before.
        at, maker = graph.nodes.index(producer), cache.root().producer
        if maker is not None and graph.nodes.index(maker) > at:
            at = graph.nodes.index(node)
            readers = [c for o in producer.outputs if o is not None and o is not result
                       for v in graph.family(o) for c in v.consumers]
            if any(graph.nodes.index(c) < at for c in readers):
                continue
            graph.nodes[at] = fused
            graph.nodes.remove(producer)
        else:
            graph.nodes[at] = fused
            graph.nodes.remove(node)
        changed = True
    if changed:
        graph.relink()
    if _carry_column_rows(graph):
        graph.relink()
    return graph


def _carry_column_rows(graph: Graph) -> bool:
    changed = False
    for node in list(graph.nodes):
        rows = fact(node, "writes_column_rows")
        found = rows(node) if rows is not None else None
        cache, out = node.inputs[0], node.outputs[0]
        if found is None or out.alias_of is not cache:
            continue
        packed, columns, indices, axis, mode, perm = found
        at = graph.nodes.index(node)
        # (links are stale until the relink: a carrier fused already is no longer in the list)
        for carrier in (c for c in packed.consumers if c in graph.nodes):
            carries = fact(carrier, "carries_rows")
            where = graph.nodes.index(carrier)
            if carries is None or where > at or _touched_between(graph, cache, where, at, node):
                continue
            fused = carries(carrier, columns, out, indices, axis, mode, perm)
            if fused is not None:
                graph.nodes[where] = fused
                graph.nodes.remove(node)
                changed = True
                break
    return changed


def _touched_between(graph: Graph, cache, first: int, last: int, writer) -> bool:
    """Whether the cache is made at or after node `first`, or a node between `first` and `last`
    other than its writer reads it: then its write cannot move to `first`."""
    maker = cache.root().producer
    if maker is not None and graph.nodes.index(maker) >= first:
        return True
    return graph.read_between([cache], first, last, besides=writer)
