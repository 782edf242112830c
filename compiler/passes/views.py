"""Reshape, Flatten, Squeeze, Unsqueeze, a Transpose that moves only size-1 dims, and the no-ops
fold_constants leaves because their output is a graph output (Identity, Dropout, a Cast to the
dtype its input has) become views: no kernel, the output aliases its input's bytes."""
from __future__ import annotations

import numpy as np

from ..errors import CompileError
from ..ir import Graph, Node, is_onnx
from ..noops import always, same_dtype, same_shape
from ..registry import FLOAT32, declare
from ..rows import reshape_rows, unary_rows

VIEW_OPS = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout"}
for _op in ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"):
    declare(_op, handled_by="view (no kernel)", module=__name__,
            constant_inputs=(1,) if _op in ("Reshape", "Squeeze", "Unsqueeze") else (),
            limits="shape or axes computed at run time",
            noop=always if _op == "Identity" else same_shape,
            row_wise=unary_rows if _op == "Identity" else reshape_rows, reshapes=_op != "Identity")


def _same_dtype_cast(node: Node) -> bool:
    """A Cast to its input's dtype that fold_constants left because it is a graph output."""
    return is_onnx(node, "Cast", "CastLike") and same_dtype(node)


def _reshaping_transpose(node: Node) -> bool:
    """A Transpose that keeps the order of the dims longer than 1 (batch 1's (1, S, E) -> (S, 1, E)
    in nn.MultiheadAttention): its output's bytes are its input's, in the same order."""
    shape = node.inputs[0].shape if node.inputs else None
    if node.op_type != "Transpose" or node.domain not in ("", "ai.onnx") or shape is None:
        return False
    perm = node.attrs.get("perm", range(len(shape) - 1, -1, -1))
    moved = [p for p in perm if shape[p] != 1]
    return moved == sorted(moved)


def make_views(graph: Graph) -> Graph:
    kept = []
    for node in graph.nodes:
        if not (_same_dtype_cast(node) or _reshaping_transpose(node)) and (
                node.op_type not in VIEW_OPS or node.domain not in ("", "ai.onnx")):
            kept.append(node)
            continue
        src, out = node.inputs[0], node.outputs[0]
        if node.op_type == "Dropout":
            _inference_dropout(node)
        if out.shape is None or src.shape is None:
            raise CompileError(f"{node.op_type} '{node.name}' has no static output shape.")
        if out.size != src.size:  # a shape hard-coded for other inputs (a Reshape to batch 1)
            raise CompileError(
                f"{node.op_type} '{node.name}' turns '{src.name}' of shape {list(src.shape)} ({src.size} "
                f"elements) into {list(out.shape)} ({out.size}): its target shape is fixed in the graph, "
                "so the model cannot run at these input shapes (onnxruntime fails there too); compile "
                "for the shapes it was exported for, or re-export it with that dim dynamic.")
        out.alias_of = src
    graph.nodes = kept
    graph.relink()
    return graph


def _inference_dropout(node: Node) -> bool:
    """Dropout is an identity unless training_mode is on with a ratio above 0 (refused here); its
    mask is then all true (a constant)."""
    ratio, training = node.input(1), node.input(2)
    if node.inputs[0].shape is None:
        return False
    if training is not None:
        if not training.is_constant:
            raise CompileError(f"Dropout '{node.name}': training_mode comes from the computation "
                               f"('{training.name}'); vkc compiles inference graphs and needs it "
                               "constant false.")
        if bool(training.data.reshape(-1)[0]):
            if ratio is not None and not ratio.is_constant:
                raise CompileError(f"Dropout '{node.name}': in training mode its ratio must be "
                                   "constant.")
            if ratio is None or float(ratio.data.reshape(-1)[0]) != 0.0:
                raise CompileError(f"Dropout '{node.name}' runs in training mode, which zeroes "
                                   "random elements; vkc compiles inference graphs.")
    if len(node.outputs) > 1:
        mask = node.outputs[1]
        mask.data = np.ones(node.inputs[0].shape, dtype=np.bool_)
        mask.dtype, mask.shape = mask.data.dtype, tuple(mask.data.shape)
    return True


declare("Dropout", handled_by="view (no kernel)", module=__name__, dtypes=FLOAT32,
        constant_inputs=(1, 2), limits="training_mode=1 with ratio > 0", noop=_inference_dropout)
