"""Gather: one constant index is a strided copy (x[:, 3]); anything else reads its indices
(int32 or int64, constant or computed) in templates/gather.comp.j2, moving 32- and 64-bit
elements a word at a time and 8- and 16-bit ones (bool masks, int8) packed, a word of the output
per invocation."""
from __future__ import annotations

import numpy as np

from ..dtypes import element_bits
from ..errors import CompileError
from ..shapes import contiguous_strides, prod
from .kernel import Kernel, buffer_view, grid_1d, register
from .strided_copy import COPIES, element_words, strided_copy


@register("Gather", dtypes=None, float16=True, dtypes_doc=COPIES + "; indices int32, int64")
def lower_gather(node, target):
    x, idx, out = node.inputs[0], node.inputs[1], node.outputs[0]
    axis = node.attrs.get("axis", 0) % len(x.shape)
    A = x.shape[axis]
    if np.dtype(idx.dtype) not in (np.int32, np.int64):
        raise CompileError(f"Gather '{node.name}': indices '{idx.name}' are "
                           f"{np.dtype(idx.dtype).name}; ONNX allows int32 and int64.")
    if idx.is_constant and idx.size == 1:
        i = int(idx.data.reshape(-1)[0])
        i = i + A if i < 0 else i
        if not 0 <= i < A:
            raise CompileError(f"Gather '{node.name}': index {i} is outside axis {axis} of "
                               f"length {A}.")
        strides = contiguous_strides(x.shape)
        return strided_copy(node, target, x, out,
                            strides[:axis] + [0] * len(idx.shape) + strides[axis + 1:],
                            i * strides[axis])
    bits = element_bits(x.dtype)
    if bits < 32:  # packed: each invocation assembles one 32-bit word of the output
        words, per_word = 1, 32 // bits
        total = out.size
        invocations = -(-total // per_word)
    else:
        words, per_word = element_words(node, [x, out]), 1
        total = out.size * words
        invocations = total
    if total == 0:
        return []
    inner = prod(x.shape[axis + 1:]) * words
    spec = [("TOTAL", "int32", total), ("INNER", "int32", inner),
            ("N_IDX", "int32", idx.size), ("A", "int32", A)]
    local = target.elementwise_local
    params = dict(LOCAL=local, idx_words=np.dtype(idx.dtype).itemsize // 4, bits=min(bits, 32))
    return [Kernel("gather", params, spec, [buffer_view(x), idx, buffer_view(out)], writes=[2],
                   groups=grid_1d(invocations, local), local_size=(local, 1, 1),
                   nodes=node.sources)]
