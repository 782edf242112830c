"""The query, key and value projections of an attention block, as BERT's, DistilBERT's and
Whisper's exports write them (MatMuls of the same activations by constant weights, each with its
own bias Add), become one MatMul by the weights side by side, one bias Add and a Split: the form
GPT-2's export has. One GEMM of N = 3 * hidden fills the device where three of N = hidden each
needed split-K at batch 1 (twice the dispatches), and passes/fuse_attention.py reads Q, K and V in
place from its output through the Split, so the Split costs no copy. Block-quantized projections
(MatMulNBits of one K, bits and block size) merge alike: their packed rows, scales and zero
points are per output column, so the merged weight is theirs one after the other.

Only projections whose results feed matmuls through views, Transposes and scalings by a constant
right before the product (which fuse_attention takes over), or ops that read their columns of the
merged product in place (a rotary embedding, a cache write: passes/split_parts.py; a decode
step's head split is a view, a prompt's a Transpose that passes/transposes_in_place.py took into
its readers' layouts before), alone are merged: where another op (a GLU's gate, Whisper's scaling
before the head split) reads one, the Split would become copy kernels. A merged weight over what every device binds stays apart.

Runs on ONNX nodes, after views (Reshapes are aliases) and before fuse_attention.
"""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Node, Value, is_onnx, reaches_only
from .fuse_attention import scaling_factor
from .split_large_weights import MAX_BINDING_BYTES
from .split_parts import reads_part

MS = "com.microsoft"


def merge_projections(graph: Graph) -> Graph:
    by_kind: dict[tuple, list[tuple[Node, Node | None]]] = {}
    for node in graph.nodes:
        member = _projection(graph, node)
        if member is not None:
            by_kind.setdefault((id(node.inputs[0]), product_kind(node)), []).append(member)
    for members in by_kind.values():
        if len(members) > 1 and sum(mm.inputs[1].nbytes for mm, _ in members) <= MAX_BINDING_BYTES:
            _merge(graph, members)
    graph.relink()
    return graph


def product_kind(node: Node) -> tuple | None:
    """What products of one input must share to merge, for X x W with W a constant 2-D weight
    (K and its dtype) or a block-quantized one (MatMulNBits without act-order or bias, its packed
    inputs constants: K, bits, block size, the scales' and zero points' types); None for any
    other node."""
    if is_onnx(node, "MatMul"):
        w = node.inputs[1]
        if node.attrs.get("n_op_inputs", len(node.inputs)) == 2 and w.is_constant and len(w.shape) == 2 \
                and w.dtype == node.inputs[0].dtype:
            return ("MatMul", w.shape[0], np.dtype(w.dtype).name)
        return None
    if node.op_type != "MatMulNBits" or node.domain != MS or node.input(4) is not None or \
            node.input(5) is not None or not all(node.input(i) is None or node.input(i).is_constant for i in (1, 2, 3)):
        return None
    zp = node.input(3)
    return ("MatMulNBits", node.attrs["K"], node.attrs.get("bits", 4), node.attrs["block_size"],
            np.dtype(node.inputs[2].dtype).name, None if zp is None else np.dtype(zp.dtype).name)


def _projection(graph: Graph, node: Node) -> tuple[Node, Node | None] | None:
    """(the product, its bias Add or None) when `node` is X x W with W a constant weight whose
    result (after the bias) only feeds matmuls or column readers."""
    if product_kind(node) is None:
        return None
    x = node.inputs[0]
    y = node.outputs[0]
    if x.is_constant or len(x.shape) < 2 or graph.is_output(y):
        return None
    add = y.consumers[0] if len(y.consumers) == 1 else None
    if is_onnx(add, "Add") and y.alias_of is None and graph.used_only_by(y, add):
        bias = add.inputs[1] if add.inputs[0] is y else add.inputs[0]
        if bias.is_constant and bias.dtype == y.dtype and bias.size == y.shape[-1] and \
                add.outputs[0].shape == y.shape and all(d == 1 for d in bias.shape[:-1]):
            return (node, add) if _feeds_matmuls(graph, add.outputs[0]) else None
    return (node, None) if _feeds_matmuls(graph, y) else None


