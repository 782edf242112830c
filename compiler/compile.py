"""compile_model: the whole pipeline, ONNX in, .vkb bytes out."""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx

from bundles import write_bundle
from bundles.dtypes import DTYPES
from bundles.variants import Part, combine

from .argmax_output import add_argmax_output
from .assemble import assemble_parts
from .builder_cache import pinned_for_context
from .constant_ifs import take_constant_branches
from .errors import CompileError, UnsupportedOpsError
from .float16_check import float16_check
from .frontend import initializer_arrays, load_model, model_digest
from .growing_cache import Form, fixed_capacity
from .host import resolve_target
from .lower import lower_graph
from .memory import plan_memory
from .ops import constant_inputs, unsupported_ops
from .passes import fold_constants, run_passes
from .passes.precision import Precision
from .passes.int8_cache import kv_cache_option
from .passes.quantize_weights import WeightQuantization
from .state import find_state, state_updates
from .targets import DEFAULT_TARGETS, TARGETS, Target
from .top_k_output import add_top_k_output


def require_static_shapes(graph) -> None:
    """Kernels are specialized to shapes: every tensor needs one once the passes have run."""
    for v in graph.values():
        if v.shape is None:
            by = f" (written by {v.producer.op_type} '{v.producer.name}')" if v.producer else ""
            raise CompileError(f"tensor '{v.name}'{by} has no static shape after shape inference; "
                               "pin the model's inputs with --input-shape.")


def require_constant_shape_inputs(graph) -> None:
    """A node whose output shape an input sets (TopK's K, Tile's repeats) that the computation
    gives: refused, naming the node, before anything asks for that shape."""
    for node in graph.nodes:
        if all(v.shape is not None for v in node.outputs if v.name):
            continue
        fixed = [node.input(i) for i in constant_inputs(node.op_type, node.domain)]
        computed = [v for v in fixed if v is not None and not v.is_constant]
        if computed:
            inputs = values_read(graph, computed[0])
            why = (f"; it depends on the values of the input{'s' if len(inputs) > 1 else ''} "
                   + ", ".join(f"'{v.name}'" for v in inputs) + " (data-dependent shapes, such as a mixture "
                   "of experts splitting its tokens by expert): export a form whose shapes do not depend on the "
                   "data (for a mixture of experts, every expert applied to every token, weighted by the router)" if inputs else
                   "; it depends only on shapes: pin the model's inputs with --input-shape")
            raise CompileError(f"{node.op_type} '{node.name}': '{computed[0].name}' comes from the computation; a "
                               f"bundle's shapes are fixed at compile time, so vkc needs it constant{why}.")


def values_read(graph, value) -> list:
    """The graph inputs whose values (not only their shapes: Shape and Size read no values)
    a value is computed from."""
    inputs = {id(v) for v in graph.inputs}
    seen, stack, found = set(), [value], []
    while stack:
        v = stack.pop()
        if id(v) in seen or v.is_constant:
            continue
        seen.add(id(v))
        if id(v) in inputs:
            found.append(v)
        elif v.producer is not None and v.producer.op_type not in ("Shape", "Size"):
            stack.extend(i for i in v.producer.inputs if i is not None)
    return sorted(found, key=lambda v: v.name)


