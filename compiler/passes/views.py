"""Reshape, Flatten, Squeeze, Unsqueeze, Identity and Dropout become views: no kernel, the
output aliases its input's bytes."""
from __future__ import annotations

from ..errors import CompileError
from ..ir import Graph

VIEW_OPS = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout"}


def make_views(graph: Graph) -> Graph:
    kept = []
    for node in graph.nodes:
        if node.op_type not in VIEW_OPS or node.domain not in ("", "ai.onnx"):
            kept.append(node)
            continue
        if node.op_type == "Dropout" and len(node.outputs) > 1 and \
                (node.outputs[1].consumers or graph.is_output(node.outputs[1])):
            raise CompileError(f"Dropout '{node.name}': its mask output is used, but at "
                               "inference Dropout is an identity and has no mask to give.")
        src, out = node.inputs[0], node.outputs[0]
        if out.shape is None or src.shape is None:
            raise CompileError(f"{node.op_type} '{node.name}' has no static output shape.")
        out.alias_of = src
    graph.nodes = kept
    graph.relink()
    return graph
