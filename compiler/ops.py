"""Every op vkc handles, found rather than listed: importing this module imports each module of
compiler/lower/ and compiler/passes/, whose declarations fill compiler.registry. `vkc check`,
`vkc compile`, the ONNX backend and docs/SUPPORT.md all ask here, so they cannot disagree."""
from __future__ import annotations

import importlib
import pkgutil

from . import lower, passes
from .registry import constant_inputs, find_rule, is_supported, registered_ops  # noqa: F401


def _import_all(package) -> None:
    for info in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"{package.__name__}.{info.name}")


_import_all(lower)
_import_all(passes)


def unsupported_ops(graph) -> dict[str, list[str]]:
    """{op: [node names]} for every node no declaration covers at the graph's opset."""
    found: dict[str, list[str]] = {}
    for node in graph.nodes:
        if not is_supported(node.op_type, node.domain, graph.opset):
            key = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"
            found.setdefault(key, []).append(node.name)
    return found


def supported_ops() -> list[str]:
    """The ONNX ops vkc compiles (vkc's internal ops left out)."""
    return sorted(op for op in registered_ops() if not op.startswith("vkc."))