def compile_model(model: onnx.ModelProto | str | Path | bytes, *,
                  input_shapes: dict[str, list[int]] | None = None,
                  target: "str | Target | Sequence[str | Target]" = DEFAULT_TARGETS,
                  variants: "Sequence[dict[str, list[int]]] | None" = None, precision: str = "fp32",
                  io: str | None = None, keep_fp32=(), keep_intermediates: bool = False,
                  state="auto", weights: str | None = None, weights_block: int | None = None,
                  argmax_output: str | None = None, top_k_output: str | None = None,
                  max_context: int | None = None, kv_cache: str | None = None) -> bytes:
    """Compile an ONNX model (proto, path or bytes) into a .vkb bundle. precision="fp16" stores
    weights and activations as float16 (passes/precision.py); inputs and outputs stay float32
    unless io="fp16"; the nodes named in keep_fp32 stay float32.

    state: graph inputs the bundle keeps on the device between runs, each fed by an output
    (compiler/state.py): "auto" (caches an op updates in place: TensorScatter's, GroupQueryAttention's),
    "none", or input=output pairs.

    weights: "int8", "int4" or "int4-sym" quantizes float MatMul/Gemm weights (and the token
    embedding) block-wise along K, weights_block values a block (32 by default), stored as
    com.microsoft MatMulNBits stores them (passes/quantize_weights.py); None keeps them float.

    argmax_output: an output's name ("logits"): the bundle also outputs `logits_argmax`, the
    index of the largest value of its last row, computed on the device (compiler/argmax_output.py),
    which Model.generate's greedy decoding copies back instead of the logits.

    top_k_output: an output and a K, "logits:40": the bundle also outputs `logits_topk_values` and
    `logits_topk_indices`, the K largest values of its last row and their indices, computed on the
    device (compiler/top_k_output.py), which Model.generate's sampling with top_k <= K copies back
    instead of the logits.

    max_context: the cache rows of a decoder whose cache grows each run (optimum's
    text-generation-with-past export: present = Concat(past, new)); it is compiled to a cache of
    that many rows kept as state, for each variant's input_ids [1, S], with inputs input_ids and
    position (compiler/growing_cache.py); or of onnxruntime-genai's model builder's export (caches
    GroupQueryAttention updates in place): its caches and attention_mask pinned to that many rows
    (compiler/builder_cache.py), inputs input_ids and attention_mask.

    kv_cache: "int8" holds the KV caches kept as state as int8, with a float32 scale per cached row
    (passes/int8_cache.py); None keeps them in the model's float type (float16 under fp16).

    keep_intermediates (for `vkc verify --layers`, one variant only): every value a dispatch
    writes keeps arena bytes of its own to the end of the run and is an extra output, listed in
    the manifest's "intermediates" with the dispatch that wrote it; the fusions are unchanged.

    target: a profile (compiler.targets: "nvidia", "mobile", "lavapipe", "generic", or "host"), or
    several (a list, or names joined by commas); by default DEFAULT_TARGETS, which cover common
    devices. variants: several full sets of input shapes (`input_shapes` is one). Every (profile,
    shapes) pair is compiled on its own and the results are combined into one bundle whose runtime
    picks the profile for its device and the shapes per run (bundles/variants.py); a single pair
    gives the single-variant (format 1.1) bundle."""
    if input_shapes and variants:
        raise ValueError("give input_shapes (one set of input shapes) or variants (several), not both")
    targets = target_list(target)
    if variants is not None and (isinstance(variants, (str, dict)) or not isinstance(variants, Sequence)):
        raise TypeError(f"variants must be a list of input-shape dicts (e.g. [{{'x': [1, 8]}}, "
                        f"{{'x': [4, 8]}}]), not {type(variants).__name__} {variants!r:.60}.")
    shape_sets = [_shape_dict(s, "a variant" if variants else "input_shapes")
                  for s in (variants if variants else [input_shapes])]
    quant = WeightQuantization.parse(weights, weights_block)
    proto = load_model(model)
    # every graph of the model and the float16 check read the same arrays of the weights
    # (converted once; what the passes compute from a weight, as its quantized blocks, once for all)
    arrays = initializer_arrays(proto)
    if len(targets) * len(shape_sets) == 1:  # one variant: the flat bundle, exactly as ever
        part, _ = _compile(proto, shape_sets[0], targets[0], precision, io, keep_fp32, keep_intermediates, state,
                           quant, argmax_output, max_context, top_k_output, arrays=arrays, kv_cache=kv_cache)
        return write_bundle(*part)
    if keep_intermediates:
        raise ValueError("keep_intermediates needs one variant: one target and one set of input shapes")
    # The float16 check runs once, at the variant with the fewest input elements, shared by all.
    smallest = min(shape_sets, key=lambda shapes: sum(int(np.prod(d)) for d in (shapes or {}).values()))
    parts, profiles, checked = [], {}, None
    digest = model_digest(proto)   # the same for every variant
    for name in targets:
        tgt = resolve_target(name)
        profiles[tgt.name] = tgt
        for shapes in shape_sets:
            parts.append(_compile(proto, shapes, tgt, precision, io, keep_fp32, state=state, weights=quant,
                                  argmax_output=argmax_output, max_context=max_context,
                                  top_k_output=top_k_output, float16_checked=checked,
                                  float16_shapes=smallest, arrays=arrays, digest=digest, kv_cache=kv_cache)[0])
            checked = checked or parts[-1].manifest.get("float16_check")
    return combine(parts, matches={n: t.match() for n, t in profiles.items() if t.match()})


