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

ConvNeXt's blocks have one of each of the first two: the depthwise convolution's NCHW result permuted to
channels-last for the LayerNorm and the Linears, whose result is permuted back to NCHW for the
layer scale and the residual add (which fuse_epilogues then takes into the second Linear's store,
stored permuted). read_transposes_in_place runs once the elementwise chains are fused, before
fuse_epilogues; store_transposes_in_producers once the epilogues are (producers are final)."""
from __future__ import annotations

from ..ir import Graph, is_onnx
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


def _without(graph: Graph, gone: list) -> Graph:
    if gone:
        graph.nodes = [n for n in graph.nodes if not any(n is t for t in gone)]
        graph.relink()
    return graph
