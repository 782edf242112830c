"""GatherElements (torch.gather): Y has the indices' shape; Y[..., j, ...] = X[..., IDX[..., j,
...], ...] along one axis. Indices int32 or int64, computed or constant, negative ones counting
from the end (templates/gather_elements.comp.j2)."""
from __future__ import annotations

import numpy as np

from ..errors import CompileError
from ..shapes import contiguous_strides
from .kernel import Kernel, grid_1d, register
from .strided_copy import MOVES, element_words


def _evaluate(node, data: np.ndarray, indices: np.ndarray) -> list[np.ndarray]:
    """GatherElements in numpy, for fold_constants: onnx 1.23's reference goes through np.choose,
    which takes at most 64 choices (numpy's NPY_MAXARGS), and its fallback reads only column 0
    of the indices, so an axis longer than 64 (BERT's 512 token-type ids gathered by position
    ids) fails or comes out wrong. Indices may be shorter than the data outside the axis (the
    rest of the data is not read)."""
    axis = node.attrs.get("axis", 0) % data.ndim
    length = data.shape[axis]
    if indices.size and not (-length <= indices.min() and indices.max() < length):
        raise ValueError(f"an index lies outside axis {axis} of length {length}")
    data = data[tuple(slice(None) if a == axis else slice(0, n) for a, n in enumerate(indices.shape))]
    return [np.take_along_axis(data, np.where(indices < 0, indices + length, indices), axis)]


@register("GatherElements", since=11, dtypes=None, dtypes_doc=MOVES + "; indices int32, int64",
          limits="8- and 16-bit data", evaluate=_evaluate)
def lower_gather_elements(node, target):
    x, idx, out = node.inputs[0], node.inputs[1], node.outputs[0]
    rank = len(x.shape)
    axis = node.attrs.get("axis", 0) % rank
    if np.dtype(idx.dtype) not in (np.int32, np.int64):
        raise CompileError(f"GatherElements '{node.name}': indices '{idx.name}' are "
                           f"{np.dtype(idx.dtype).name}; ONNX allows int32 and int64.")
    if any(i > d for a, (i, d) in enumerate(zip(idx.shape, x.shape)) if a != axis):
        raise CompileError(f"GatherElements '{node.name}': indices {list(idx.shape)} are larger "
                           f"than the data {list(x.shape)} outside axis {axis}.")
    words = element_words(node, [x, out])
    if out.size == 0:
        return []
    # Output coordinates walk the indices' shape; the data is read at its own strides.
    spec = [("TOTAL", "int32", out.size), ("A", "int32", x.shape[axis])]
    spec += [(f"D{d}", "int32", idx.shape[d]) for d in range(1, rank)]
    spec += [(f"S{d}", "int32", s) for d, s in enumerate(contiguous_strides(x.shape))]
    local = target.elementwise_local
    params = dict(LOCAL=local, rank=rank, axis=axis, words=words,
                  idx_words=np.dtype(idx.dtype).itemsize // 4)
    return [Kernel("gather_elements", params, spec, [x, idx, out], writes=[2],
                   groups=grid_1d(out.size, local), local_size=(local, 1, 1), nodes=node.sources)]
