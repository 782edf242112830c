"""Normalized products: an RMS normalization whose result one product of a few rows alone reads (a
decoder step's pre-attention and pre-MLP norms, read by the merged q/k/v projection and the paired
gate/up projection) is computed by that product as it reads its rows, not by a kernel of its
own: y = (x * scale / rms(x)) W = (sum_k x_k scale_k W_k) / rms(x), so the product reads x times
the scale and multiplies its sums by the row's 1 / rms at the store (templates/matmul_gemv.comp.j2,
templates/matmul_nbits.comp.j2).
One dispatch and one intermediate fewer for each norm.

The product keeps its weights and epilogue; its inputs become (x, its own others, absent ones
None, the scale at the slot its op's `normalizes_rows` names, *epilogue operands) and its
`normalized` attribute holds the norm's epsilon and the normalized row's dtype. Where the
kernel that fits is not the GEMV (a CPU profile), the lowering normalizes first, into scratch, as
the norm would have (lower/layernorm.py's normalized_first).

Taken: a norm whose op declares it an RMS normalization of the last axis with one output, no
residual sum and no bias (registry fact `rms_norm`), its scale a constant vector, read only as
the first operand of one product of a constant weight and at most GEMV_ROWS rows whose op
declares `normalizes_rows` (merged and paired products are one; a norm that several products
read keeps its kernel, which a kernel that cannot normalize would otherwise repeat). Runs after
the epilogue and precision passes, so the norm's output already has the type the products read.
"""
from __future__ import annotations

import numpy as np

from ..ir import Graph
from ..lower.matmul import GEMV_ROWS
from ..registry import fact
from ..shapes import prod


def normalize_in_products(graph: Graph) -> Graph:
    removed = []
    for norm in graph.nodes:
        rms = fact(norm, "rms_norm")
        taken = rms(norm) if rms else None
        if taken is None:
            continue
        x, scale, epsilon = taken
        h = next(o for o in norm.outputs if o is not None and o.name)
        product = graph.sole_consumer(h)
        if not scale.is_constant or product is None or not _takes(product, h):
            continue
        n_own = product.attrs.get("n_op_inputs", len(product.inputs))
        slot = fact(product, "normalizes_rows")   # where the op takes the norm's scale
        own = [product.input(i) for i in range(1, slot)]
        product.inputs = [x, *own, scale, *product.inputs[n_own:]]
        product.attrs = {**product.attrs, "n_op_inputs": slot + 1,
                         "normalized": {"epsilon": float(epsilon), "dtype": np.dtype(h.dtype).name}}
        product.sources = [*norm.sources, *product.sources]
        removed.append(norm)
    if removed:
        graph.nodes = [n for n in graph.nodes if all(n is not r for r in removed)]
        graph.relink()
    return graph


def _takes(product, h) -> bool:
    """Whether `product` can normalize its A, `h`, itself: a product that declares it, of a
    constant weight, at most GEMV_ROWS rows, h its A alone."""
    return (bool(fact(product, "normalizes_rows")) and "normalized" not in product.attrs and
            product.inputs[0] is h and all(v is not h for v in product.inputs[1:]) and
            product.input(1) is not None and product.inputs[1].is_constant and few_rows(h))


def few_rows(v) -> bool:
    """Whether v, [.., K], has at most GEMV_ROWS rows: a decode step's, which the GEMV kernels take."""
    return len(v.shape) >= 2 and prod(v.shape[:-1]) <= GEMV_ROWS
