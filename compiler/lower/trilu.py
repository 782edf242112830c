"""Trilu: the upper or lower triangle of the last two dims (diagonal offset k), the rest zero.
Data movement plus zeroing, so any 32- or 64-bit dtype (templates/trilu.comp.j2)."""
from __future__ import annotations

from ..errors import CompileError
from .kernel import Kernel, constant_input, grid_1d, register
from .strided_copy import MOVES, element_words


@register("Trilu", since=14, dtypes=None, dtypes_doc=MOVES, constant_inputs=(1,),
          limits="k computed at run time; 8- and 16-bit data")
def lower_trilu(node, target):
    x, out = node.inputs[0], node.outputs[0]
    if len(x.shape) < 2:
        raise CompileError(f"Trilu '{node.name}': input '{x.name}' has rank {len(x.shape)}; "
                           "ONNX needs at least 2.")
    k = constant_input(node, 1, "the diagonal offset k")
    k = 0 if k is None else int(k.reshape(-1)[0])
    words = element_words(node, [x, out])
    rows, cols = x.shape[-2:]
    # An offset past the matrix keeps all of it or nothing; clamped, it stays an int32.
    k = max(-rows, min(cols, k))
    total = out.size * words
    if total == 0:
        return []
    spec = [("TOTAL", "int32", total), ("ROWS", "int32", rows), ("COLS", "int32", cols),
            ("K", "int32", k)]
    local = target.elementwise_local
    params = dict(LOCAL=local, upper=bool(node.attrs.get("upper", 1)), words=words)
    return [Kernel("trilu", params, spec, [x, out], writes=[1], groups=grid_1d(total, local),
                   local_size=(local, 1, 1), nodes=node.sources)]
