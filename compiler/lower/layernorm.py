"""LayerNormalization (opset 17): normalize over the dims [axis, rank) of X, then scale and shift;
optionally also output the Mean and InvStdDev of every row. On templates/layernorm.comp.j2, which
also serves com.microsoft's SkipLayerNormalization and SkipSimplifiedLayerNormalization (a residual
sum normalized in the same kernel, RMS normalization) and the vkc.LayerNorm nodes that
passes/fuse_layernorm.py makes of older exporters' op chains.

Rows (the dims before `axis`) are independent; each is D = prod(X.shape[axis:]) contiguous
elements. Transformer rows are long (D = 64..4096) and few, so one workgroup reduces one row
cooperatively (see the template) instead of one invocation walking a whole row.
"""
from __future__ import annotations

import numpy as np

from ..dtypes import kernel_types, texel_format
from ..errors import CompileError
from ..ir import Node, Value
from ..magnitudes import normalization
from ..shapes import contiguous_strides, merge_dims, prod
from ..registry import FLOATS
from ..registry import shape_of_input0
from ..rows import Rows
from .kernel import Kernel, grid_1d, register, texel_reads

LIMITS = "stash_type other than 1 (the statistics are computed in float32 only)"


def _broadcast_terms(node, v, norm_shape, what):
    """How a row element's index `col` (0..D-1) maps to an element of `v` (Scale or B), which
    ONNX lets be unidirectionally broadcastable to X.shape[axis:]: a sum of terms
    (col / DIV) % MOD * STRIDE, one per run of dims `v` does not broadcast, as
    [(div, mod, stride)] with mod 0 for the outermost dim (col < D needs no modulo there).
    A full-shape operand is the single term col * 1; a [D'] suffix col % D'."""
    shape = list(v.shape)
    if len(shape) > len(norm_shape) or any(
            s not in (1, n) for s, n in zip(shape[::-1], norm_shape[::-1])):
        raise CompileError(f"{node.op_type} '{node.name}': {what} '{v.name}' of shape {shape} "
                           f"does not broadcast to the normalized shape {list(norm_shape)} "
                           f"(X's dims from axis on).")
    shape = [1] * (len(norm_shape) - len(shape)) + shape
    strides = contiguous_strides(shape)
    dims = merge_dims([(n, 0 if s == 1 else st) for n, s, st in zip(norm_shape, shape, strides)])
    terms, div = [], 1
    for i in range(len(dims) - 1, -1, -1):
        size, stride = dims[i]
        if stride:
            terms.append((div, 0 if i == 0 else size, stride))
        div *= size
    return terms[::-1]


# Most row elements an invocation keeps in registers: the row is then read from memory once
# (0: every pass re-reads it, as the texel path on lavapipe does). FEW_LANES: where the target
# adds within subgroups, a row would take as few invocations as keep it within that (one
# subgroup for D up to 1024): off, as it gains nothing on BERT-base or ViT-B/16
# (`python3 -m benchmarks.gpu.profile_variants fp16 bert:1 default,ln-few,ln-reread`).
ROW_REGISTERS = 32
FEW_LANES = False


def _local_size(d: int, target, texel: bool) -> int:
    """Invocations per row: a power of two (the tree reduction halves it), at least a subgroup,
    at most 256 (and the device's limit); about D/4, so that every invocation has a few
    elements to sum before the shared-memory reduction, or where subgroups add (and the row
    is held in registers) the fewest that hold at most ROW_REGISTERS elements each."""
    cap = min(256, target.max_invocations)
    local = min(max(1, target.subgroup_size), cap)
    per_lane = ROW_REGISTERS if (FEW_LANES and ROW_REGISTERS and target.subgroup_reductions
                                 and not texel) else 4
    while local < cap and local * per_lane < d:
        local *= 2
    return local