def _feeds_matmuls(graph: Graph, v: Value) -> bool:
    """Whether every reader of v's bytes is a MatMul or reads v (or a view of all of it) where it
    can read its columns of the merged product in place (a rotary embedding, a cache write:
    passes/split_parts.py), or is a Transpose, an Expand (GQA's repeated K/V heads, read at stride
    0), a view of v or a scaling by a constant scalar (the split scale of SDPA's export, which
    fuse_attention takes over) whose own readers are."""
    return reaches_only(graph, v, ends=lambda n: is_onnx(n, "MatMul") or reads_part(n, v),
                        through=lambda n: is_onnx(n, "Transpose", "Expand") or _scales_matmul_operand(graph, n))


def _scales_matmul_operand(graph: Graph, node: Node) -> bool:
    """A scaling by a constant scalar that only MatMuls read: SDPA's export scales Q and Kᵀ right
    before their product, where fuse_attention takes the factor into its kernel. (Whisper's
    scaling of Q before the head split is no such node: it stays a kernel.)"""
    out = node.outputs[0]
    return scaling_factor(graph, node) is not None and not graph.is_output(out) and \
        bool(out.consumers) and all(is_onnx(c, "MatMul") for c in out.consumers)


def _merge(graph: Graph, members: list[tuple[Node, Node | None]]) -> None:
    """One product of the members' weights side by side, their biases (zeros where one has
    none: Whisper's key) added after it, and a Split into the members' results, where the first
    member stood."""
    mm0 = members[0][0]
    name = "+".join(mm.name for mm, _ in members)
    sources = [s for mm, add in members for n in (mm, add) if n is not None for s in n.sources]
    results = [(add or mm).outputs[0] for mm, add in members]
    sizes = [r.shape[-1] for r in results]
    product = Value(f"{name}/product", results[0].dtype, tuple(results[0].shape[:-1]) + (sum(sizes),))
    inputs, attrs = side_by_side([mm for mm, _ in members], name)
    nodes = [Node(mm0.op_type, f"{name}/matmul", inputs, [product], attrs, mm0.domain, sources)]
    if any(add is not None for _, add in members):
        bias = np.concatenate([np.zeros(n, product.dtype) if add is None else
                               next(i for i in add.inputs if i.is_constant).data.reshape(-1)
                               for (_, add), n in zip(members, sizes)])
        biased = Value(f"{name}/biased", product.dtype, product.shape)
        nodes.append(Node("Add", f"{name}/bias", [product, Value(f"{name}/bias_values", product.dtype, bias.shape,
                                                                  data=bias)], [biased], sources=sources))
        product = biased
    split = Value(f"{name}/split", np.dtype(np.int64), (len(sizes),), data=np.array(sizes, np.int64))
    nodes.append(Node("Split", f"{name}/split", [product, split], results, {"axis": len(product.shape) - 1},
                      sources=sources))
    gone = {id(n) for mm, add in members for n in (mm, add) if n is not None}
    at = graph.nodes.index(mm0)
    graph.nodes[at:at + 1] = nodes
    graph.nodes = [n for n in graph.nodes if id(n) not in gone]


def side_by_side(products: list[Node], name: str) -> tuple[list[Value], dict]:
    """The inputs and attributes of one product of the products' input by their weights side by
    side (products of one product_kind). MatMulNBits' packed rows, scales and zero points are per
    output column (zero points padded to whole bytes a column): theirs one after the other."""
    first = products[0]
    if first.op_type == "MatMul":
        data = np.ascontiguousarray(np.concatenate([p.inputs[1].data for p in products], axis=1))
        return [first.inputs[0], Value(f"{name}/weight", data.dtype, data.shape, data=data)], {}
    inputs, sizes = [first.inputs[0]], [p.attrs["N"] for p in products]
    for slot, what in ((1, "weight"), (2, "scales"), (3, "zero_points")):
        if first.input(slot) is not None:
            data = np.ascontiguousarray(np.concatenate([p.inputs[slot].data.reshape(n, -1)
                                                        for p, n in zip(products, sizes)]))
            inputs.append(Value(f"{name}/{what}", data.dtype, data.shape, data=data))
    attrs = {k: first.attrs[k] for k in ("K", "bits", "block_size") if k in first.attrs}
    return inputs, {**attrs, "N": sum(sizes)}
