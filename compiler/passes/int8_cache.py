"""--kv-cache int8: each KV cache held as bundle state is int8, with a float32 scale per cached
row (per batch, head and position: the row's largest magnitude / 127, symmetric), a second state
of its own (`<cache>.scale`). A float16 cache's bytes are halved, less a scale per row (a
sixteenth more at head size 64). The update into the cache (an op declaring `writes_int8_rows`:
TensorScatter, and what GroupQueryAttention becomes) quantizes the new rows as it writes them
(lower/int8_cache_write.py); each reader of the cache (an op declaring the slot in
`int8_operands`: attention's K and V) reads the int8 values and their scales.

Refused, naming the node: a model that keeps no cache as state, a cache written or read by an op
that does not declare it can, a head size not a multiple of 4, rows along another axis than the
second to last. Runs after apply_precision (the cache's float type is settled) and before
scatter_in_place (which writes the new op's two outputs in place)."""
from __future__ import annotations

import numpy as np

from ..errors import CompileError
from ..ir import Graph, Value
from ..registry import fact

INT8, F32 = np.dtype(np.int8), np.dtype(np.float32)
FIX = "compile without --kv-cache int8"


def kv_cache_option(value) -> str | None:
    """compile_model's kv_cache, checked: None (the model's float type) or "int8"."""
    if value is None or value == "int8":
        return value
    raise CompileError(f"--kv-cache {value!r:.40} is not int8; give int8, or leave it out for a cache in the "
                       "model's float type (float16 under --precision fp16).")


def quantize_cache(graph: Graph) -> Graph:
    if graph.kv_cache != "int8":
        return graph
    if not graph.state:
        raise CompileError("--kv-cache int8: the model keeps no cache on the device (no bundle state: no "
                           "TensorScatter or GroupQueryAttention cache, or state none); " + FIX + ".")
    for cache, present in list(graph.state):
        _quantize(graph, cache, present)
    graph.relink()
    return graph


def _quantize(graph: Graph, cache: Value, present: Value) -> None:
    node = present.producer
    make = fact(node, "writes_int8_rows") if node is not None else None
    where = f"--kv-cache int8: state '{cache.name}'"
    if make is None:
        what = f"{node.op_type} '{node.name}'" if node is not None else "no node (it is the input itself)"
        raise CompileError(f"{where} is written by {what}, which writes no int8 cache; {FIX}.")
    if node.inputs[0] is not cache or not graph.used_only_by(cache, node):
        raise CompileError(f"{where} is read by other nodes than its update '{node.name}'; {FIX}.")
    shape = tuple(cache.shape)
    axis = node.attrs.get("axis", -2) % len(shape)
    if np.dtype(cache.dtype).kind != "f" or len(shape) < 3 or axis != len(shape) - 2 or shape[-1] % 4:
        raise CompileError(f"{where} ({np.dtype(cache.dtype).name}{list(shape)}, rows along axis {axis}): an int8 "
                           f"cache holds float rows along the second-to-last axis, a multiple of 4 wide; {FIX}.")
    readers = []
    for v in graph.family(present):
        for reader in v.consumers:
            slots = fact(reader, "int8_operands") or {}
            for i, x in enumerate(reader.inputs):
                if x is not v:
                    continue
                if i not in slots or v.root_offset() != 0:
                    raise CompileError(f"{where} is read by {reader.op_type} '{reader.name}' (input {i}), which "
                                       f"reads no int8 cache; {FIX}.")
                readers.append((reader, slots[i]))
    scales = Value(f"{cache.name}.scale", F32, shape[:-1] + (1,))
    scales_out = Value(f"{present.name}.scale", F32, scales.shape)
    write = make(node, scales, scales_out)
    graph.nodes[graph.nodes.index(node)] = write
    for v in {id(v): v for v in graph.family(cache) + graph.family(present)}.values():
        v.dtype = INT8
    for reader, slot in readers:
        reader.inputs = list(reader.inputs) + [None] * max(0, slot + 1 - len(reader.inputs))
        reader.inputs[slot] = scales_out
    graph.inputs = list(graph.inputs) + [scales]
    graph.outputs = list(graph.outputs) + [scales_out]
    graph.state = graph.state + [(scales, scales_out)]
