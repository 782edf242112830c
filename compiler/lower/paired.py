"""A paired product (passes/paired_products.py: two products of one A, their weights side by
side, a fused epilogue reading the first's column j as ("acc",) and the second's as ("acc", 1))
where the kernel that fits cannot compute both columns (a prompt's tiled GEMM, a CPU profile's
register tiles): the second product first, into scratch, then the first, whose epilogue reads
that scratch as an operand: the kernels the two products had before pairing."""
from __future__ import annotations

import numpy as np

from .. import expr as E
from ..ir import Node, Value
from ..memory import ALIGNMENT


def unpaired(node: Node, half) -> list[Node]:
    """The two products of a paired `node`, second first; `half(node, part)` gives the inputs and
    attributes of the product by part 0 or 1 of its weights."""
    n_own = node.attrs["n_op_inputs"]
    operands = list(node.inputs[n_own:])
    y = node.outputs[0]
    scratch = Value(f"{y.name}/second", y.dtype, tuple(y.shape))
    inputs, attrs = half(node, 1)
    second = Node(node.op_type, f"{node.name}/second", inputs, [scratch], attrs, node.domain, node.sources)
    tree = E.substitute(node.attrs["epilogue"], lambda t: ("in", len(operands)) if t == ("acc", 1) else None)
    inputs, attrs = half(node, 0)
    first = Node(node.op_type, node.name, [*inputs, *operands, scratch], list(node.outputs),
                 {**attrs, "epilogue": tree, "n_op_inputs": len(inputs)}, node.domain, node.sources)
    return [second, first]


def columns(v: Value, part: int, name: str) -> Value:
    """Part 0 or 1 of a constant 2-D weight's columns, a copy."""
    data = np.ascontiguousarray(np.split(v.data, 2, axis=1)[part])
    return Value(f"{name}/part{part}", data.dtype, data.shape, data=data)


def column_view(v: Value, part: int) -> Value | None:
    """Part 0 or 1 of a 2-D weight's columns read in place: a view from the part's first column,
    its rows the whole width apart (the bundle holds the weight once, for this kernel and for a
    variant's paired one); None where that column does not start on a binding boundary."""
    k, width = v.shape
    offset = part * (width // 2) * np.dtype(v.dtype).itemsize
    if offset % ALIGNMENT:
        return None
    return Value(f"{v.name}/part{part}", v.dtype, ((k - 1) * width + width // 2,), alias_of=v, alias_offset=offset)


def rows(v: Value, part: int, name: str) -> Value:
    """Part 0 or 1 of a packed constant's rows (2-D, or flat: scales, zero points), flat: a view
    of the constant where the part starts on a binding boundary (the bundle then holds the
    weights once, for this kernel and for a variant's paired one), else a copy."""
    half = v.size // 2
    if (part * half * v.data.itemsize) % ALIGNMENT == 0:
        return Value(f"{name}/part{part}", v.dtype, (half,), alias_of=v, alias_offset=part * half * v.data.itemsize)
    data = np.ascontiguousarray(np.split(v.data.reshape(2, -1), 2)[part].reshape(-1))
    return Value(f"{name}/part{part}", data.dtype, data.shape, data=data)
