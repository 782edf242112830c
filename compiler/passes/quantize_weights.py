"""`compile_model(weights="int8" | "int4" | "int4-sym")` (`vkc compile --weights`): float weights
quantized block-wise at compile time, for models that hold them in float32 or float16.

Each MatMul (or Gemm) whose B is a constant 2-D float weight W [K, N] of at least MIN_ELEMENTS
values, with K at least one block, becomes com.microsoft MatMulNBits (lower/matmul_nbits.py):
W stored as MatMulNBits stores it, per column n and block b of `block_size` values along K,
W[k, n] ~ (q[n, k] - zero_point[n, b]) * scale[n, b], q unsigned of 8 or 4 bits:
- int8: symmetric, scale = max |W| / 127 over the block, q - 128 in [-127, 127], no zero points
  stored (MatMulNBits' default, 128);
- int4: asymmetric, the block's range widened to hold 0, scale = range / 15, a zero point per
  block (packed two a byte), so 0 stays exact;
- int4-sym: symmetric, scale = max |W| / 7, q - 8 in [-7, 7], no zero points (the default, 8).
Scales are W's float type. The token embedding (a Gather of rows of a constant 2-D float table)
becomes com.microsoft GatherBlockQuantized with the same layout; where the LM head is the
embedding transposed (tied weights), both read one packed table.

Left float: 1-D and smaller weights (norms, biases, a classifier's few outputs), a K shorter than
a block, a Gemm with transA or a run-time C scaled by beta; each is listed with why in
`graph.quantized_weights` (the manifest's `quantized_weights`, `vkc inspect`).

Runs before every pass that reads MatMuls; merge_projections merges MatMulNBits projections of
one input as it merges MatMuls.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..derived import derived
from ..errors import CompileError
from ..ir import Graph, Node, Value, is_onnx
from ..targets import GUARANTEED_BINDING_BYTES
from .quantized_matmul import MS, pack_bits

SCHEMES = {"int8": (8, True), "int4": (4, False), "int4-sym": (4, True)}
DEFAULT_BLOCK = 32
# Weights smaller than this stay float: their bytes do not matter and a small layer (a
# classifier's head) is where rounding costs the most accuracy.
MIN_ELEMENTS = 256
FLOAT_WEIGHTS = ("float32", "float16")
# A packed weight past this is split along N: every Vulkan device binds 2^27 bytes.
MAX_PACKED_BYTES = GUARANTEED_BINDING_BYTES


@dataclass(frozen=True)
class WeightQuantization:
    """What `compile_model(weights=..., weights_block=...)` asks of the pass."""
    scheme: str
    bits: int
    symmetric: bool
    block_size: int

    @classmethod
    def parse(cls, weights: str | None, block_size: int | None = None) -> "WeightQuantization | None":
        if weights in (None, "none", "float"):
            if block_size not in (None, DEFAULT_BLOCK):
                raise CompileError(f"--weights-block {block_size} without --weights: add --weights int8, "
                                   "int4 or int4-sym (weights= in compile_model).")
            return None
        if weights not in SCHEMES:
            raise CompileError(f"--weights {weights}: not a quantization vkc makes; choose int8 "
                               "(symmetric), int4 (with zero points) or int4-sym.")
        block = DEFAULT_BLOCK if block_size is None else block_size
        if isinstance(block, bool) or not isinstance(block, (int, np.integer)) or block < 16 or block & (block - 1):
            raise CompileError(f"--weights-block {block}: must be a power of two, at least 16 (as "
                               "MatMulNBits requires): 16, 32 (the default), 64, 128 ...")
        bits, symmetric = SCHEMES[weights]
        return cls(weights, bits, symmetric, int(block))

    def describe(self) -> dict:
        return {"scheme": self.scheme, "bits": self.bits, "symmetric": self.symmetric,
                "block_size": self.block_size}


def quantize_blocks(w: np.ndarray, bits: int, block: int, symmetric: bool):
    """W [K, N] -> (q uint8 [N, n_blocks * block] unsigned values, the padding past K at the zero
    point; scales [N, n_blocks] of W's dtype; zero points uint8 [N, n_blocks], or None where
    symmetric: 2^(bits - 1))."""
    k, n = w.shape
    blocks = -(-k // block)
    wt = np.zeros((n, blocks * block), np.float32)
    wt[:, :k] = w.T
    x = wt.reshape(n, blocks, block)
    top = (1 << bits) - 1
    lo, hi = x.min(axis=2), x.max(axis=2)
    if symmetric:
        half = (1 << (bits - 1)) - 1
        scale = (np.maximum(hi, -lo) / half).astype(w.dtype)
        zp = np.full((n, blocks), 1 << (bits - 1), np.float32)
    else:
        lo, hi = np.minimum(lo, 0), np.maximum(hi, 0)
        scale = ((hi - lo) / top).astype(w.dtype)
    s = scale.astype(np.float32)
    safe = np.where(s == 0, 1, s)  # an all-zero block: q at the zero point
    if not symmetric:
        zp = np.clip(np.rint(-lo / safe), 0, top)
    # in place and in float32 (the weights are the compile's largest arrays)
    np.divide(x, safe[..., None], out=x)
    np.rint(x, out=x)
    x += zp[..., None]
    np.clip(x, 0, top, out=x)
    q = x.astype(np.uint8)
    return q.reshape(n, -1), scale, None if symmetric else zp.astype(np.uint8)


def dequantize_blocks(q, scale, zp, k: int, bits: int) -> np.ndarray:
    """W [K, N] float32 from quantize_blocks' arrays (what the kernel computes with)."""
    n = q.shape[0]
    z = zp.astype(np.float32) if zp is not None else np.float32(1 << (bits - 1))
    x = (q.reshape(n, scale.shape[1], -1).astype(np.float32) - np.asarray(z)[..., None]) * \
        scale.astype(np.float32)[..., None]
    return np.ascontiguousarray(x.reshape(n, -1)[:, :k].T)


