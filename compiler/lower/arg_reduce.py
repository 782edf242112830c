"""ArgMax and ArgMin along one axis (keepdims, select_last_index), on
templates/arg_reduce.comp.j2: an LLM's greedy pick of the next token on the device, so a decode
step copies back one int64 instead of the vocabulary's logits (compile_model(argmax_output=...)).
Ties go to the first index unless select_last_index; NaN counts as the extreme (the first NaN
wins, as numpy's argmax, which the ONNX reference uses; onnxruntime's CPU kernels leave it to
Eigen)."""
from __future__ import annotations

import numpy as np

from ..dtypes import kernel_types
from ..errors import CompileError
from ..ir import Value
from ..registry import FLOATS
from .kernel import Kernel, buffer_view, grid_1d, register
from .reduce import reduction_lanes

ARG_DTYPES = FLOATS + ("int32", "int64")
LIMITS = "an axis of length 0 (ONNX leaves the result undefined); rows over 2^31 elements"
CHUNK_LOADS = 4   # elements a lane loads in one chunk of a split row (_chunks)


def arg_reduce(node, target, op: str) -> list:
    x, out = node.inputs[0], node.outputs[0]
    shape = tuple(x.shape) or (1,)
    rank = len(shape)
    axis = node.attrs.get("axis", 0)
    if not -rank <= axis < rank:
        raise CompileError(f"{node.op_type} '{node.name}': axis {axis} is outside the rank-{rank} "
                           f"input '{x.name}'.")
    axis %= rank
    r, inner = shape[axis], int(np.prod(shape[axis + 1:], dtype=np.int64))
    if r == 0:
        raise CompileError(f"{node.op_type} '{node.name}': axis {axis} of '{x.name}' "
                           f"{list(x.shape)} is empty, so no index exists; ONNX leaves it undefined.")
    if x.size >= 2 ** 31:
        raise CompileError(f"{node.op_type} '{node.name}': '{x.name}' has {x.size} elements, past "
                           "the 2^31 a kernel indexes.")
    total = out.size
    types = kernel_types(x)
    lanes = reduction_lanes(target, r, op, types)
    if total * 4 <= target.elementwise_local:
        # a few long rows (an LLM's vocabulary): lanes share each even on CPU profiles, whose
        # workgroup of one row otherwise walks it in one invocation
        while lanes * 2 <= min(target.elementwise_local, r // 4):
            lanes *= 2
    local = target.elementwise_local
    spec = [("TOTAL", "int32", total), ("R", "int32", r), ("INNER", "int32", inner)]
    params = dict(LOCAL=local, LANES=lanes, op=op, last=bool(node.attrs.get("select_last_index", 0)),
                  split=None, **types)
    shared = local * ((8 if types["T"].glsl in ("int64_t", "double") else 4) + 4) if lanes > 1 else 0
    chunks = _chunks(target, total, r, lanes)
    if chunks > 1:
        return _split(node, x, out, spec, params, shared, total, r, chunks)
    return [Kernel("arg_reduce", params, spec, [buffer_view(x), out], writes=[1],
                   groups=grid_1d(total * lanes, local), local_size=(local, 1, 1),
                   nodes=node.sources, flops=x.size, shared_memory_bytes=shared)]


def _chunks(target, rows: int, r: int, lanes: int) -> int:
    """Chunks each row is scanned in by workgroups of their own: a few long rows (an LLM's
    vocabulary: 128256 logits in one workgroup took 182 us of a 2.3 ms decode step on an H100)
    split until the profile's workgroup count is reached, each chunk CHUNK_LOADS loads a lane."""
    if lanes != target.elementwise_local:
        return 1
    return max(1, min(-(-target.min_workgroups // rows), r // (lanes * CHUNK_LOADS)))


def _split(node, x, out, spec, params, shared, total: int, r: int, chunks: int) -> list:
    """One dispatch: each chunk's best index into a scratch tensor, and the last of each row's
    chunks to finish picks the row's best of them (counted in a counter the run zeroes first:
    lower/counters.py)."""
    local = params["LOCAL"]
    best = Value(f"{out.name}/arg_reduce_chunks", np.dtype(np.int32), (total * chunks,))
    count = Value(f"{out.name}/arg_reduce_counts", np.dtype(np.uint32), (total,))
    spec = spec + [("CHUNKS", "int32", chunks), ("CHUNK", "int32", -(-r // chunks))]
    return [Kernel("arg_reduce", dict(params, split="chunks"), spec, [buffer_view(x), best, out, count],
                   writes=[1, 2, 3], groups=grid_1d(total * chunks * local, local), local_size=(local, 1, 1),
                   nodes=node.sources, flops=x.size + total * chunks, shared_memory_bytes=shared + 4,
                   zeroed=(3,))]


def _register(op_type: str, op: str) -> None:
    # opset 11 allows a negative axis, 12 adds select_last_index: the rule reads both
    @register(op_type, since=1, dtypes=ARG_DTYPES, float16=True, limits=LIMITS,
              dtypes_doc="float32, float16, int32, int64 (the result int64)")
    def lower(node, target):
        return arg_reduce(node, target, op)


_register("ArgMax", "max")
_register("ArgMin", "min")