def _row_registers(d: int, local: int, texel: bool) -> int:
    """Row elements each invocation holds (0: the kernel re-reads the row in every pass)."""
    e = -(-d // local)
    return e if ROW_REGISTERS and not texel and e <= ROW_REGISTERS else 0


def _present(v):
    """An optional input or output the node uses: absent ones are None or named ""."""
    return v if v is not None and v.name else None


def _skip_broadcast(node, x, skip) -> bool:
    """Whether the residual `skip` repeats over X's leading dims (a [S, D] position table added
    to a [B, S, D] input): its shape, leading 1s dropped, must be a suffix of X's shape."""
    shape = list(skip.shape)
    while shape and shape[0] == 1 and len(shape) > 1:
        shape.pop(0)
    if len(shape) > len(x.shape) or list(x.shape[len(x.shape) - len(shape):]) != shape:
        raise CompileError(f"{node.op_type} '{node.name}': the residual input '{skip.name}' of "
                           f"shape {list(skip.shape)} is not '{x.name}' {list(x.shape)} nor "
                           "repeated over its leading dims.")
    return skip.size != x.size


def layernorm_kernels(node, target, *, x, scale, axis: int, epsilon: float, bias=None,
                      skip=None, prebias=None, outputs=(), simplified: bool = False,
                      channels: int = 0, strided: bool = False):
    """The kernel behind every normalization node: Y = (S - mean) * inv_std * scale + bias over
    the dims [axis, rank), where S is x, or x + skip (+ prebias) for a fused residual sum.
    simplified: RMS normalization (mean 0, inv_std = 1 / sqrt(mean(S^2) + eps)).
    channels: Scale and B hold one value a row, row % channels (InstanceNormalization's per
    channel over rows (n, c)), instead of one a row element.
    outputs: (Y, Mean, InvStdDev, the sum S, Y2), the last four optional (None or unnamed); Y2 is
    Y again in another dtype (float16 for the next product: passes/store_casts.py).
    strided: the normalized dims are the one axis `axis` of X, wherever it lies, and Y has X's
    layout (rows: the other dims in order; a channel axis normalized in place)."""
    rank = len(x.shape)
    if not -rank <= axis < rank:
        raise CompileError(f"{node.op_type} '{node.name}': axis {axis} is out of range for "
                           f"the rank-{rank} input '{x.name}'.")
    axis %= rank
    if x.size == 0:
        raise CompileError(f"{node.op_type} '{node.name}' has an empty input "
                           f"{list(x.shape)}; vkc does not run empty tensors.")
    y, mean_out, inv_out, sum_out, y2 = (list(map(_present, outputs)) + [None] * 5)[:5]
    if simplified and mean_out is not None:
        raise CompileError(f"{node.op_type} '{node.name}' asks for the Mean output "
                           f"'{mean_out.name}', which RMS normalization does not compute.")
    if sum_out is not None and skip is None:
        raise CompileError(f"{node.op_type} '{node.name}' asks for the residual sum output "
                           f"'{sum_out.name}' without a residual input.")

    norm_shape = x.shape[axis:axis + 1] if strided else x.shape[axis:]
    d = prod(norm_shape)
    rows = x.size // d
    inner = prod(x.shape[axis + 1:]) if strided else 1
    operands = [("S", scale, "Scale")] if not channels else []
    operands += [("B", bias, "B")] if bias is not None and not channels else []
    operands += [("P", prebias, "the residual bias")] if prebias is not None else []
    terms = {prefix: _broadcast_terms(node, v, norm_shape, what) for prefix, v, what in operands}
    skip_broadcast = skip is not None and _skip_broadcast(node, x, skip)

    spec = [("ROWS", "int32", rows), ("D", "int32", d), ("EPS", "float32", float(epsilon))]
    spec += [("INNER", "int32", inner)] if strided else []
    spec += [("CHANNELS", "int32", channels)] if channels else []
    spec += [("SKIP_SIZE", "int32", skip.size)] if skip_broadcast else []
    for prefix, prefix_terms in terms.items():
        for i, (div, mod, stride) in enumerate(prefix_terms):
            spec += [(f"{prefix}DIV{i}", "int32", div), (f"{prefix}STR{i}", "int32", stride)]
            spec += [(f"{prefix}MOD{i}", "int32", mod)] if mod else []

    # Bindings: the inputs, then the outputs, each named as in the template.
    ins = [("X", x), ("SKIP", skip), ("PREBIAS", prebias), ("SCALE", scale), ("BIAS", bias)]
    ins = [(name, v) for name, v in ins if v is not None]
    outs = [("Y", y), ("MEAN", mean_out), ("INV_STD", inv_out), ("SUM", sum_out), ("Y2", y2)]
    outs = [(name, v) for name, v in outs if v is not None]
    # float16 has no texel format yet: its inputs are read as storage buffers.
    texel = (all(texel_format(v.dtype) for _, v in ins)
             and texel_reads(target, *(v for _, v in ins)))
    local = _local_size(d, target, texel)
    mods = {prefix: [bool(m) for _, m, _ in t] for prefix, t in terms.items()}
    params = dict(LOCAL=local, E=_row_registers(d, local, texel), TEXEL=texel, SUBGROUP_SUM=target.subgroup_reductions and not texel,
                  STRIDED=strided,
                  inputs=[n for n, _ in ins],
                  outputs=[n for n, _ in outs], simplified=simplified,
                  has_skip=skip is not None, skip_broadcast=skip_broadcast,
                  has_prebias=prebias is not None, has_bias=bias is not None,
                  has_mean=mean_out is not None, has_inv=inv_out is not None,
                  has_sum=sum_out is not None, has_y2=y2 is not None, per_channel=bool(channels),
                  scale_mods=mods.get("S", []),
                  bias_mods=mods.get("B", []), prebias_mods=mods.get("P", []),
                  # T: the inputs' and statistics' type; TY: Y's (float16 under float32 inputs
                  # where a Cast was absorbed: passes/store_casts.py)
                  **kernel_types(x), TY=kernel_types(y)["T"], TY2=kernel_types(y2 or y)["T"])
    bindings = [v for _, v in ins] + [v for _, v in outs]
    return [Kernel("layernorm", params, spec, bindings,
                   writes=list(range(len(ins), len(bindings))),
                   groups=grid_1d(rows, 1), local_size=(local, 1, 1), nodes=node.sources,
                   flops=(8 + (skip is not None) + (prebias is not None)) * x.size,
                   shared_memory_bytes=np.dtype(params["ACC"].name).itemsize * local,
                   texel_buffers={j: texel_format(v.dtype) for j, (_, v) in enumerate(ins)}
                   if texel else {})]


def _normalizes_axis_in_place(node, axis: int) -> bool:
    """Whether this LayerNormalization could normalize X's axis `axis` in place (X's layout, rows
    the other dims): only Y asked for, statistics in float32, Scale and B one value along it."""
    present = [o for o in node.outputs if o is not None and o.name]
    x = node.inputs[0]
    return (present == [node.outputs[0]] and node.attrs.get("stash_type", 1) == 1 and
            node.attrs.get("axis", -1) % len(x.shape) == len(x.shape) - 1 and
            all(v is None or v.size in (1, x.shape[-1]) for v in node.inputs[1:3]))


def _rows(graph, node, rows: Rows):
    """Rows before the normalized axes are rows of X (Scale and B span the normalized dims)."""
    rank = len(node.inputs[0].shape)
    first = node.attrs.get("axis", -1) % rank
    short = all(len(v.shape) <= rank - first for v in node.inputs[1:] if v is not None)
    return [rows] if rows.axis < first and short else None


def _skip_output_types(node) -> None:
    """The outputs of a com.microsoft Skip*LayerNormalization (ONNX shape inference leaves them
    untyped): output and sum are the input's, mean and inv_std_var one per row."""
    for out, shape in zip(node.outputs, _skip_output_shapes([node.inputs[0].shape], {}, [])):
        if out.shape is None:  # unnamed (absent) outputs too: every value needs a shape
            out.dtype, out.shape = node.inputs[0].dtype, shape


def _skip_output_shapes(shapes: list, attrs: dict, dtypes: list) -> list:
    """Output, mean, inv_std_var and the residual sum's shapes (registry output_shapes)."""
    x = tuple(shapes[0])
    return [x, x[:-1] + (1,), x[:-1] + (1,), x]


@register("LayerNormalization", since=17, dtypes=FLOATS, limits=LIMITS,
          magnitude=normalization(scale=1, bias=2), row_wise=_rows, store_cast_absorbing=True,
          normalizes_axis_in_place=_normalizes_axis_in_place)
def lower_layernorm(node, target):
    _stash_type(node)
    # normalized_axis (passes/transposes_in_place.py): X's axis normalized in place, X's layout kept
    axis = node.attrs.get("normalized_axis", node.attrs.get("axis", -1))
    return layernorm_kernels(node, target, x=node.inputs[0], scale=node.input(1),
                             bias=node.input(2), axis=axis, epsilon=node.attrs.get("epsilon", 1e-5),
                             outputs=node.outputs, strided="normalized_axis" in node.attrs)


def normalized_first(node, target, lower) -> list[Kernel]:
    """A product normalizing its A (passes/normalized_products.py: the norm's scale the last of
    its own inputs) whose kernel cannot: the norm's kernel into scratch, in the dtype the norm
    stored, then the plain product of it (`lower` lowers that)."""
    slot = node.attrs["n_op_inputs"] - 1
    x, scale = node.inputs[0], node.inputs[slot]
    normalized = node.attrs["normalized"]
    h = Value(f"{x.name}/normalized", np.dtype(normalized["dtype"]), tuple(x.shape))
    attrs = {k: v for k, v in node.attrs.items() if k != "normalized"}
    product = Node(node.op_type, node.name, [h, *node.inputs[1:slot], *node.inputs[slot + 1:]], list(node.outputs),
                   {**attrs, "n_op_inputs": slot}, node.domain, node.sources)
    return layernorm_kernels(node, target, x=x, scale=scale, axis=-1, epsilon=normalized["epsilon"],
                             outputs=[h], simplified=True) + lower(product, target)


def _last_axis(x, scale, axis: int, epsilon: float):
    """(X, Scale, epsilon) where the normalization is of X's last axis by a Scale of that length;
    else None."""
    rank = len(x.shape)
    if axis % rank != rank - 1 or scale is None or tuple(scale.shape) != (x.shape[-1],):
        return None
    return x, scale, epsilon


def _rms_norm(node, scale_slot: int, outputs: int):
    """(X, Scale, epsilon) of an RMS normalization of X's last axis whose only output is Y (the
    first of at most `outputs` outputs, the others absent), statistics in float32; else None."""
    present = [o for o in node.outputs if o is not None and o.name]
    if node.attrs.get("stash_type", 1) != 1 or len(present) != 1 or present[0] is not node.outputs[0] or \
            len(node.outputs) > outputs:
        return None
    return _last_axis(node.inputs[0], node.input(scale_slot), node.attrs.get("axis", -1),
                      node.attrs.get("epsilon", 1e-5))


def _fused_rms_norm(node):
    """A vkc.LayerNorm that is RMS normalization without the residual sum and bias, Y its one
    output (in its own dtype or another: Y2)."""
    if not node.attrs.get("simplified") or node.input(1) is not None or node.input(3) is not None or \
            tuple(node.attrs["outputs"]) not in (("Y",), ("Y2",)):
        return None
    return _last_axis(node.inputs[0], node.input(2), node.attrs["axis"], node.attrs["epsilon"])


def _stash_type(node) -> None:
    stash = node.attrs.get("stash_type", 1)
    if stash != 1:
        raise CompileError(f"{node.op_type} '{node.name}': stash_type {stash} is not supported; "
                           "vkc computes the statistics in float32 (stash_type 1) only.")


@register("RMSNormalization", since=23, schema=23, dtypes=FLOATS, limits=LIMITS,
          magnitude=normalization(scale=1, centered=False), row_wise=_rows, store_cast_absorbing=True,
          rms_norm=lambda node: _rms_norm(node, 1, 1))
def lower_rms_normalization(node, target):
    _stash_type(node)
    return layernorm_kernels(node, target, x=node.inputs[0], scale=node.inputs[1],
                             axis=node.attrs.get("axis", -1),
                             epsilon=node.attrs.get("epsilon", 1e-5), outputs=node.outputs,
                             simplified=True)


def _simplified_output_types(node) -> None:
    """SimplifiedLayerNormalization has no ONNX schema (onnxruntime declares it in the ONNX
    domain): Y is X's, inv_std_var one per row, 1 over the normalized dims."""
    x = node.inputs[0]
    axis = node.attrs.get("axis", -1) % len(x.shape)
    for i, out in enumerate(node.outputs):
        if out.shape is None:
            out.dtype = x.dtype
            out.shape = tuple(x.shape) if i == 0 else tuple(x.shape[:axis]) + (1,) * (len(x.shape) - axis)


# onnxruntime's RMS normalization before ONNX had one (what onnxruntime-genai's model builder
# writes): declared by onnxruntime in the ONNX domain, outputs Y and optionally inv_std_var.
@register("SimplifiedLayerNormalization", dtypes=FLOATS, limits=LIMITS, schema=None,
          output_shape=shape_of_input0, output_types=_simplified_output_types,
          magnitude=normalization(scale=1, centered=False), row_wise=_rows, store_cast_absorbing=True,
          rms_norm=lambda node: _rms_norm(node, 1, 2))
def lower_simplified_layernorm(node, target):
    _stash_type(node)
    outputs = list(node.outputs) + [None]
    return layernorm_kernels(node, target, x=node.inputs[0], scale=node.inputs[1],
                             axis=node.attrs.get("axis", -1),
                             epsilon=node.attrs.get("epsilon", 1e-5),
                             outputs=[outputs[0], None, outputs[1]], simplified=True)


# com.microsoft's fused transformer normalizations (what onnxruntime's transformer optimizer
# writes): the residual sum input + skip (+ bias) normalized over the last dim.
SKIP_LIMITS = "a skip that is neither the input's shape nor repeated over its leading dims"


@register("SkipLayerNormalization", domain="com.microsoft", dtypes=FLOATS, limits=SKIP_LIMITS,
          output_shape=shape_of_input0, output_shapes=_skip_output_shapes,
          magnitude=normalization(scale=2, bias=3, skip=1),
          store_cast_absorbing=True, output_types=_skip_output_types)
def lower_skip_layernorm(node, target):
    return layernorm_kernels(node, target, x=node.inputs[0], skip=node.inputs[1],
                             scale=node.input(2), bias=node.input(3), prebias=node.input(4),
                             axis=-1, epsilon=node.attrs.get("epsilon", 1e-12),
                             outputs=node.outputs)


def _skip_rms_norm(node):
    """SkipSimplifiedLayerNormalization's residual sum and norm apart: without the bias, the
    statistics outputs, or a skip of another shape."""
    a, b, scale = node.inputs[0], node.input(1), node.input(2)
    outputs = list(node.outputs) + [None] * 4
    if b is None or node.input(3) is not None or tuple(a.shape) != tuple(b.shape) or scale is None or \
            any(o is not None and o.name for o in outputs[1:3]):
        return None
    total = outputs[3] if outputs[3] is not None and outputs[3].name else None
    return a, b, scale, node.attrs.get("epsilon", 1e-12), node.outputs[0], total


@register("SkipSimplifiedLayerNormalization", domain="com.microsoft", dtypes=FLOATS,
          limits=SKIP_LIMITS + "; the mean output (RMS normalization has none)",
          output_shape=shape_of_input0, output_shapes=_skip_output_shapes,
          magnitude=normalization(scale=2, skip=1, centered=False),
          store_cast_absorbing=True, output_types=_skip_output_types, skip_rms_norm=_skip_rms_norm)
def lower_skip_simplified_layernorm(node, target):
    return layernorm_kernels(node, target, x=node.inputs[0], skip=node.inputs[1],
                             scale=node.input(2), prebias=node.input(3), axis=-1,
                             epsilon=node.attrs.get("epsilon", 1e-12), outputs=node.outputs,
                             simplified=True)


@register("vkc.LayerNorm", dtypes=FLOATS,
          magnitude=normalization(scale=2, bias=3, skip=1, centered=lambda node: not node.attrs.get("simplified")),
          store_cast_absorbing=True, rms_norm=_fused_rms_norm)
def lower_fused_layernorm(node, target):
    """A normalization passes/fuse_layernorm.py made: inputs (X, skip or None, Scale, B or None);
    attribute `outputs` names what each output is, among Y, MEAN, INV_STD, SUM (the residual
    sum X + skip) and Y2 (Y in another dtype); `simplified` 1 for RMS normalization."""
    role = dict(zip(node.attrs["outputs"], node.outputs))
    return layernorm_kernels(node, target, x=node.inputs[0], skip=node.input(1),
                             scale=node.input(2), bias=node.input(3), axis=node.attrs["axis"],
                             epsilon=node.attrs["epsilon"],
                             outputs=[role.get(r) for r in ("Y", "MEAN", "INV_STD", "SUM", "Y2")],
                             simplified=bool(node.attrs["simplified"]))
