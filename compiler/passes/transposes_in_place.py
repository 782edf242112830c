"""Transposes that cost no copy: the kernel on one side of a Transpose moves its elements itself.

- read_transposes_in_place: a Transpose that one kernel alone reads, where that kernel can read
  its input through the permutation (its op declares `reads_transposed`: an elementwise
  expression's operands are read at strides over the output's coordinates anyway), goes; the
  reader takes the Transpose's input and the permutation (`input_perms`).
- store_transposes_in_producers: a Transpose that alone reads its input, where the input's
  producer can store its result permuted (its op declares `stores_transposed`: a depthwise
  convolution storing channels-last), goes; the producer writes the Transpose's output
  (`output_perm`).

ConvNeXt's blocks have one of each: the depthwise convolution's NCHW result permuted to
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


def _without(graph: Graph, gone: list) -> Graph:
    if gone:
        graph.nodes = [n for n in graph.nodes if not any(n is t for t in gone)]
        graph.relink()
    return graph
