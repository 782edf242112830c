"""The op registry: what vkc does with each ONNX op, declared where the op is handled.

An op's module declares it once, next to the code that handles it:

- `@register("LRN", dtypes=FLOAT32, limits=...)` on a lowering rule (compiler/lower/<family>.py):
  the rule turns a node into Kernels;
- `declare("Reshape", handled_by="view (no kernel)", ...)` in a pass that removes the op before
  lowering (views, folds, fused elementwise chains).

A declaration carries everything the rest of the compiler asks about an op: the opset its rule
starts at, the newest schema version it implements (`schema`; see find_rule for newer ones), the
run-time dtypes its kernel computes (checked here, before the rule runs, so rules never test
dtypes themselves), the inputs that must be compile-time constants (the ONNX backend freezes
those), and what is not supported (docs/SUPPORT.md). `compiler.ops` imports every module
that declares, so nothing is listed by hand.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import onnx

from .errors import CompileError, UnsupportedOpsError
from .ir import Node, Value

FLOAT32 = ("float32",)
# What the compute kernels (matmul, conv, pooling, softmax, normalization, reductions) take:
# float16 in 16-bit-storage buffers, computed and accumulated in float32 (compiler/dtypes.py).
FLOATS = ("float32", "float16")
# The phrase of every error for a dtype a kernel does not compute (onnx_backend counts those
# cases as skipped, not failed).
DTYPE_PHRASE = "vkc's kernels do not compute"


ONNX_DOMAINS = ("", "ai.onnx")
# The opset every declaration was written against unless it says otherwise (`schema`): a schema
# version newer than this applies only where it changes nothing but the element types it allows.
REVIEWED_OPSET = 22


def op_key(op_type: str, domain: str = "") -> str:
    """How the registry names an op: "Conv" for ONNX's own, "com.microsoft.Attention" for
    another domain's (vkc's internal ops are "vkc.Elementwise", ...)."""
    return op_type if domain in ONNX_DOMAINS else f"{domain}.{op_type}"


@dataclass(frozen=True)
class OpRule:
    op_type: str                            # the registry's key (op_key): domain-qualified
    since: int                              # the op's since-version this rule handles from
    lower: Callable | None                  # Node, Target -> [Kernel]; None: a pass handles it
    module: str                             # the module that declared it
    handled_by: str = ""                    # for ops a pass handles: how ("view (no kernel)", ...)
    # Run-time dtypes the kernel computes on, checked on every input that is not a constant input
    # and on the first output; None: the rule (or the pass) checks what it takes itself.
    dtypes: tuple[str, ...] | None = FLOAT32
    dtypes_doc: str = ""                    # how docs/SUPPORT.md describes them, when not `dtypes`
    constant_inputs: tuple[int, ...] = ()   # input slots that must be compile-time constants
    limits: str = "-"                       # what is not supported, for docs/SUPPORT.md
    # For a rule that checks dtypes itself (dtypes None): whether it computes on float16 tensors
    # (the precision pass asks, compiler/passes/precision.py).
    float16: bool = False
    # The newest schema version of the op this rule implements (attributes, inputs, semantics);
    # None: every version (ops folded by onnx's reference evaluator, which follows each schema).
    schema: int | None = REVIEWED_OPSET
    # Whether a node of the op is a no-op: its first output equals its first input (an Identity,
    # a Cast to the dtype it has, a Reshape to the shape it has). fold_constants then hands its
    # readers the input itself, before any pattern pass looks. None: never.
    noop: Callable[[Node], bool] | None = None
    # For an op onnx has no schema for (another domain's): its inputs' shapes and element types
    # (numpy dtypes; None where absent or unknown) and attributes -> its first output's shape,
    # which onnx's shape inference cannot give
    # (compiler/frontend.py asks, so that the values downstream of the op get shapes too).
    output_shape: Callable | None = None
    # The same for every output, where readers use more than the first: -> a shape per output
    # (None where unknown), elements of the first output's type.
    output_shapes: Callable | None = None
    # The input whose element type that first output has (GatherBlockQuantized's is its scales').
    output_dtype_from: int = 0
    # How large the op's result may grow from its inputs' largest magnitudes (compiler/magnitudes.py;
    # the float16 range pass asks); None: no larger than its inputs or an activation's.
    magnitude: Callable | None = None
    # What passes know of the op (declared here so that no pass lists op names):
    # row_wise: (graph, node, rows of its output) -> per input the rows of it to take (None: the
    # input stays), or None where the selection cannot move above the node (compiler/rows.py,
    # passes/sink_row_selection.py).
    row_wise: Callable | None = None
    # reshapes: the output is the input's bytes in another shape (a view, passes/views.py).
    reshapes: bool = False
    # store_cast_absorbing: the kernel can store its first output in float16 where only a Cast
    # to float16 reads it (passes/store_casts.py).
    store_cast_absorbing: bool = False
    # product: a matrix product whose kernel takes a fused epilogue, and how that kernel sees its
    # output: "matmul" (batch, m, n) or "conv" (image, channel, pixel) (epilogue_operands.py).
    product: str | None = None
    # pairs: the product's kernel takes a second product of the same activations, its weights
    # side by side with the first's, for one fused epilogue to read both (passes/paired_products.py).
    pairs: bool = False
    # normalizes_rows: the product's kernel can RMS-normalize A's rows as it reads them, given
    # the norm's input as A and its scale as input slot `normalizes_rows` (after the op's own
    # inputs), and its epsilon (passes/normalized_products.py); 0: it cannot.
    normalizes_rows: int = 0
    # rms_norm: node -> (X, Scale, epsilon) where the node is an RMS normalization of X's last
    # axis with one output, no residual sum and no bias, which its readers may compute
    # (passes/normalized_products.py); else None.
    rms_norm: Callable | None = None
    # skip_rms_norm: node -> (A, B, Scale, epsilon, Y, the sum output or None) where the node is
    # RMS normalization of the residual sum A + B (same shapes, no bias, no statistics outputs):
    # passes/fuse_layernorm.py splits it into the Add and the norm in a decode step; else None.
    skip_rms_norm: Callable | None = None
    # linear_in: node -> the input slots its result is linear in: an input scaled by a constant
    # scales the result by it (a matrix product without a bias; passes/scale_products.py).
    linear_in: Callable | None = None
    # evaluate: node, *input arrays -> output arrays, where fold_constants must not use onnx's
    # reference evaluator (passes/onnx_node.py).
    evaluate: Callable | None = None
    # unfolded: (graph, node) -> whether fold_constants leaves a node of constant inputs for a
    # pass to take (a block-quantized weight that its product dequantizes in registers).
    unfolded: Callable | None = None
    # output_types: node -> None, typing the outputs of an op ONNX shape inference does not know.
    output_types: Callable | None = None
    # reads_columns: the input slot (one, as a 1-tuple) the kernel can read as columns of a wider
    # tensor's rows, where the node's `input_columns` (first, width, shape) says so: a part of a
    # merged projection read without the Split's copy (passes/split_parts.py).
    reads_columns: tuple[int, ...] = ()
    # joins: (node, node) -> one node computing both, with an output each, where two nodes of the
    # op read neighbouring columns of one tensor (Q's and K's rotary embeddings), or None.
    joins: Callable | None = None
    # updates_in_place: (output, input) index pairs where the output is the input's tensor with
    # some of it written (a KV cache update): such a graph input and output of one shape become
    # bundle state by default (compiler/state.py).
    updates_in_place: tuple[tuple[int, int], ...] = ()
    # writes_rows: node -> (update, write indices or None, axis, mode, perm or None) where the
    # node writes its update's rows (read through perm: a prompt's head split) into its first
    # input's, from each batch's write index on, along axis (TensorScatter's linear or circular
    # mode); None where it does not.
    writes_rows: Callable | None = None
    # stores_rows: (node, output index, update, cache, write indices, axis, mode, perm) -> the
    # node storing that output (seen as `update`: it, or a view of all of it) into the rows of
    # `cache` (a view of the cache, in place) as writes_rows would, or None where its kernel
    # cannot (passes/cache_row_stores.py).
    stores_rows: Callable | None = None
    # writes_column_rows: node -> (packed tensor, (first column, columns a row), write indices or
    # None, axis, mode, perm or None) where the node writes, as writes_rows does, an update that is
    # columns of a wider tensor's rows (`input_columns`: a part of a packed projection,
    # passes/split_parts.py); None otherwise.
    writes_column_rows: Callable | None = None
    # carries_rows: (node, (first column, columns a row), cache, write indices, axis, mode, perm)
    # -> the node also copying those columns of its packed input's rows into the rows of `cache`
    # (in place) as writes_column_rows would, or None where its kernel cannot (V's rows, carried
    # by the kernel rotating Q and K: passes/cache_row_stores.py).
    carries_rows: Callable | None = None
    # decode_rotation: node -> a dict describing a decode step's rotary embedding that stores K's
    # row and carries V's into their caches, for a reader that rotates as it reads
    # (lower/rotary.py's _decode_rotation), or None.
    decode_rotation: Callable | None = None
    # absorbs_rotary: (node, rotary node, its decode_rotation) -> one node doing both, reading
    # the rotary's packed input, rotating Q and this step's K row as it reads them and storing
    # the K and V rows into the caches itself (passes/rotary_in_attention.py), or None.
    absorbs_rotary: Callable | None = None
    # reads_transposed: the kernel reads any input through a Transpose's permutation in place,
    # where the node's `input_perms` {input slot: perm} says so (passes/transposes_in_place.py).
    reads_transposed: bool = False
    # stores_transposed: (node, perm) -> whether its kernel can store its first output permuted by
    # perm, where the node's `output_perm` says so (its output is then the permuted tensor;
    # passes/transposes_in_place.py).
    stores_transposed: Callable | None = None
    # normalizes_axis_in_place: (node, axis) -> whether its kernel can normalize X's axis `axis`
    # where it lies, keeping X's layout, in place of its own last-axis normalization, where the
    # node's `normalized_axis` says so (passes/transposes_in_place.py).
    normalizes_axis_in_place: Callable | None = None
    # reads_permuted: (node, input slot, perm) -> the node reading that input through a Transpose
    # by perm in its own layout (the Transpose's input in place of its output: attention's
    # strides, a cache write's update), or None where its kernel cannot
    # (passes/transposes_in_place.py).
    reads_permuted: Callable | None = None
    # stores_permuted: (node, perm) -> the node storing its first output permuted by perm in its
    # own layout (the Transpose's output in its place: attention's output strides), or None.
    stores_permuted: Callable | None = None
    # before_transpose: (node, perm) -> (a node computing the same on its first input's Transpose
    # by perm's input, in that input's order; its result), where the node's result is then that
    # Transpose of this result (a rotary embedding of a head split: the rotation is per token and
    # head, in any order of the two), or None (passes/transposes_in_place.py).
    before_transpose: Callable | None = None
    # writes_int8_rows: (node, scales, scales out) -> a node making the same update into an int8
    # copy of the cache (its first input and output, retyped) and a float32 scale per row of the
    # last axis beside it (scales, a bundle state of its own; passes/int8_cache.py).
    writes_int8_rows: Callable | None = None
    # int8_operands: {input slot: the slot of its scales}: inputs the kernel can read as int8 with
    # a float32 scale per row of their last axis (an int8 KV cache; passes/int8_cache.py).
    int8_operands: dict | None = None

    @property
    def dtypes_text(self) -> str:
        return self.dtypes_doc or (", ".join(self.dtypes) if self.dtypes else "any")

    def computes(self, dtype: str) -> bool:
        """Whether the op's kernel (or the pass that handles it) computes on `dtype` tensors."""
        if self.dtypes is None:
            return dtype == "float16" and self.float16
        return dtype in self.dtypes


