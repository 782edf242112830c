"""Transposes that cost no copy: the kernel on one side of a Transpose moves its elements itself.

- read_transposes_in_place: a Transpose that one kernel alone reads, where that kernel can read
  its input through the permutation (its op declares `reads_transposed`: an elementwise
  expression's operands are read at strides over the output's coordinates anyway), goes; the
  reader takes the Transpose's input and the permutation (`input_perms`).
- store_transposes_in_producers: a Transpose that alone reads its input, where the input's
  producer can store its result permuted (its op declares `stores_transposed`: a depthwise
  convolution storing channels-last), goes; the producer writes the Transpose's output
  (`output_perm`).

- normalize_across_transposes: a normalization of the last axis between a Transpose that moves
  an axis last and the Transpose that moves it back (ConvNeXt's NCHW LayerNorm in its stem and
  downsampling layers), where its op can normalize an axis in place (`normalizes_axis_in_place`),
  normalizes that axis of the first Transpose's input: both Transposes go (`normalized_axis`).

- take_transposes_into_layouts: a Transpose that one node alone reads, where that node's op
  reads the input at strides of its own (`reads_permuted`: attention's Q, K and V, a cache
  write's update), goes into its layout; one that alone reads a result whose op writes it at
  strides (`stores_permuted`: attention's output), into its store; and a node whose op commutes
  with the Transpose (`before_transpose`: a rotary embedding of a head split, per token and
  head) computes on the Transpose's input, the Transpose moving after it to the next reader. A
  prompt's head split of Q, K and V and its merge after attention cost no copy, and Q's, K's and
  V's projections, read only by rotary embeddings and cache writes in place, merge
  (passes/merge_projections.py) as a decode step's do, where the split of one token is a view.

ConvNeXt's blocks have one of each of the first two: the depthwise convolution's NCHW result permuted to
channels-last for the LayerNorm and the Linears, whose result is permuted back to NCHW for the
layer scale and the residual add (which fuse_epilogues then takes into the second Linear's store,
stored permuted). read_transposes_in_place runs once the elementwise chains are fused, before
fuse_epilogues; store_transposes_in_producers once the epilogues are (producers are final);
take_transposes_into_layouts on ONNX nodes, once Transposes that move nothing are views, before
merge_projections."""
from __future__ import annotations

from ..ir import Graph, Node, is_onnx
from ..registry import fact


def _perm(t) -> list[int]:
    return [int(p) for p in t.attrs.get("perm", range(len(t.inputs[0].shape))[::-1])]


def _copying_transpose(node) -> bool:
    """A Transpose left a copy (one that moves nothing became a view before)."""
    return is_onnx(node, "Transpose") and node.outputs[0].alias_of is None and not node.inputs[0].is_constant


def read_transposes_in_place(graph: Graph) -> Graph:
    gone = []
    for node in graph.nodes:
        if not fact(node, "reads_transposed"):
            continue
        own = node.attrs.get("n_op_inputs", len(node.inputs))
        for j, v in enumerate(node.inputs[:own]):
            t = v.producer if v is not None else None
            if not _copying_transpose(t) or sum(x is v for x in node.inputs) != 1 or not graph.used_only_by(v, node):
                continue
            node.attrs = {**node.attrs, "input_perms": {**node.attrs.get("input_perms", {}), j: _perm(t)}}
            node.inputs[j] = t.inputs[0]
            gone.append(t)
    return _without(graph, gone)


def store_transposes_in_producers(graph: Graph) -> Graph:
    gone = []
    for t in graph.nodes:
        if not _copying_transpose(t):
            continue
        v, producer = t.inputs[0], t.inputs[0].producer
        stores = fact(producer, "stores_transposed") if producer is not None else None
        if stores is None or v.alias_of is not None or "output_perm" in producer.attrs or \
                not graph.used_only_by(v, t) or not stores(producer, _perm(t)):
            continue
        producer.attrs = {**producer.attrs, "output_perm": _perm(t)}
        producer.outputs[producer.outputs.index(v)] = t.outputs[0]
        gone.append(t)
    return _without(graph, gone)


def normalize_across_transposes(graph: Graph) -> Graph:
    gone = []
    for node in graph.nodes:
        in_place = fact(node, "normalizes_axis_in_place")
        first = node.inputs[0].producer if in_place is not None and node.inputs[0] is not None else None
        y = node.outputs[0]
        second = y.consumers[0] if len(y.consumers) == 1 and y not in graph.outputs else None
        if not _copying_transpose(first) or not _copying_transpose(second) or not graph.used_only_by(first.outputs[0], node):
            continue
        perm, back = _perm(first), _perm(second)
        axis = perm[-1]
        # the first moves one axis last and keeps the others in order; the second undoes it
        if perm != [a for a in range(len(perm)) if a != axis] + [axis] or \
                [perm[b] for b in back] != list(range(len(perm))) or not in_place(node, axis):
            continue
        node.attrs = {**node.attrs, "normalized_axis": axis}
        node.inputs[0], node.outputs[0] = first.inputs[0], second.outputs[0]
        gone += [first, second]
    return _without(graph, gone)


def take_transposes_into_layouts(graph: Graph) -> Graph:
    # a rotary embedding moved before its Transpose hands it to the next reader: again until none moves
    changed = True
    while changed:
        changed = False
        for t in [n for n in graph.nodes if _copying_transpose(n)]:
            if _take(graph, t):
                graph.relink()
                changed = True
    return graph


def _take(graph: Graph, t) -> bool:
    """Whether the Transpose t went into its reader's or its producer's layout, or moved after
    its reader."""
    x, y, perm = t.inputs[0], t.outputs[0], _perm(t)
    reader = y.consumers[0] if len(y.consumers) == 1 else None
    if reader is not None and graph.used_only_by(y, reader) and sum(v is y for v in reader.inputs) == 1:
        slot = reader.inputs.index(y)
        reads, before = fact(reader, "reads_permuted"), fact(reader, "before_transpose")
        taken = reads(reader, slot, perm, x) if reads is not None else None
        if taken is not None:
            return _replace(graph, [t, reader], [taken])
        moved = before(reader, perm, x) if before is not None and slot == 0 else None
        if moved is not None:
            node, result = moved
            after = Node("Transpose", t.name, [result], [reader.outputs[0]], {"perm": perm}, sources=t.sources)
            return _replace(graph, [t, reader], [node, after])
    producer = x.producer
    stores = fact(producer, "stores_permuted") if producer is not None else None
    if stores is not None and x.alias_of is None and producer.outputs[0] is x and graph.used_only_by(x, t):
        taken = stores(producer, perm, y)
        if taken is not None:
            return _replace(graph, [producer, t], [taken])
    return False


def _replace(graph: Graph, old: list, new: list) -> bool:
    """The nodes `old` replaced by `new` where the last of them stood (all they read is computed
    by then)."""
    at = max(i for i, n in enumerate(graph.nodes) if any(n is o for o in old))
    keep = [not any(n is o for o in old) for n in graph.nodes]
    graph.nodes = [n for n, k in zip(graph.nodes[:at], keep) if k] + new + graph.nodes[at + 1:]
    return True


def _without(graph: Graph, gone: list) -> Graph:
    if gone:
        graph.nodes = [n for n in graph.nodes if not any(n is t for t in gone)]
        graph.relink()
    return graph
