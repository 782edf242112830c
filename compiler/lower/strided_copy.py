"""The strided copy that Transpose, Expand, Slice, Split, Gather and Reduce share: every output
element reads one input element at an affine offset of its coordinates, moved bit for bit."""
from __future__ import annotations

import numpy as np

from ..dtypes import element_bits
from ..errors import CompileError
from ..shapes import collapse_dims, contiguous_strides, prod
from .kernel import Kernel, buffer_view, grid_1d

# The dtypes the data-movement kernels take, as docs/SUPPORT.md states them: strided copies move
# any element bit for bit, gathers and pads 32- and 64-bit ones (element_words).
COPIES = "any (2- to 64-bit elements)"
MOVES = "float32, int32, int64 (any 32- or 64-bit type)"


def element_words(node, values) -> int:
    """32-bit words per element of tensors a data-movement kernel copies bit for bit."""
    sizes = {element_bits(v.dtype) for v in values if v is not None}
    if len(sizes) != 1 or next(iter(sizes)) not in (32, 64):
        names = ", ".join(f"'{v.name}' ({np.dtype(v.dtype).name})" for v in values if v is not None)
        raise CompileError(f"{node.op_type} '{node.name}' moves {names}; vkc's data-movement "
                           "kernels handle 32- and 64-bit elements only.")
    return next(iter(sizes)) // 32


def strided_copy(node, target, src, dst, src_strides, offset: int = 0) -> list[Kernel]:
    """Kernels filling `dst` (contiguous) from `src` read at element strides `src_strides`
    (one per dim of dst; 0 broadcasts, negative walks backwards) from element `offset`.
    2- to 16-bit elements move packed: each invocation assembles one 32-bit word of dst."""
    sizes = {element_bits(v.dtype) for v in (src, dst)}
    bits = min(sizes) if len(sizes) == 1 and min(sizes) < 32 else 32
    words = 1 if bits < 32 else element_words(node, [src, dst])
    shape, strides = list(dst.shape), list(src_strides)
    if words == 2:
        shape, strides, offset = shape + [2], [2 * s for s in strides] + [1], 2 * offset
    total = prod(shape)
    if total == 0:
        return []
    dims, (_, in_c) = collapse_dims(shape, [contiguous_strides(shape), strides])
    spec = [("TOTAL", "int32", total)]
    spec += [(f"D{d}", "int32", dims[d]) for d in range(1, len(dims))]
    spec += [(f"S{d}", "int32", in_c[d]) for d in range(len(dims))]
    spec += [("OFFSET", "int32", offset)]
    local = target.elementwise_local
    per_word = 32 // bits
    return [Kernel("strided_copy", dict(LOCAL=local, rank=len(dims), bits=bits), spec,
                   [buffer_view(src), buffer_view(dst)], writes=[1],
                   groups=grid_1d(-(-total // per_word), local), local_size=(local, 1, 1),
                   nodes=node.sources)]