_RULES: dict[str, dict[int, OpRule]] = {}


def _add(rule: OpRule) -> None:
    versions = _RULES.setdefault(rule.op_type, {})
    if rule.since in versions:
        raise RuntimeError(f"{rule.op_type} since opset {rule.since} is declared twice "
                           f"({versions[rule.since].module} and {rule.module}).")
    versions[rule.since] = rule


def register(op_type: str, since: int = 1, *, domain: str = "",
             dtypes: tuple[str, ...] | None = FLOAT32, dtypes_doc: str = "",
             constant_inputs: tuple[int, ...] = (), limits: str = "-", float16: bool = False,
             schema: int | None = REVIEWED_OPSET, **facts):
    """Decorator: `fn(node, target) -> [Kernel]` lowers `op_type` (of `domain`) from opset
    `since` on. `facts`: what passes know of the op (OpRule's noop, row_wise, ...)."""
    def wrap(fn):
        _add(OpRule(op_key(op_type, domain), since, fn, fn.__module__, dtypes=dtypes,
                    dtypes_doc=dtypes_doc, constant_inputs=constant_inputs, limits=limits,
                    float16=float16, schema=schema, **facts))
        return fn
    return wrap


def declare(op_type: str, *, handled_by: str, module: str, domain: str = "",
            dtypes: tuple[str, ...] | None = None, dtypes_doc: str = "",
            constant_inputs: tuple[int, ...] = (), limits: str = "-",
            float16: bool = False, schema: int | None = REVIEWED_OPSET, **facts) -> None:
    """An op a pass removes before lowering (it never reaches a lowering rule)."""
    _add(OpRule(op_key(op_type, domain), 1, None, module, handled_by=handled_by, dtypes=dtypes,
                dtypes_doc=dtypes_doc, constant_inputs=constant_inputs, limits=limits,
                float16=float16, schema=schema, **facts))


