"""InstanceNormalization: each (n, c) of X [N, C, D1, ...] normalized over its spatial dims, then
scaled and shifted by its channel's Scale[c] and B[c] (the feature encoders of hubert, wav2vec2
and wavlm: [N, C, L]). On the LayerNormalization kernel (lower/layernorm.py): rows of the
spatial size, N * C of them, Scale and B read per row.
"""
from __future__ import annotations

from ..errors import CompileError
from ..magnitudes import normalization
from ..registry import FLOATS
from .kernel import register
from .layernorm import layernorm_kernels


@register("InstanceNormalization", since=6, dtypes=FLOATS, limits="an input of rank 2 (no spatial dim)",
          magnitude=normalization(scale=1, bias=2, axis=2))
def lower_instance_norm(node, target):
    x, scale, bias = node.inputs[0], node.inputs[1], node.inputs[2]
    if len(x.shape) < 3:   # as onnxruntime: no spatial dim to normalize over
        raise CompileError(f"InstanceNormalization '{node.name}': input '{x.name}' of shape "
                           f"{list(x.shape)} has no spatial dim (it must be [N, C, D1, ...]).")
    channels = x.shape[1]
    for v in (scale, bias):
        if tuple(v.shape) != (channels,):
            raise CompileError(f"InstanceNormalization '{node.name}': '{v.name}' of shape "
                               f"{list(v.shape)} is not one value per channel ([{channels}]).")
    return layernorm_kernels(node, target, x=x, scale=scale, bias=bias, axis=2,
                             epsilon=node.attrs.get("epsilon", 1e-5), outputs=node.outputs[:1],
                             channels=channels)
