"""The lowering registry: one rule per (op type, since-version), each in its op family's module.

A rule takes a Node and the target profile and returns the Kernels that compute it. The model's
opset picks the rule: onnx.defs gives the op's since_version at that opset, and the newest rule
registered at or below it applies.
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import onnx

from ..errors import CompileError
from ..expr import ONNX_BINARY, ONNX_UNARY, ONNX_VARIADIC
from ..ir import Node, Value

# Ops the passes turn into views, folds or fused expressions, never reaching lowering as such.
HANDLED_BY_PASSES = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout",
                     "BatchNormalization", "Constant", "Shape", "Size", "Clip",
                     *ONNX_BINARY, *ONNX_UNARY, *ONNX_VARIADIC}


@dataclass
class Kernel:
    """One dispatch: a template, its structural parameters, its specialization constants."""
    template: str                     # templates/<template>.comp.j2
    params: dict                      # Jinja parameters: structure (tiles, dtype, epilogue)
    spec: list[tuple[str, float]]     # (int32|uint32|float32, value); constant_id = position
    bindings: list[Value]             # set 0, binding i
    writes: list[int]                 # binding indices the kernel writes
    groups: tuple[int, int, int]
    local_size: tuple[int, int, int]
    nodes: list[str] = field(default_factory=list)
    flops: int = 0
    shared_memory_bytes: int = 0
    problem: str = ""                 # the matmul problem `vkc tune` keys its choices by
    # Bindings read as uniform texel buffers instead of storage buffers: {binding: "r32f" |
    # "rgba32f"} (the view's format; one texel is one element, or four consecutive ones).
    texel_buffers: dict = field(default_factory=dict)


Rule = Callable[[Node, "object"], list[Kernel]]
_RULES: dict[str, dict[int, Rule]] = {}


def register(op_type: str, since: int = 1):
    def wrap(fn: Rule) -> Rule:
        versions = _RULES.setdefault(op_type, {})
        if since in versions:
            raise RuntimeError(f"lowering for {op_type} since opset {since} is registered twice "
                               f"({versions[since].__module__} and {fn.__module__}).")
        versions[since] = fn
        return fn
    return wrap


def registered_ops() -> dict[str, list[int]]:
    return {op: sorted(v) for op, v in _RULES.items()}


def find_rule(op_type: str, domain: str, opset: int) -> Rule | None:
    versions = _RULES.get(op_type)
    if not versions:
        return None
    if op_type.startswith("vkc.") or domain not in ("", "ai.onnx"):
        return versions[max(versions)] if op_type.startswith("vkc.") else None
    try:
        since = onnx.defs.get_schema(op_type, max_inclusive_version=opset).since_version
    except onnx.defs.SchemaError:
        since = opset
    usable = [v for v in versions if v <= since]
    return versions[max(usable)] if usable else None


def is_supported(op_type: str, domain: str, opset: int) -> bool:
    if domain in ("", "ai.onnx") and op_type in HANDLED_BY_PASSES:
        return True
    return find_rule(op_type, domain, opset) is not None


# The phrase of every error for a dtype a kernel does not compute (onnx_backend counts those
# cases as skipped, not failed).
DTYPE_PHRASE = "vkc's kernels do not compute"


def unsupported_dtype(node: Node, v: Value, what: str) -> CompileError:
    return CompileError(f"{node.op_type} '{node.name}' computes {what} on {np.dtype(v.dtype).name} "
                        f"tensor '{v.name}' at run time; {DTYPE_PHRASE} that in this version.")


def texel_reads(target, *values) -> bool:
    """Whether a kernel reads these operands through uniform texel buffers: on texel profiles
    (lavapipe, where a texel fetch is a gather and a storage-buffer load with a per-lane address
    a loop over the lanes), while each fits the device's maxTexelBufferElements."""
    return target.matmul == "texel" and all(v.size <= target.max_texel_elements for v in values)


def require_float32(node: Node, values) -> None:
    """For kernels that compute on float32 only (all but elementwise and data movement)."""
    for v in values:
        if v is not None and np.dtype(v.dtype) != np.float32:
            raise CompileError(f"{node.op_type} '{node.name}' computes on {np.dtype(v.dtype).name} "
                               f"tensor '{v.name}' at run time; {DTYPE_PHRASE} {node.op_type} on "
                               f"{np.dtype(v.dtype).name} in this version (float32 only).")


_word_views: "weakref.WeakKeyDictionary[Value, Value]" = weakref.WeakKeyDictionary()


def buffer_view(v: Value) -> Value:
    """What a kernel binds to read or write `v`: v itself, or for 8/16-bit elements (packed in
    32-bit words) a view of v's bytes rounded up to whole words. Robust buffer access drops an
    access past a binding's range, which would lose a last, partial word; the rounded range stays
    inside v's allocation, as the memory plan and the weights give every tensor at least 4 bytes
    on a 256-byte boundary."""
    if v.nbytes % 4 == 0:
        return v
    if v not in _word_views:
        _word_views[v] = Value(f"{v.name}/words", np.dtype(np.int32), (-(-v.nbytes // 4),),
                               alias_of=v)
    return _word_views[v]


def constant_input(node: Node, index: int, what: str) -> np.ndarray | None:
    """The data of an input that fixes shapes (pads, starts, axes, ...), None when absent; one
    the computation produces is an error, since every shape is known at compile time."""
    v = node.input(index)
    if v is None:
        return None
    if not v.is_constant:
        raise CompileError(f"{node.op_type} '{node.name}': {what} come from the computation "
                           f"('{v.name}'); vkc needs them constant to know shapes at compile time.")
    return v.data


def grid_1d(total: int, local: int) -> tuple[int, int, int]:
    """Workgroup counts covering `total` invocations; y takes over past the 65535 x-limit."""
    groups = max(1, -(-total // local))
    x = min(groups, 65535)
    return (x, -(-groups // x), 1)
