"""Epilogue fusion: an elementwise expression that reads only a Conv/Gemm/MatMul/MatMulNBits
result (plus biases, per-channel tensors or same-shape residuals) is rendered into that kernel's
store. The expression may read the result through a reshape (GPT-2's export applies its GELU to
the [B, S, 4E] view of a [B*S, 4E] Gemm): the kernel then writes the expression's value in its
own shape, and the expression's output becomes a view of it. It may read the result transposed
(passes/transposes_in_place.py: ConvNeXt's permute back to NCHW before its layer scale and
residual): a product whose op can (`stores_transposed`) then stores it permuted."""
from __future__ import annotations

import numpy as np

from .. import expr as E
from ..epilogue_operands import epilogue_strides
from ..ir import Graph, Node, Value, written_in_shape
from ..lower.store_expression import EPILOGUE_DTYPES
from ..registry import fact
from ..shapes import unpermuted
from .paired_products import pair, partner

# The epilogue operands' types: a matrix product's kernel reads each in its own (EPILOGUE_DTYPES),
# the others in the type they store.
F32, F16 = EPILOGUE_DTYPES


def fuse_epilogues(graph: Graph) -> Graph:
    paired_away: set[int] = set()   # products another took in (paired_products)
    for anchor in list(graph.nodes):
        kind = fact(anchor, "product")  # the anchors: matrix products and convolutions
        dtype = np.dtype(anchor.outputs[0].dtype)
        if kind is None or dtype not in EPILOGUE_DTYPES or id(anchor) in paired_away:
            continue
        if anchor.op_type == "MatMul" and any(len(v.shape) < 2 for v in anchor.inputs):
            continue  # a vector product's output drops a dim the epilogue indexes by
        while True:
            out = anchor.outputs[0]
            found = graph.sole_reader(out)
            if found is None:
                break
            ew, read = found
            if ew.op_type != "vkc.Elementwise":
                break
            # The expression may read the result transposed (passes/transposes_in_place.py): the
            # kernel then stores it permuted (`output_perm`), where its op can, and from then on
            # its epilogue's operands are in the permuted order (`epilogue_perms`).
            perms = ew.attrs.get("input_perms", {})
            slots = [j for j, v in enumerate(ew.inputs) if v is read]
            perm = next((perms[j] for j in slots if j in perms), None)
            if perm is not None and len(slots) > 1:
                break   # read both transposed and not: the kernel has one accumulator order
            if perm is not None:
                stores = fact(anchor, "stores_transposed")
                if read is not out or "output_perm" in anchor.attrs or stores is None or not stores(anchor, perm):
                    break
            if len(perms) > (perm is not None) or \
                    tuple(ew.outputs[0].shape) != tuple(read.shape[p] for p in perm or range(len(read.shape))):
                break
            coords = perm or anchor.attrs.get("output_perm")
            logical = _logical_shape(anchor, out) if perm is None else tuple(out.shape)
            # A second product of the same activations that the expression reads (SwiGLU's up
            # for the gate) becomes this kernel's too (passes/paired_products.py): its column is
            # a sum the kernel computes, no operand.
            other = partner(graph, anchor, ew, read) if read is out and coords is None else None
            second = other.outputs[0] if other is not None else None
            widen = _widens(anchor, ew, read, second)
            if not widen and not _operands_fit(anchor, ew, read, second, dtype):
                break
            if E.needs_int64(ew.attrs["expr"]) or E.needs_low_precision(ew.attrs["expr"]):
                # a cast through int64 or a low-precision type: the product templates
                # enable neither 64-bit integers nor include templates/low_precision.glsl
                break
            others = [v for v in ew.inputs if v is not read and v is not second]
            if any(epilogue_strides(kind, logical, v.shape, coords) is None for v in others):
                break
            if read is not out and not all(_same_through_reshape(v, read, out) for v in others):
                break
            if other is not None:
                pair(graph, anchor, other)
                paired_away.add(id(other))
            if widen:  # the product stores float32 from here on
                dtype = F32
            if perm is not None:
                anchor.attrs["output_perm"] = list(perm)
            _absorb(anchor, ew, read, second, coords)
            # The fused node runs where the elementwise node ran: its other operands (say the
            # other branch of a residual Add) may be computed after the anchor's old position.
            graph.nodes.remove(anchor)
            graph.nodes[graph.nodes.index(ew)] = anchor
            graph.relink()
    return graph