@dataclass
class Packed:
    """A weight quantized and packed as MatMulNBits and GatherBlockQuantized (uint8) read it."""
    data: Value          # uint8 [N, n_blocks * block * bits / 8]
    scales: Value        # [N * n_blocks]
    zero_points: Value | None   # uint8 [N * ceil(n_blocks * bits / 8)]
    k: int
    n: int


def pack_weight(name: str, w: np.ndarray, q: WeightQuantization) -> Packed:
    """W [K, N] quantized and packed: rows of W's columns along K."""
    return _packed(name, _pack_arrays(w, q), q)


def _pack_arrays(w: np.ndarray, q: WeightQuantization) -> tuple:
    """(packed data, scales, packed zero points or None, K, N) of W [K, N]."""
    k, n = w.shape
    qv, scale, zp = quantize_blocks(w, q.bits, q.block_size, q.symmetric)
    zp_bytes = None
    if zp is not None:
        per_byte = 8 // q.bits
        zp_bytes = pack_bits(np.pad(zp, [(0, 0), (0, -zp.shape[1] % per_byte)],
                                    constant_values=1 << (q.bits - 1)), q.bits).reshape(-1)
    return pack_bits(qv, q.bits), scale.reshape(-1), zp_bytes, k, n


def _packed(name: str, arrays: tuple, q: WeightQuantization) -> Packed:
    data, scales, zp_bytes, k, n = arrays
    return Packed(_constant(f"{name}/q{q.bits}", data), _constant(f"{name}/scales", scales),
                  None if zp_bytes is None else _constant(f"{name}/zero_points", zp_bytes), k, n)


def _pack_once(name: str, source: np.ndarray, how: tuple, weight: Callable[[], np.ndarray],
               q: WeightQuantization) -> Packed:
    """pack_weight(name, weight(), q), W derived from `source` as `how` says: quantized once for
    every graph of the model (compiler/derived.py)."""
    return _packed(name, derived(source, ("packed", how, q), lambda: _pack_arrays(weight(), q)), q)


