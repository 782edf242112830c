"""Shape arithmetic shared by passes and lowering: broadcasting strides, dim collapsing."""
from __future__ import annotations

import numpy as np


def contiguous_strides(shape) -> list[int]:
    strides, acc = [], 1
    for d in reversed(shape):
        strides.append(acc)
        acc *= d
    return strides[::-1]


def broadcast_strides(shape, out_shape, strides=None) -> list[int] | None:
    """Element strides of `shape` read as if broadcast to `out_shape` (0 on broadcast dims),
    or None when numpy broadcasting does not allow it; `strides`: the shape's own, where they
    are not the contiguous ones (a transposed read: transposed_read)."""
    if len(shape) > len(out_shape):
        return None
    padded = [1] * (len(out_shape) - len(shape)) + list(shape)
    strides = [0] * (len(out_shape) - len(shape)) + list(strides) if strides is not None else contiguous_strides(padded)
    result = []
    for d, o, s in zip(padded, out_shape, strides):
        if d == o:
            result.append(s if o != 1 else 0)
        elif d == 1:
            result.append(0)
        else:
            return None
    return result


def collapse_dims(out_shape, stride_lists) -> tuple[list[int], list[list[int]]]:
    """Merge adjacent output dims wherever every operand walks them as one flat dim, so kernels
    index with the fewest divisions. Size-1 dims are dropped."""
    dims = [d for d in out_shape if d != 1]
    keep = [i for i, d in enumerate(out_shape) if d != 1]
    strides = [[s[i] for i in keep] for s in stride_lists]
    if not dims:
        return [1], [[0] for _ in stride_lists]
    out_dims, out_strides = [dims[0]], [[s[0]] for s in strides]
    for i in range(1, len(dims)):
        if all(o[-1] == s[i] * dims[i] for o, s in zip(out_strides, strides)):
            out_dims[-1] *= dims[i]
            for o, s in zip(out_strides, strides):
                o[-1] = s[i]
        else:
            out_dims.append(dims[i])
            for o, s in zip(out_strides, strides):
                o.append(s[i])
    return out_dims, out_strides


def prod(xs) -> int:
    return int(np.prod(list(xs), dtype=np.int64))


def merge_dims(dims) -> list[tuple[int, int]]:
    """(size, stride) pairs with adjacent ones that walk memory as one flat dim merged (contiguous
    runs, and runs of broadcast stride-0 dims) and size-1 dims dropped."""
    merged: list[tuple[int, int]] = []
    for size, stride in dims:
        if size == 1:
            continue
        if merged and merged[-1][1] == stride * size:
            merged[-1] = (merged[-1][0] * size, stride)
        else:
            merged.append((size, stride))
    return merged


def unpermuted(values, perm) -> list:
    """Per-dim `values` of a tensor permuted by perm (its dim i is dim perm[i] of the original),
    in the original's dim order: a permuted store's logical shape, or strides mapped back."""
    return [values[list(perm).index(j)] for j in range(len(perm))]


def transposed_read(shape, perm) -> tuple[list[int], list[int]]:
    """(the shape, the strides) of a tensor of `shape` read as Transpose(perm) of it, in place."""
    own = contiguous_strides(shape)
    return [shape[p] for p in perm], [own[p] for p in perm]
