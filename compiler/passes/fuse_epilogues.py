"""Epilogue fusion: an elementwise expression that reads only a Conv/Gemm/MatMul result (plus
biases, per-channel tensors or same-shape residuals) is rendered into that kernel's store."""
from __future__ import annotations

import numpy as np

from .. import expr as E
from ..epilogue_operands import epilogue_strides
from ..ir import Graph, Node

ANCHOR_KIND = {"Conv": "conv", "Gemm": "matmul", "MatMul": "matmul"}
# The anchors' kernels read epilogue operands and store in their T; float16 (the precision pass)
# computes the expression in float32 and rounds once, at the store.
EPILOGUE_DTYPES = (np.dtype(np.float32), np.dtype(np.float16))


def fuse_epilogues(graph: Graph) -> Graph:
    for anchor in list(graph.nodes):
        kind = ANCHOR_KIND.get(anchor.op_type)
        dtype = np.dtype(anchor.outputs[0].dtype)
        if kind is None or dtype not in EPILOGUE_DTYPES:
            continue
        if anchor.op_type == "MatMul" and any(len(v.shape) < 2 for v in anchor.inputs):
            continue  # a vector product's output drops a dim the epilogue indexes by
        while True:
            out = anchor.outputs[0]
            if len(out.consumers) != 1 or not graph.used_only_by(out, out.consumers[0]):
                break
            ew = out.consumers[0]
            if ew.op_type != "vkc.Elementwise" or tuple(ew.outputs[0].shape) != tuple(out.shape):
                break
            if any(np.dtype(v.dtype) != dtype for v in [*ew.inputs, *ew.outputs]):
                break  # epilogues read their operands in the kernel's T (a Pow's exponent may not be)
            if E.needs_int64(ew.attrs["expr"]) or E.needs_low_precision(ew.attrs["expr"]):
                # a cast through int64 or a low-precision type: the Conv/Gemm/MatMul templates
                # enable neither 64-bit integers nor include templates/low_precision.glsl
                break
            others = [v for v in ew.inputs if v is not out]
            if any(epilogue_strides(kind, out.shape, v.shape) is None for v in others):
                break
            _absorb(anchor, ew)
            # The fused node runs where the elementwise node ran: its other operands (say the
            # other branch of a residual Add) may be computed after the anchor's old position.
            graph.nodes.remove(anchor)
            graph.nodes[graph.nodes.index(ew)] = anchor
            graph.relink()
    return graph


def _absorb(anchor: Node, ew: Node) -> None:
    out = anchor.outputs[0]
    prev = anchor.attrs.get("epilogue")
    n_own = anchor.attrs.setdefault("n_op_inputs", len(anchor.inputs))
    operands = list(anchor.inputs[n_own:])

    def leaf(t):
        v = ew.inputs[t[1]]
        if v is out:
            return prev if prev is not None else ("acc",)
        for i, o in enumerate(operands):
            if o is v:
                return ("in", i)
        operands.append(v)
        return ("in", len(operands) - 1)

    anchor.attrs["epilogue"] = E.substitute(ew.attrs["expr"], leaf)
    anchor.inputs = anchor.inputs[:n_own] + operands
    anchor.outputs = ew.outputs
    anchor.sources = anchor.sources + ew.sources