def target_list(target) -> list:
    """The profiles `target` names, each a Target or a known name."""
    names = ([t.strip() for t in target.split(",")] if isinstance(target, str) else
             [target] if isinstance(target, Target) else target)
    if not isinstance(names, Sequence):
        raise TypeError(f"target must be a profile name (several joined by commas), a Target or a list of "
                        f"them, not {type(target).__name__}.")
    if not names or not all(
            isinstance(t, Target) or (isinstance(t, str) and t.strip()) for t in names):
        raise ValueError(f"target {target!r} names no profile; give one or more of {', '.join(TARGETS)}, host")
    unknown = [t for t in names if isinstance(t, str) and t not in TARGETS and t != "host"]
    if unknown:
        raise ValueError(f"unknown target {unknown[0]!r}; choose among {', '.join(TARGETS)}, host "
                         "(several joined by commas).")
    return list(dict.fromkeys(names))


def _shape_dict(shapes, what: str) -> dict[str, list[int]] | None:
    """Input shapes as {name: [int, ...]}, or a TypeError saying what was given."""
    if shapes is None:
        return None
    ok = isinstance(shapes, dict) and all(
        isinstance(k, str) and isinstance(v, (list, tuple)) and
        all(isinstance(d, (int, np.integer)) and not isinstance(d, bool) for d in v) for k, v in shapes.items())
    if not ok:
        raise TypeError(f"{what} must be a dict of input name -> list of ints (e.g. {{'x': [1, 8]}}), "
                        f"not {type(shapes).__name__} {shapes!r:.60}.")
    return {k: [int(d) for d in v] for k, v in shapes.items()}


def compile_with_kernels(model, *, input_shapes=None, target="generic", precision="fp32",
                         io=None, keep_fp32=(), state="auto", weights=None,
                         weights_block=None, max_context=None, kv_cache=None) -> tuple[bytes, list]:
    """The bundle and the Kernels behind its dispatches, in schedule order (for the tuner)."""
    part, kernels = _compile(model, input_shapes, target, precision, io, keep_fp32, state=state,
                             weights=WeightQuantization.parse(weights, weights_block), max_context=max_context,
                             kv_cache=kv_cache)
    return write_bundle(*part), kernels


def _compile(model, input_shapes, target, precision, io, keep_fp32,
             keep_intermediates=False, state="auto", weights=None, argmax_output=None,
             max_context=None, top_k_output=None, float16_checked=None,
             float16_shapes=None, arrays=None, digest=None, kv_cache=None) -> tuple[Part, list]:
    """One (profile, input shapes) pair: the bundle's parts, unwritten, and its Kernels.
    arrays, digest: the initializers' arrays and the model's digest, where the caller has them."""
    proto, graph, tgt, kernels = lower_model(model, input_shapes=input_shapes, target=target,
                                             precision=precision, io=io, keep_fp32=keep_fp32, state=state,
                                             weights=weights, argmax_output=argmax_output,
                                             max_context=max_context, top_k_output=top_k_output,
                                             float16_checked=float16_checked, float16_shapes=float16_shapes,
                                             arrays=arrays, kv_cache=kv_cache)
    kept = intermediates(graph, kernels) if keep_intermediates else []
    # Kept values live to the end like outputs, so the plan gives each bytes of its own.
    plan = plan_memory(kernels, graph.inputs, graph.outputs + kept, [i for i, _ in graph.state])
    digest = digest or model_digest(proto)
    return assemble_parts(graph, kernels, plan, tgt, digest, kept), kernels


