"""Paired products: where an expression fuse_epilogues takes into a product's store also reads a
second product of the same activations (SwiGLU's silu(gate) * up), the two become one kernel: the
weights side by side (merge_projections.side_by_side), the kernel computing output column j
from the merged product's columns j and F + j and storing the expression's value alone, [.., F].
In the epilogue the first product's column is ("acc",), the second's ("acc", 1); the node's
`paired` attribute is F.

Both products must be unfused so far, of one product_kind (a constant 2-D weight, or one packing
of a block-quantized weight), have the expression as their one reader and the expression's shape,
and the merged weight fit one binding. The op declares `pairs` (lower/matmul.py,
lower/matmul_nbits.py): its GEMV kernels compute both columns in one workgroup, and a prompt's
cooperative-matrix GEMM both products' tiles in one workgroup; where the kernel that fits cannot
(a prompt's tiled GEMM, a CPU profile's), the lowering computes the second product first, into
scratch, for the first's epilogue to read (lower/paired.py).
"""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Node, Value
from ..registry import fact
from .merge_projections import product_kind, side_by_side
from .split_large_weights import MAX_BINDING_BYTES


def partner(graph: Graph, anchor: Node, ew: Node, read: Value) -> Node | None:
    """The product whose result `ew` also reads, to pair with `anchor` (whose result `ew` reads
    as `read`); None where there is none."""
    kind = _pairable(graph, anchor, ew, read, first=True)
    if kind is None:
        return None
    for v in ew.inputs:
        other = v.producer
        if v is not read and other is not None and other is not anchor and \
                _pairable(graph, other, ew, v) == kind and other.inputs[0] is anchor.inputs[0] and \
                np.dtype(v.dtype) == np.dtype(read.dtype) and \
                anchor.inputs[1].nbytes + other.inputs[1].nbytes <= MAX_BINDING_BYTES:
            return other
    return None


def _pairable(graph: Graph, node: Node, ew: Node, v: Value, first: bool = False) -> tuple | None:
    """node's product_kind, where node may pair: its op declares `pairs`, it is paired with
    none yet, and its result v, of ew's shape, is read by ew alone (no view, no graph output).
    The second carries no epilogue; the `first` may (SwiGLU's silu fused into the gate before
    the product with up is in reach)."""
    if not fact(node, "pairs") or "paired" in node.attrs or (not first and "epilogue" in node.attrs) or \
            node.outputs[0] is not v or tuple(v.shape) != tuple(ew.outputs[0].shape) or \
            graph.sole_consumer(v) is not ew:
        return None
    return product_kind(node)


def pair(graph: Graph, anchor: Node, other: Node) -> None:
    """anchor computes both products from here on (its result, for the epilogue to come, stays
    the first's); `other` leaves the graph."""
    name = f"{anchor.name}+{other.name}"
    n_own = anchor.attrs.get("n_op_inputs", len(anchor.inputs))
    inputs, attrs = side_by_side([anchor, other], name)
    anchor.inputs = inputs + anchor.inputs[n_own:]   # an epilogue's operands after the own inputs
    anchor.attrs = {**anchor.attrs, **attrs, "paired": other.outputs[0].shape[-1], "n_op_inputs": len(inputs)}
    anchor.sources = anchor.sources + other.sources
    graph.nodes.remove(other)