def quantize_weights(graph: Graph) -> Graph:
    q = getattr(graph, "weights", None)
    if q is None:
        return graph
    done: list[dict] = []
    kept: list[dict] = []
    tables: dict[int, Packed] = {}   # id(table Value) -> packed [V, H] (a Gather's or a tied head's)
    heads = {}                       # id(constant [H, V]) -> the embedding table it transposes
    for node in graph.nodes:
        if is_onnx(node, "Gather") and _table(node) is not None:
            for other in graph.nodes:
                w = _weight_of(other)
                if w is not None and w.shape == node.inputs[0].shape[::-1] and \
                        np.array_equal(w.data.T, node.inputs[0].data):
                    heads[id(w)] = node.inputs[0]
    nodes = []
    for node in graph.nodes:
        if is_onnx(node, "Gather"):
            table = _table(node)
            why = _too_small(table, q, along=1) if table is not None else None
            if table is None or why:
                if why:
                    kept.append({"node": node.name, "why": why})
                nodes.append(node)
                continue
            packed = tables.get(id(table)) or tables.setdefault(
                id(table), _pack_once(table.name, table.data, ("T",), lambda: np.ascontiguousarray(table.data.T), q))
            nodes.append(_gather_quantized(node, packed, q))
            done.append({"node": node.name, "op": "GatherBlockQuantized", "weight": table.name,
                         "shape": list(table.shape)})
            continue
        w = _weight_of(node)
        if w is None:
            nodes.append(node)
            continue
        why = _unsupported_form(node)
        how = None if why else _derivation(node)
        data = None if why else w.data.T if how and how[0] else w.data   # W's shape (a view)
        why = why or _too_small(data, q, along=0)
        if why:
            kept.append({"node": node.name, "why": why})
            nodes.append(node)
            continue
        table = heads.get(id(w))
        if table is not None and not how and table.shape[1] % q.block_size == 0:
            packed = tables.get(id(table)) or tables.setdefault(
                id(table), _pack_once(table.name, table.data, ("T",), lambda: np.ascontiguousarray(w.data), q))
        else:
            packed = _pack_once(w.name, w.data, how, lambda: _effective_weight(node), q)
        nodes += _matmul_nbits(node, packed, q)
        done.append({"node": node.name, "op": "MatMulNBits", "weight": w.name, "shape": list(data.shape),
                     **({"tied_to": table.name} if id(table) in tables else {})})
    graph.nodes = nodes
    graph.relink()
    graph.quantized_weights = {**q.describe(), "quantized": done, "float": kept}
    return graph


def _weight_of(node: Node) -> Value | None:
    """B of a MatMul / Gemm when it is a constant float 2-D weight."""
    if not is_onnx(node, "MatMul", "Gemm") or len(node.inputs) < 2:
        return None
    a, b = node.inputs[0], node.inputs[1]
    if b is None or not b.is_constant or a is None or a.is_constant or b.shape is None or \
            len(b.shape) != 2 or np.dtype(b.dtype).name not in FLOAT_WEIGHTS or b.dtype != a.dtype:
        return None
    return b


def _table(node: Node) -> Value | None:
    """The constant float [V, H] table a Gather reads rows of, by run-time indices."""
    data, idx = node.inputs[0], node.inputs[1]
    if not data.is_constant or idx.is_constant or data.shape is None or len(data.shape) != 2 or \
            np.dtype(data.dtype).name not in FLOAT_WEIGHTS or node.attrs.get("axis", 0) % 2 != 0 or \
            np.dtype(idx.dtype) not in (np.int32, np.int64):
        return None
    return data


def _too_small(w, q: WeightQuantization, along: int) -> str | None:
    """Why W (the product's [K, N], along=0, or a table [V, H], along=1) stays float, or None."""
    k = w.shape[0] if along == 0 else w.shape[1]
    if w.size < MIN_ELEMENTS:
        return f"{w.size} weights, under the {MIN_ELEMENTS} worth quantizing"
    if k < q.block_size:
        return f"K = {k}, shorter than a block of {q.block_size}"
    if along == 1 and k % q.block_size:
        return f"rows of {k}, not whole blocks of {q.block_size} (GatherBlockQuantized)"
    return None


