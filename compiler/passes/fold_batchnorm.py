"""Fold inference BatchNormalization into the preceding Conv or Gemm weights; turn any other
BatchNormalization into a per-channel multiply-add that the elementwise pass fuses."""
from __future__ import annotations

import numpy as np

from ..errors import CompileError
from ..ir import Graph, Node, Value, is_onnx
from ..registry import FLOAT32, declare

declare("BatchNormalization", handled_by="folded into Conv/Gemm, else fused elementwise",
        module=__name__, dtypes=FLOAT32, constant_inputs=(1, 2, 3, 4),
        limits="training_mode=1; statistics computed at run time")


def _scale_shift(bn: Node) -> tuple[np.ndarray, np.ndarray]:
    gamma, beta, mean, var = (v.data.astype(np.float64) for v in bn.inputs[1:5])
    scale = gamma / np.sqrt(var + bn.attrs.get("epsilon", 1e-5))
    return scale, beta - mean * scale


def fold_batchnorm(graph: Graph) -> Graph:
    for bn in [n for n in graph.nodes if n.op_type == "BatchNormalization"]:
        if not all(v is not None and v.is_constant for v in bn.inputs[1:5]):
            raise CompileError(f"BatchNormalization '{bn.name}': scale, bias, mean and var must "
                               "be constants (an inference graph); vkc does not train.")
        if len(bn.outputs) > 1 and any(o.consumers or graph.is_output(o) for o in bn.outputs[1:]):
            raise CompileError(f"BatchNormalization '{bn.name}' uses its training outputs.")
        x = bn.inputs[0]
        prod = x.producer
        scale, shift = _scale_shift(bn)
        if (is_onnx(prod, "Conv", "Gemm") and graph.used_only_by(x, bn)
                and prod.inputs[1].is_constant
                and all(v is None or v.is_constant for v in prod.inputs[2:])):
            _fold_into(prod, scale, shift)
            graph.nodes.remove(bn)
            prod.outputs = [bn.outputs[0]]
            prod.sources.extend(bn.sources)
        else:
            _to_affine(bn, scale, shift)
        graph.relink()
    return graph


def _constant(name: str, data: np.ndarray, like: Value) -> Value:
    """A folded constant in the dtype of the value it joins (a float16 Conv keeps float16 weights)."""
    data = np.ascontiguousarray(data.astype(like.dtype))
    return Value(name, data.dtype, tuple(data.shape), data=data)


def _fold_into(prod: Node, scale: np.ndarray, shift: np.ndarray) -> None:
    w = prod.inputs[1].data.astype(np.float64)
    bias = prod.inputs[2].data.astype(np.float64) if prod.input(2) is not None else None
    if prod.op_type == "Conv":
        w = w * scale.reshape(-1, *[1] * (w.ndim - 1))
        bias = (bias if bias is not None else 0.0) * scale + shift
    else:  # Gemm: Y = alpha*A'B' + beta*C, BN acts on the columns n of Y
        w = w * (scale[:, None] if prod.attrs.get("transB", 0) else scale[None, :])
        beta = prod.attrs.get("beta", 1.0)
        c = beta * bias if bias is not None else 0.0
        bias = np.asarray(c * scale + shift)
        prod.attrs["beta"] = 1.0
    weights = prod.inputs[1]
    prod.inputs = [prod.inputs[0], _constant(weights.name + "_bnfold", w, weights),
                   _constant(prod.name + "_bias_bnfold", np.asarray(bias), weights)]


def _to_affine(bn: Node, scale: np.ndarray, shift: np.ndarray) -> None:
    rank = len(bn.inputs[0].shape)
    shape = (-1,) + (1,) * (rank - 2)
    bn.op_type = "vkc.Elementwise"
    bn.attrs = {"expr": ("add", ("mul", ("in", 0), ("in", 1)), ("in", 2))}
    x = bn.inputs[0]
    bn.inputs = [x, _constant(bn.name + "_scale", scale.reshape(shape), x),
                 _constant(bn.name + "_shift", shift.reshape(shape), x)]
    bn.outputs = bn.outputs[:1]
