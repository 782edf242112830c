"""ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd, ReduceL1, ReduceL2, ReduceSumSquare,
ReduceLogSum and ReduceLogSumExp over any set of axes, on templates/reduce.comp.j2."""
from __future__ import annotations

from .. import expr as E
from ..dtypes import kernel_types
from ..errors import CompileError
from ..magnitudes import reduction
from ..shapes import contiguous_strides, merge_dims
from ..reduce_ops import REDUCE_OPS
from ..registry import FLOATS
from ..rows import Rows, constant_ints
from .kernel import Kernel, buffer_view, constant_input, grid_1d, register
from .strided_copy import strided_copy

# The opset from which each op takes its axes as an input instead of an attribute.
AXES_INPUT_SINCE = {"ReduceSum": 13}
REDUCE_LIMIT = "axes computed at run time; empty outputs"


def _axes(node, opset_axes_input: bool):
    if not opset_axes_input:
        return node.attrs.get("axes")
    data = constant_input(node, 1, "axes")
    return None if data is None else [int(a) for a in data.reshape(-1)]


def _reduce(node, target, axes_as_input: bool):
    x, out = node.inputs[0], node.outputs[0]
    rank = len(x.shape)
    axes = _axes(node, axes_as_input)
    if not axes:
        if node.attrs.get("noop_with_empty_axes", 0):
            return strided_copy(node, target, x, out, contiguous_strides(x.shape))
        axes = list(range(rank))
    return reduce_kernel(node, target, x, out, {a % rank for a in axes}, REDUCE_OPS[node.op_type])


def reduction_lanes(target, n_red: int, op: str, types) -> int:
    """Invocations that share one output's reduction: 1 (each walks its R elements alone) on CPU
    profiles and for short rows; on GPUs a power of two up to the workgroup with >= 4 elements
    each, so a global pool's 112x112 rows do not run serially on a few threads."""
    if (target.matmul == "texel" or n_red < 32 or op == "logsumexp" or types["T"].packed
            or types["T"].kind == "bool"):
        return 1
    lanes = 1
    while lanes * 2 <= min(target.elementwise_local, n_red // 4):
        lanes *= 2
    return lanes


def reduce_kernel(node, target, x, out, axes: set, op: str) -> list:
    """One kernel reducing x over `axes` (a set of dims) into out with `op` (a REDUCE_OPS value)."""
    rank = len(x.shape)
    if out.size == 0:
        raise CompileError(f"{node.op_type} '{node.name}' has an empty output {list(out.shape)}; "
                           "vkc does not run empty tensors.")
    # An empty reduced set leaves R = 0 and the output at the reduction's identity (0, -inf, ...).
    strides = contiguous_strides(x.shape)
    kept = merge_dims([(x.shape[a], strides[a]) for a in range(rank) if a not in axes]) or [(1, 0)]
    red = merge_dims([(x.shape[a], strides[a]) for a in range(rank) if a in axes]) or [(1, 0)]
    n_red = 1
    for size, _ in red:
        n_red *= size
    spec = [("TOTAL", "int32", out.size), ("R", "int32", n_red)]
    spec += [(f"K{d}", "int32", s) for d, (s, _) in enumerate(kept)]
    spec += [(f"KS{d}", "int32", st) for d, (_, st) in enumerate(kept)]
    spec += [(f"R{d}", "int32", s) for d, (s, _) in enumerate(red)]
    spec += [(f"RS{d}", "int32", st) for d, (_, st) in enumerate(red)]
    local = target.elementwise_local
    types = kernel_types(out)
    # exp and log: GLSL's in float, expr.HELPERS' in double
    r = E.Renderer(types["ACC"])
    exp, log = (r.helper("dexp", types["ACC"]), r.helper("dlog", types["ACC"])) \
        if types["ACC"].glsl == "double" else ("exp", "log")
    lanes = reduction_lanes(target, n_red, op, types)
    params = dict(LOCAL=local, op=op, kept=len(kept), reduced=len(red), EXP=exp, LANES=lanes,
                  LOG=log, helpers=list(r.helpers.values()), **types)
    words = -(-out.size // types["T"].per_word) * lanes  # bool outputs: a packed word per invocation
    return [Kernel("reduce", params, spec, [buffer_view(x), buffer_view(out)], writes=[1],
                   groups=grid_1d(words, local), local_size=(local, 1, 1), nodes=node.sources,
                   flops=x.size,
                   shared_memory_bytes=local * types["ACC"].bits // 8 if lanes > 1 else 0)]


def _rows(graph, node, rows: Rows):
    """A reduction that keeps the selected axis (the ReduceMean/Sub/Pow/Sqrt/Div chain of older
    LayerNorm exports, op by op)."""
    rank = len(node.inputs[0].shape)
    axes = node.attrs.get("axes")
    if axes is None and node.input(1) is not None:
        axes = constant_ints(node.input(1))
        if axes is None:
            return None
    if not axes:
        reduced = set() if node.attrs.get("noop_with_empty_axes", 0) else set(range(rank))
    else:
        reduced = {a % rank for a in axes}
    kept = [i for i in range(rank) if node.attrs.get("keepdims", 1) or i not in reduced]
    axis = kept[rows.axis]
    return None if axis in reduced else [Rows(axis, rows.start, rows.stop)]


def _register(op_type: str) -> None:
    # ReduceMax and ReduceMin of bool (opset 20) are any and all; sums and products of integers
    # wrap around as onnxruntime's do (a count of mask elements: Mask2Former's decoder).
    dtypes = FLOATS + ("float64",) + (("bool",) if op_type in ("ReduceMax", "ReduceMin") else ()) \
        + (("int32", "int64") if op_type in ("ReduceSum", "ReduceProd") else ())

    magnitude = reduction(REDUCE_OPS[op_type])

    @register(op_type, since=1, dtypes=dtypes, limits=REDUCE_LIMIT, magnitude=magnitude,
              row_wise=_rows)
    def lower_attr_axes(node, target):
        return _reduce(node, target, axes_as_input=False)

    @register(op_type, since=AXES_INPUT_SINCE.get(op_type, 18), constant_inputs=(1,),
              dtypes=dtypes, limits=REDUCE_LIMIT, magnitude=magnitude, row_wise=_rows)
    def lower_input_axes(node, target):
        return _reduce(node, target, axes_as_input=True)


for _op in REDUCE_OPS:
    _register(_op)