def intermediates(graph, kernels) -> list:
    """Every value of the graph (views included) whose bytes a dispatch writes, but for the
    graph's outputs and constants."""
    written = {id(k.bindings[i].root()) for k in kernels for i in k.writes}
    outputs = {v.name for v in graph.outputs}
    return [v for v in graph.values() if id(v.root()) in written and v.name not in outputs
            and v.shape is not None and v.size > 0 and np.dtype(v.dtype).name in DTYPES]


def lower_model(model, *, input_shapes=None, target="generic", precision="fp32", io=None, keep_fp32=(),
                state="auto", weights: "WeightQuantization | str | None" = None, argmax_output: str | None = None,
                max_context: int | None = None, top_k_output: str | None = None,
                float16_checked: dict | None = None, float16_shapes: dict | None = None,
                arrays: dict | None = None, kv_cache: str | None = None):
    """(ONNX proto, IR graph, Target, Kernels in schedule order): everything before the memory
    plan and code generation. float16_checked: compiler/float16_check.py's verdict on the model,
    where the caller has it (compile_model checks once for every variant); else the check runs at
    float16_shapes (default: input_shapes). arrays: the initializers' arrays by name
    (frontend.initializer_arrays), where the caller has them."""
    options = Precision.parse(precision, io, keep_fp32)
    quant = weights if isinstance(weights, WeightQuantization) or weights is None else WeightQuantization.parse(weights)
    proto = load_model(model)
    front = lambda g: fold_constants(add_top_k_output(add_argmax_output(g, argmax_output), top_k_output))  # noqa: E731
    if float16_shapes:
        float16_shapes = pinned_for_context(proto, float16_shapes, max_context)[0]
    input_shapes, max_context = pinned_for_context(proto, input_shapes, max_context)
    if max_context is not None:
        graph = fixed_capacity(proto, input_shapes, max_context, front, arrays)
    else:
        growing = Form.of(proto)
        past = growing.unpinned(input_shapes) if growing is not None else None
        if past is not None:
            raise CompileError(f"input '{past}' is a cache that grows each run ({growing.describe()}); compile "
                               f"it with --max-context N (a cache of N rows kept on the device, max_context=N in "
                               f"Python), or pin every input with --input-shape for one fixed step.")
        graph = take_constant_branches(proto, input_shapes, front, arrays)[1]
    graph.precision = options
    graph.weights = quant
    graph.kv_cache = kv_cache_option(kv_cache)
    graph.state = find_state(graph, state)
    # Every unsupported op is reported at once, before any code generation. Ops computed only
    # from constants and shapes were folded away above, so they need no kernel.
    missing = unsupported_ops(graph)
    if missing:
        raise UnsupportedOpsError(missing)
    require_constant_shape_inputs(graph)
    if options.float16 and not float16_checked:
        at = float16_shapes or input_shapes
        if max_context is not None:   # a growing cache: one row of past, every input's shape derived
            at = Form.of(proto).shapes(at, max_context, past=1)
        float16_checked = float16_check(proto, at, options, arrays)
    graph.float16_check = float16_checked
    graph = run_passes(graph)
    require_static_shapes(graph)
    tgt = resolve_target(target)
    return proto, graph, tgt, lower_graph(graph, tgt) + state_updates(graph, tgt)
