"""Lowering: IR nodes -> Kernels. Every module of this package is an op family whose rules
register themselves (compiler.registry); importing the package imports them all, so a new family
needs no list to join."""
from __future__ import annotations

import importlib
import pkgutil

from ..registry import lower_node
from .concat import write_slices_with_shifted_stores
from .slice import read_slices_with_shifted_loads
from .counters import zero_counters
from .kernel import Kernel

for _info in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_info.name}")


def lower_graph(graph, target) -> list[Kernel]:
    kernels = [k for node in graph.nodes for k in lower_node(node, target, graph.opset)]
    kernels = read_slices_with_shifted_loads(write_slices_with_shifted_stores(kernels, graph), graph)
    return zero_counters(kernels, target)
