"""TopK along one axis (K an attribute up to opset 1, a constant input from opset 10; axis, largest,
sorted), on templates/top_k.comp.j2: the K largest (or smallest) elements of each row and their
int64 indices, best first. Ties go to the lower index and NaN counts as past every number (the
first of the largest, the last of the smallest), as onnxruntime's CPU kernel orders them. With
sorted=0 ONNX allows any order; the result is sorted all the same.

A workgroup keeps a list of the best K per invocation in shared memory and merges the lists
(kernel design in the template), so K is bounded: MAX_K, refused above. A few long rows (an
LLM's logits: top-k sampling on the device, compiler/top_k_output.py) go in chunks, a workgroup
each, then a pass over the chunks' candidates, as ArgMax does (lower/arg_reduce.py): where the
chunks are no more than the lists a workgroup holds, each chunk's sorted list is an invocation's
and the lists merge. llvmpipe stops an invocation's loops after 65535 iterations, so rows also
split where one invocation's scan would pass LOOP_BUDGET, and a row is refused whose chunks'
candidates are more than one pass merges (at K = 256: 6 M elements on the generic profile, 24 M on nvidia)."""
from __future__ import annotations

import numpy as np

from ..dtypes import kernel_types
from ..errors import CompileError
from ..ir import Value
from .arg_reduce import ARG_DTYPES
from .kernel import Kernel, buffer_view, grid_1d, register

MAX_K = 256
LIMITS = (f"K up to {MAX_K} (no full-sort path for a larger K); K a constant (a bundle's shapes are fixed); "
          "rows over 2^31 elements")
CHUNK_LOADS = 4     # elements an invocation loads in one chunk of a split row, at least
CHUNK_PER_K = 64    # and elements a chunk holds per candidate it passes on, at least
LOOP_BUDGET = 60000  # loop iterations an invocation may run (_max_scan), below llvmpipe's 65535


