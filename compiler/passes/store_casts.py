"""A normalization or attention whose result only a Cast to float16 reads stores float16 itself:
under `--precision fp16-matmul` the products after each LayerNorm and attention take float16
inputs, and the Cast between them was a dispatch of its own. The kernel computes in float32
either way and rounds once, at the store (templates/layernorm.comp.j2's TY,
attention_tiled.comp.j2's TO).

So does a product of float16 operands that stores float32 (fuse_epilogues widened it: BERT's FFN
up-projection with its bias and GELU) when only the next product's Cast reads it: its kernel reads
each epilogue operand (a bias, a residual) in the operand's own type either way
(lower/store_expression.py's operand_types).

A fused LayerNorm (vkc.LayerNorm) whose float32 result the next residual sum reads as well as the
Cast into a product (BERT's post-LN blocks) writes it twice instead: float32 and, as its output
Y2, float16 in place of the Cast's result."""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Value, written_in_shape
from ..registry import fact

F16, F32 = np.dtype(np.float16), np.dtype(np.float32)


def absorb_store_casts(graph: Graph) -> Graph:
    for node in list(graph.nodes):
        if _second_float16_output(graph, node):
            continue
        y = node.outputs[0] if fact(node, "store_cast_absorbing") or _widened_product(node) else None
        found = graph.sole_reader(y) if y is not None and y.dtype == F32 else None
        if found is None or not _float16_cast_of_its_input(found[0]):
            continue
        cast, read = found
        out = cast.outputs[0]
        # Through a reshape (GPT-2's [B, S, E] -> [B*S, E]) the Cast's output views what Y becomes.
        node.outputs[0] = out if read is y else written_in_shape(out, y.shape)
        _drop_cast(graph, node, cast)
    return graph


def _drop_cast(graph: Graph, node, cast) -> None:
    """The Cast's work is `node`'s store now."""
    node.sources = node.sources + cast.sources
    graph.nodes.remove(cast)
    graph.relink()


def _second_float16_output(graph: Graph, node) -> bool:
    """A vkc.LayerNorm's float32 Y read by other nodes and by a Cast of it to float16: the Cast's
    result becomes the normalization's output Y2."""
    if node.op_type != "vkc.LayerNorm" or "Y2" in node.attrs["outputs"]:
        return False
    y = node.outputs[node.attrs["outputs"].index("Y")]
    if y.dtype != F32 or len(y.consumers) < 2:
        return False
    cast = next((c for c in y.consumers if _float16_cast_of_its_input(c) and c.inputs[0] is y), None)
    if cast is None or graph.is_output(cast.outputs[0]):
        return False
    node.outputs = node.outputs + [cast.outputs[0]]
    node.attrs = dict(node.attrs, outputs=tuple(node.attrs["outputs"]) + ("Y2",))
    _drop_cast(graph, node, cast)
    return True


def _matmul(node) -> bool:
    """A MatMul or Gemm (a product whose kernel reads float16 operands and may store float32)."""
    return fact(node, "product") == "matmul"


def _widened_product(node) -> bool:
    """A MatMul or Gemm of float16 operands storing float32 whose other inputs (a Gemm's bias, its
    epilogue's operands) are floats, each read in its own type."""
    return (_matmul(node) and all(v.dtype == F16 for v in node.inputs[:2])
            and all(v is None or v.dtype in (F16, F32) for v in node.inputs[2:]))


def _float16_cast_of_its_input(node) -> bool:
    """An elementwise node that only converts its one input to float16."""
    expr = node.attrs.get("expr") if node.op_type == "vkc.Elementwise" else None
    return (len(node.inputs) == 1 and node.outputs[0].dtype == F16 and isinstance(expr, tuple)
            and expr[:3] == ("cast", ("in", 0), "float16"))