def _unsupported_form(node: Node) -> str | None:
    if node.op_type == "MatMul":
        return None if len(node.inputs[0].shape) >= 1 else "a scalar A"
    if node.attrs.get("transA", 0):
        return "Gemm with transA"
    c = node.input(2)
    if c is not None and not c.is_constant and node.attrs.get("beta", 1.0) != 1.0:
        return "Gemm with a run-time C scaled by beta"
    return None


def _derivation(node: Node) -> tuple:
    """How _effective_weight derives W from B: () where W is B."""
    if node.op_type == "MatMul":
        return ()
    alpha, trans_b = node.attrs.get("alpha", 1.0), node.attrs.get("transB", 0)
    return () if alpha == 1.0 and not trans_b else (trans_b, float(alpha))


def _effective_weight(node: Node) -> np.ndarray:
    """W [K, N] the product multiplies by: Gemm's alpha and transB folded in."""
    b = node.inputs[1].data
    if node.op_type == "MatMul":
        return b
    alpha = node.attrs.get("alpha", 1.0)
    w = b.T if node.attrs.get("transB", 0) else b
    return np.ascontiguousarray(w * np.asarray(alpha, b.dtype)) if alpha != 1.0 else np.ascontiguousarray(w)


def _matmul_nbits(node: Node, p: Packed, q: WeightQuantization) -> list[Node]:
    y = node.outputs[0]
    c = node.input(2) if node.op_type == "Gemm" else None
    if c is None:
        return _products(node, p, q, y)
    beta = node.attrs.get("beta", 1.0)
    if c.is_constant and beta != 1.0:
        c = _constant(f"{c.name}/beta", (c.data * np.asarray(beta, c.data.dtype)).astype(c.dtype))
    product = Value(f"{y.name}/product", y.dtype, y.shape)
    return _products(node, p, q, product) + [
        Node("Add", f"{node.name}/bias", [product, c], [y], sources=list(node.sources))]


def _products(node: Node, p: Packed, q: WeightQuantization, y: Value) -> list[Node]:
    """y = A Wᵀ: one MatMulNBits, or, where the packed weight is over what every device binds
    (an LLM head's 128 K columns), one per block of its rows (W's columns), concatenated."""
    a, sources = node.inputs[0], list(node.sources)
    parts = -(-p.data.nbytes // MAX_PACKED_BYTES)
    step = -(-p.n // parts)
    pieces, nodes = [], []
    for start in range(0, p.n, step):
        stop = min(p.n, start + step)
        inputs = [a] + [_rows(v, p.n, start, stop) if parts > 1 else v
                        for v in (p.data, p.scales, p.zero_points) if v is not None]
        piece = y if parts == 1 else Value(f"{y.name}/cols{start}", y.dtype, tuple(y.shape[:-1]) + (stop - start,))
        nodes.append(Node("MatMulNBits", node.name if parts == 1 else f"{node.name}/cols{start}", inputs, [piece],
                          {"K": p.k, "N": stop - start, "bits": q.bits, "block_size": q.block_size}, MS, sources))
        pieces.append(piece)
    if parts > 1:
        nodes.append(Node("Concat", f"{node.name}/concat", pieces, [y], {"axis": len(y.shape) - 1}, sources=sources))
    return nodes


def _rows(v: Value, n: int, start: int, stop: int) -> Value:
    """Rows start..stop of a packed constant holding n rows (2-D, or flat: scales, zero points)."""
    data = np.ascontiguousarray(v.data.reshape(n, -1)[start:stop])
    return _constant(f"{v.name}/rows{start}", data if v.data.ndim > 1 else data.reshape(-1))


def _gather_quantized(node: Node, p: Packed, q: WeightQuantization) -> Node:
    inputs = [p.data, node.inputs[1], p.scales] + ([p.zero_points] if p.zero_points is not None else [])
    return Node("GatherBlockQuantized", node.name, inputs, list(node.outputs),
                {"bits": q.bits, "block_size": q.block_size, "gather_axis": 0, "quantize_axis": 1},
                MS, list(node.sources))


def _constant(name: str, data: np.ndarray) -> Value:
    return Value(name, data.dtype, tuple(data.shape), data=data)
