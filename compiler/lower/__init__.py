"""Lowering: IR nodes -> Kernels. Importing this package registers every op family."""
from __future__ import annotations

from ..errors import UnsupportedOpsError
from . import (concat, conv, conv_transpose, elementwise, gather, lrn,  # noqa: F401 - registers rules
               matmul, pad, pool, reduce, resize, slice, softmax, transpose)
from .registry import Kernel, find_rule, is_supported, registered_ops


def unsupported_ops(graph) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for node in graph.nodes:
        if not is_supported(node.op_type, node.domain, graph.opset):
            key = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"
            found.setdefault(key, []).append(node.name)
    return found


def lower_graph(graph, target) -> list[Kernel]:
    kernels: list[Kernel] = []
    for node in graph.nodes:
        rule = find_rule(node.op_type, node.domain, graph.opset)
        if rule is None:
            raise UnsupportedOpsError({node.op_type: [node.name]})
        kernels.extend(rule(node, target))
    return kernels