def _widens(anchor: Node, ew: Node, read: Value, second: Value | None = None) -> bool:
    """Whether the chain takes a float16 MatMul's or Gemm's result into float32 (--precision
    fp16-matmul's Cast after a product, and what follows it in float32): the kernel then reads
    float16 A and B and stores float32 (lower/matmul.py's AB type). Its operands, the chain's and
    those of an epilogue fused before (a float16 residual: Swin's, or layer 0's of a decoder whose
    residual stream turns float32 after it), are float32 or float16, each read in its own type
    (store_expression.operand_types). A Conv never widens (its depthwise and Winograd kernels
    take one type). `second`, the result of a product paired with the anchor's, is a sum the
    kernel computes, no input."""
    return (fact(anchor, "product") == "matmul" and np.dtype(read.dtype) == F16
            and all(np.dtype(v.dtype) == F32 for v in ew.outputs)
            and all(np.dtype(v.dtype) in EPILOGUE_DTYPES for v in ew.inputs if v is not read and v is not second))


def _operands_fit(anchor: Node, ew: Node, read: Value, second: Value | None, dtype) -> bool:
    """Whether the kernel can read the chain's operands and store its result in its type `dtype`:
    a matrix product's kernel reads each float operand in its own type (store_expression.
    operand_types); the others read them in `dtype` (a Pow's exponent may not be)."""
    typed = fact(anchor, "product") == "matmul"
    return (all(np.dtype(v.dtype) == dtype for v in [read, *ew.outputs])
            and all(np.dtype(v.dtype) == dtype or typed and np.dtype(v.dtype) in EPILOGUE_DTYPES
                    for v in ew.inputs if v is not read and v is not second))


def _same_through_reshape(v: Value, read: Value, out: Value) -> bool:
    """Whether operand `v` indexes an element alike in the reshaped `read` and in the kernel's
    `out`: a scalar, or a vector along a last dim the reshape kept (a bias)."""
    if v.size == 1:
        return True
    n = read.shape[-1] if read.shape else 0
    return (out.shape[-1:] == (n,) and v.size == n and v.shape[-1] == n)


def _logical_shape(anchor: Node, out: Value) -> tuple:
    """The shape the product computes: its output's, unpermuted where it stores permuted."""
    perm = anchor.attrs.get("output_perm")
    return tuple(out.shape) if perm is None else tuple(unpermuted(out.shape, perm))


def _absorb(anchor: Node, ew: Node, read: Value, paired: Value | None = None, coords=None) -> None:
    """ew into anchor's store; `paired`: the result of the product paired with anchor's, which
    the epilogue reads as ("acc", 1); `coords`: the permutation ew's operands are in."""
    out = anchor.outputs[0]
    prev = anchor.attrs.get("epilogue")
    n_own = anchor.attrs.setdefault("n_op_inputs", len(anchor.inputs))
    operands = list(anchor.inputs[n_own:])
    perms = dict(anchor.attrs.get("epilogue_perms", {}))

    def leaf(t):
        v = ew.inputs[t[1]]
        if v is read:
            return prev if prev is not None else ("acc",)
        if v is paired:
            return ("acc", 1)
        for i, o in enumerate(operands):
            if o is v and perms.get(i) == coords:
                return ("in", i)
        operands.append(v)
        if coords is not None:
            perms[len(operands) - 1] = list(coords)
        return ("in", len(operands) - 1)

    anchor.attrs["epilogue"] = E.substitute(ew.attrs["expr"], leaf)
    if perms:
        anchor.attrs["epilogue_perms"] = perms
    anchor.inputs = anchor.inputs[:n_own] + operands
    anchor.sources = anchor.sources + ew.sources
    if read is out:
        anchor.outputs = ew.outputs
        return
    # Through a reshape: the kernel writes in its own shape; the expression's output views that.
    anchor.outputs = [written_in_shape(ew.outputs[0], out.shape)]