def shape_of_input0(shapes: list, attrs: dict, dtypes: list) -> tuple | None:
    """output_shape of an op whose first output has its first input's shape."""
    return shapes[0] if shapes else None


def registered_ops() -> dict[str, list[int]]:
    """Every declared op (kernel rules, pass-handled and internal `vkc.` ops) -> its versions."""
    return {op: sorted(v) for op, v in _RULES.items()}


def find_rule(op_type: str, domain: str, opset: int) -> OpRule | None:
    """The declaration that applies to `op_type` at `opset`: onnx.defs gives the op's
    since_version there, and the newest declaration at or below it applies, provided it
    implements that schema version: one newer than its `schema` must change nothing but the
    element types the op allows (the dtype checks refuse those a kernel does not compute). An
    op whose newer schema changed otherwise (an attribute, an input) is not supported there."""
    versions = _RULES.get(op_key(op_type, domain))
    if not versions:
        return None
    if domain not in ONNX_DOMAINS or op_type.startswith("vkc."):
        return versions[max(versions)]  # other domains' ops have one version here
    try:
        since = onnx.defs.get_schema(op_type, max_inclusive_version=opset).since_version
    except onnx.defs.SchemaError:  # no ONNX schema (a key of another domain): nothing to compare
        usable = [v for v in versions if v <= opset]
        return versions[max(usable)] if usable else None
    usable = [v for v in versions if v <= since]
    if not usable:
        return None
    rule = versions[max(usable)]
    if rule.schema is not None and since > rule.schema and \
            not _types_only_since(op_type, max(rule.schema, rule.since), since):
        return None
    return rule


