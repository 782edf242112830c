"""How an operand of a fused epilogue is indexed from a kernel's output coordinates.

Matmul-like kernels see their output as (batch, m, n); convolutions as (image, channel, pixel).
An operand can join the epilogue when it is a linear function of those three coordinates, which
covers biases, per-channel scales, squeeze-excite gates at batch 1 and same-shape residuals.
"""
from __future__ import annotations

from .shapes import broadcast_strides, unpermuted


def epilogue_strides(kind: str, out_shape, operand_shape, perm=None) -> tuple[int, int, int] | None:
    """perm: the operand is given in the coordinates of the output permuted by perm (a product
    that stores its result transposed, passes/fuse_epilogues.py: `epilogue_perms`)."""
    if perm is None:
        strides = broadcast_strides(operand_shape, out_shape)
    else:
        own = broadcast_strides(operand_shape, [out_shape[p] for p in perm])
        strides = None if own is None else unpermuted(own, perm)
    if strides is None or len(out_shape) < 2:
        return None
    if kind == "matmul":
        *batch_dims, _, _ = out_shape
        *batch_strides, sm, sn = strides
        sb = _flat_stride(batch_dims, batch_strides)
    elif kind == "conv":
        _, _, *spatial = out_shape
        sb, sm, *spatial_strides = strides
        sn = _flat_stride(spatial, spatial_strides)
    else:
        raise ValueError(kind)
    return None if sb is None or sn is None else (sb, sm, sn)


def _flat_stride(dims, strides) -> int | None:
    """The stride of the flattened index over `dims`, if the operand walks them as one."""
    live = [(d, s) for d, s in zip(dims, strides) if d != 1]
    if not live:
        return 0
    if all(s == 0 for _, s in live):
        return 0
    flat = live[-1][1]
    expect = flat
    for d, s in reversed(live):
        if s != expect:
            return None
        expect *= d
    return flat


def operand_perm(node, k: int):
    """The permutation fused operand k of `node` (node.inputs[n_op_inputs + k]) is given in, or None."""
    return node.attrs.get("epilogue_perms", {}).get(k)
