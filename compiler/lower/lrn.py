"""LRN (AlexNet, GoogLeNet v1): normalization across neighbouring channels."""
from __future__ import annotations

from ..dtypes import kernel_types
from ..errors import CompileError
from ..shapes import prod
from .kernel import Kernel, grid_1d, register


@register("LRN")
def lower_lrn(node, target):
    x, out = node.inputs[0], node.outputs[0]
    if len(x.shape) < 3:
        raise CompileError(f"LRN '{node.name}' needs an [N, C, ...] input, got {list(x.shape)}.")
    size = int(node.attrs["size"])
    spec = [("TOTAL", "int32", x.size), ("C", "int32", x.shape[1]),
            ("HW", "int32", prod(x.shape[2:])), ("SIZE", "int32", size),
            ("LO", "int32", (size - 1) // 2), ("HI", "int32", size - 1 - (size - 1) // 2),
            ("ALPHA", "float32", float(node.attrs.get("alpha", 1e-4))),
            ("BETA", "float32", float(node.attrs.get("beta", 0.75))),
            ("BIAS", "float32", float(node.attrs.get("bias", 1.0)))]
    local = target.elementwise_local
    return [Kernel("lrn", dict(LOCAL=local, **kernel_types(out)), spec, [x, out], writes=[1],
                   groups=grid_1d(x.size, local), local_size=(local, 1, 1), nodes=node.sources,
                   flops=x.size * (2 * size + 4))]