def _signature(schema) -> tuple:
    """What a schema version says beyond its element types: attributes (with defaults), inputs
    and outputs, and each constraint's name."""
    return ({k: (a.type, a.required, a.default_value.SerializeToString())
             for k, a in schema.attributes.items()},
            [(p.name, p.type_str, p.option) for p in schema.inputs],
            [(p.name, p.type_str, p.option) for p in schema.outputs],
            schema.min_input, schema.max_input, schema.min_output, schema.max_output,
            sorted(c.type_param_str for c in schema.type_constraints))


def _types_only_since(op_type: str, reviewed: int, since: int) -> bool:
    """Whether every schema version of `op_type` after opset `reviewed`, up to `since`, changed
    only the element types it allows."""
    base = _signature(onnx.defs.get_schema(op_type, max_inclusive_version=reviewed))
    return all(_signature(onnx.defs.get_schema(op_type, max_inclusive_version=v)) == base
               for v in range(reviewed + 1, since + 1))


def fact(node: Node, name: str, opset: int | None = None):
    """What the declaration of `node`'s op says of `name` (an OpRule field): the rule for
    `opset`, or where none is given, any of the op's rules that says it; None for ops nothing
    declares."""
    if opset is not None:
        rule = find_rule(node.op_type, node.domain, opset)
        return getattr(rule, name) if rule is not None else None
    for rule in _RULES.get(op_key(node.op_type, node.domain), {}).values():
        if getattr(rule, name):
            return getattr(rule, name)
    return None


def is_supported(op_type: str, domain: str, opset: int) -> bool:
    return find_rule(op_type, domain, opset) is not None


def constant_inputs(op_type: str, domain: str = "") -> tuple[int, ...]:
    """Input slots of `op_type` that must be compile-time constants, under any of its rules."""
    rules = _RULES.get(op_key(op_type, domain), {}).values()
    return tuple(sorted({i for r in rules for i in r.constant_inputs}))


def unsupported_dtype(node: Node, v: Value, what: str) -> CompileError:
    return CompileError(f"{node.op_type} '{node.name}' computes {what} on {np.dtype(v.dtype).name} "
                        f"tensor '{v.name}' at run time; {DTYPE_PHRASE} that in this version.")


def check_dtypes(rule: OpRule, node: Node) -> None:
    """Refuse a node whose tensors have a dtype its kernel does not compute."""
    if rule.dtypes is None:
        return
    n_own = node.attrs.get("n_op_inputs", len(node.inputs))
    values = [node.inputs[i] for i in range(n_own) if i not in rule.constant_inputs]
    for v in [*values, node.outputs[0]]:
        if v is not None and np.dtype(v.dtype).name not in rule.dtypes:
            dtype = np.dtype(v.dtype).name
            raise CompileError(f"{node.op_type} '{node.name}' computes on {dtype} tensor '{v.name}' "
                               f"at run time; {DTYPE_PHRASE} {node.op_type} on {dtype} in this "
                               f"version ({', '.join(rule.dtypes)} only).")


def lower_node(node, target, opset: int) -> list:
    """The Kernels of one node: its rule at the graph's opset, after the rule's dtype check.
    `vkc check` calls this too, so it refuses a node exactly as compiling would."""
    rule = find_rule(node.op_type, node.domain, opset)
    if rule is None:
        raise UnsupportedOpsError({node.op_type: [node.name]})
    if rule.lower is None:
        raise CompileError(f"{node.op_type} '{node.name}' reached lowering, but {rule.module} "
                           f"should have {rule.handled_by or 'removed it'} (a vkc bug).")
    check_dtypes(rule, node)
    return rule.lower(node, target)
