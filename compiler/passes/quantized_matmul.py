"""A MatMul whose weight is ONNX DequantizeLinear of a block-quantized constant (int4, uint4,
int8 or uint8 along K, block_size a power of two from 16) becomes one com.microsoft MatMulNBits
(compiler/lower/matmul_nbits.py): the weight stays packed in the bundle, 4 or 8 bits a weight,
and the kernel dequantizes it in registers. fold_constants leaves those DequantizeLinear nodes
for this pass (`unfolded`); every other DequantizeLinear of constants folds to float, as any
constant computation does.

The packing is onnxruntime's MatMulNBits layout, done once at compile time: W [K, N] becomes
rows of W's columns ([N, K] along K, two 4-bit values a byte, low bits first), signed values
shifted to unsigned with their zero points (q - z is unchanged), scales [N, n_blocks].
"""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Node, Value, is_onnx
from ..registry import FLOATS, declare

MS = "com.microsoft"
# Quantized weight dtype -> (bits, shift to unsigned).
PACKED = {"int4": (4, 8), "uint4": (4, 0), "int8": (8, 128), "uint8": (8, 0)}


def packs_into_product(graph: Graph, node: Node) -> bool:
    """Whether this DequantizeLinear is a block-quantized weight that only MatMuls read as B."""
    if not is_onnx(node, "DequantizeLinear") or len(node.inputs) < 2:
        return False
    x, scale, zp = node.inputs[0], node.inputs[1], node.input(2)
    block = node.attrs.get("block_size", 0)
    if any(v is not None and not v.is_constant for v in (x, scale, zp)) or x.shape is None:
        return False
    if np.dtype(x.dtype).name not in PACKED or len(x.shape) != 2 or \
            node.attrs.get("axis", 1) % 2 != 0 or block < 16 or block & (block - 1):
        return False
    blocks_shape = (-(-x.shape[0] // block), x.shape[1])
    if tuple(scale.shape) != blocks_shape or np.dtype(scale.dtype).name not in FLOATS or \
            (zp is not None and (tuple(zp.shape) != blocks_shape or zp.dtype != x.dtype)):
        return False
    out = node.outputs[0]
    return not graph.is_output(out) and bool(out.consumers) and all(
        is_onnx(c, "MatMul") and c.inputs[1] is out and c.inputs[0] is not out
        for c in out.consumers)


declare("DequantizeLinear", handled_by="folded at compile time; a block-quantized MatMul weight: "
        "MatMulNBits", module=__name__, constant_inputs=(0, 1, 2), unfolded=packs_into_product,
        dtypes_doc="any the reference evaluator folds; packed: int4, uint4, int8, uint8",
        limits="x computed at run time; packed only as a MatMul's B along K (axis 0), "
               "block_size a power of two from 16 (other forms fold to float weights)",
        schema=None)


def pack_quantized_matmuls(graph: Graph) -> Graph:
    nodes = []
    for node in graph.nodes:
        if packs_into_product(graph, node):
            continue  # its readers take the packed weight below
        b = node.inputs[1] if is_onnx(node, "MatMul") else None
        dq = b.producer if b is not None else None
        if dq is not None and packs_into_product(graph, dq):
            nodes.append(_matmul_nbits(node, dq))
        else:
            nodes.append(node)
    graph.nodes = nodes
    graph.relink()
    return graph


def _matmul_nbits(matmul: Node, dq: Node) -> Node:
    x, scale, zp = dq.inputs[0], dq.inputs[1], dq.input(2)
    block = dq.attrs["block_size"]
    bits, shift = PACKED[np.dtype(x.dtype).name]
    k, n = x.shape
    blocks = -(-k // block)
    q = np.zeros((n, blocks * block), np.int32)
    q[:, :k] = x.data.astype(np.int32).T + shift
    z = (zp.data.astype(np.int32).T + shift if zp is not None
         else np.full((n, blocks), shift, np.int32))
    zp_bytes = pack_bits(np.pad(z, [(0, 0), (0, -blocks % (8 // bits))]), bits).reshape(-1)
    weights = [_constant(f"{x.name}/packed", pack_bits(q, bits).reshape(n, blocks, -1)),
               _constant(f"{scale.name}/rows", np.ascontiguousarray(scale.data.T).reshape(-1)),
               _constant(f"{x.name}/zero_points", zp_bytes)]
    return Node("MatMulNBits", matmul.name, [matmul.inputs[0], *weights], list(matmul.outputs),
                {"K": k, "N": n, "bits": bits, "block_size": block}, MS,
                list(dq.sources) + list(matmul.sources))


def _constant(name: str, data: np.ndarray) -> Value:
    return Value(name, data.dtype, tuple(data.shape), data=data)


def pack_bits(values: np.ndarray, bits: int) -> np.ndarray:
    """Unsigned `bits`-bit values along the last axis -> bytes, the first value in the low bits."""
    per_byte = 8 // bits
    parts = values.reshape(*values.shape[:-1], -1, per_byte).astype(np.uint8)
    packed = np.zeros(parts.shape[:-1], np.uint8)
    for i in range(per_byte):
        packed |= parts[..., i] << (i * bits)
    return packed