def top_k(node, target) -> list:
    x, values, indices = node.inputs[0], node.outputs[0], node.outputs[1]
    shape = tuple(x.shape) or (1,)
    rank = len(shape)
    axis = node.attrs.get("axis", -1)
    if not -rank <= axis < rank:
        raise CompileError(f"TopK '{node.name}': axis {axis} is outside the rank-{rank} input '{x.name}'.")
    axis %= rank
    r, inner = shape[axis], int(np.prod(shape[axis + 1:], dtype=np.int64))
    k = _k(node)
    if not 1 <= k <= r:
        raise CompileError(f"TopK '{node.name}': K = {k} is not in 1..{r}, the length of axis {axis} of "
                           f"'{x.name}' {list(x.shape)}.")
    if k > MAX_K:
        raise CompileError(f"TopK '{node.name}': K = {k} is more than the {MAX_K} vkc's top-k kernel keeps "
                           "per row (its candidates live in shared memory); there is no full-sort path.")
    if x.size >= 2 ** 31:
        raise CompileError(f"TopK '{node.name}': '{x.name}' has {x.size} elements, past the 2^31 a kernel "
                           "indexes.")
    types = kernel_types(x)
    rows = x.size // r
    kp = 1 << (k - 1).bit_length()   # lists padded to a power of two, for the bitonic merge
    scan = _max_scan(kp)
    most = min(target.elementwise_local, target.max_shared_memory // (kp * _entry_bytes(types)))
    # CPU profiles (lavapipe) walk a row in one invocation where the chunks' candidates fit one pass:
    # lanes cost a loop over the SIMD lanes for every divergent shared-memory access, and the
    # chunks' workgroups spread over the cores
    for lists in (1, most) if target.matmul == "texel" else (most,):
        chunks = _chunks(target, rows, r, k, lists, scan)
        if chunks == 1 or chunks * k <= lists * scan:
            break
    else:
        raise CompileError(f"TopK '{node.name}': rows of {r} elements take {chunks} chunks at K = {k}, more "
                           f"candidates than one workgroup merges ({lists * scan}); vkc's top-k merges once.")
    params = dict(KP=kp, largest=bool(node.attrs.get("largest", 1)), split=None, chunk_lists=False, **types)
    spec = [("TOTAL", "int32", rows), ("R", "int32", r), ("INNER", "int32", inner), ("K", "int32", k)]
    outputs = [buffer_view(values), indices]
    if chunks == 1:
        return [_kernel(node, params, spec, [buffer_view(x)], outputs, rows, r, k, lists)]
    chunk = -(-r // chunks)
    best = Value(f"{indices.name}/top_k_chunks", np.dtype(np.int32), (rows * chunks * k,))
    spec = spec + [("CHUNKS", "int32", chunks), ("CHUNK", "int32", chunk)]
    first = _kernel(node, dict(params, split="chunks"), spec, [buffer_view(x)], [best], rows * chunks, chunk, k,
                    lists)
    local = 1 << (chunks - 1).bit_length()
    if local <= lists:  # each chunk's sorted list an invocation's: the lists merge, nothing to scan
        return [first, _kernel(node, dict(params, split="combine", chunk_lists=True), spec, [buffer_view(x), best],
                               outputs, rows, chunks * k, k, local)]
    return [first, _kernel(node, dict(params, split="combine"), spec, [buffer_view(x), best], outputs, rows,
                           chunks * k, k, lists)]


def _k(node) -> int:
    """K: opset 1's attribute, or from opset 10 the 1-element input, which must be a constant."""
    if len(node.inputs) < 2:
        return int(node.attrs.get("k", 0))
    v = node.inputs[1]
    if not v.is_constant:
        raise CompileError(f"TopK '{node.name}': K comes from the computation ('{v.name}'); a bundle's "
                           "shapes are fixed at compile time, so vkc needs K constant.")
    if v.data.size != 1:
        raise CompileError(f"TopK '{node.name}': K '{v.name}' holds {v.data.size} values; ONNX gives it one.")
    return int(v.data.reshape(-1)[0])


def _entry_bytes(types) -> int:
    """Shared memory a list entry takes: its value and its index."""
    return (8 if types["T"].int64 else 4) + 4


def _max_scan(kp: int) -> int:
    """Elements (or candidates) one invocation may scan: llvmpipe ends a shader's loops after
    65535 iterations in all (LP_MAX_TGSI_LOOP_ITERATIONS, one count per invocation for every
    loop), and an element costs up to 2 + log2(KP) of them (the scan, a heap's steps), the sort
    and merges of a list about KP * (4 + 2 log2(KP))."""
    depth = kp.bit_length()
    return (LOOP_BUDGET - kp * (2 * depth + 4)) // (depth + 2)


def _chunks(target, rows: int, r: int, k: int, lists: int, scan: int) -> int:
    """Chunks each row is scanned in by workgroups of their own: as many as keep every
    invocation's scan within `scan`, and for a few long rows more, until the profile's workgroup
    count is reached, each chunk long enough that the pass over the chunks' K candidates each
    stays short (CHUNK_PER_K) and every invocation loads CHUNK_LOADS."""
    chunks = -(-r // (lists * scan))
    if rows < target.min_workgroups:
        chunks = max(chunks, min(-(-target.min_workgroups // rows),
                                 r // max(lists * CHUNK_LOADS, CHUNK_PER_K * k)))
    return chunks


def _kernel(node, params, spec, inputs, outputs, groups: int, scanned: int, k: int, lists: int) -> Kernel:
    """One dispatch of `groups` workgroups, each scanning `scanned` elements (or candidates) with
    invocations enough that each gets about K of them (more lists cost merge steps, fewer a longer
    scan), or more where that would pass the loop budget (_max_scan); taking the chunks' lists,
    `lists` invocations."""
    local = lists if params["chunk_lists"] else 1
    while local * 2 <= lists and (local * 2 <= scanned // k or -(-scanned // local) > _max_scan(params["KP"])):
        local *= 2
    params = dict(params, LOCAL=local)
    spec = spec + [("GROUPS", "int32", groups)]
    bindings = inputs + outputs
    return Kernel("top_k", params, spec, bindings, writes=list(range(len(inputs), len(bindings))),
                  groups=grid_1d(groups, 1), local_size=(local, 1, 1), nodes=node.sources,
                  flops=groups * scanned, shared_memory_bytes=local * params["KP"] * _entry_bytes(params))


# Opset 10 takes K as an input instead of the attribute; 11 adds largest and sorted (their
# defaults are opset 10's behaviour) and negative axes, which the rule reads at every opset.
for _since, _fixed in ((1, ()), (10, (1,))):
    register("TopK", since=_since, dtypes=ARG_DTYPES, float16=True, constant_inputs=_fixed, limits=LIMITS,
             dtypes_doc="float32, float16, int32, int64 (indices int64)")(top_k)
