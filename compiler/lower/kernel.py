"""What lowering rules build: the Kernel (one dispatch), and the helpers rules share (texel
reads, word views of packed tensors, constant inputs, 1-D grids). Rules register themselves with
`register` (compiler.registry, re-exported here for the op-family modules).
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass, field

import numpy as np

from ..errors import CompileError
from ..ir import Node, Value
from ..registry import register, unsupported_dtype  # noqa: F401 - the op families' imports


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
    # The binding whose stores the template can shift by STORE_OFFSET elements (params
    # store_offset, spec STORE_OFFSET; a multiple of 4 for vec4 stores), so that it may bind a
    # window of a larger tensor: a Concat slice that starts off the binding alignment (concat.py).
    store_offset: int | None = None
    # Bindings whose loads the template can shift, {binding: spec constant}: it adds that many
    # elements (a multiple of 4, for vec4 loads) to every index, so that the binding may be a
    # window of a larger tensor that starts off the binding alignment (slice.py).
    load_offsets: dict = field(default_factory=dict)
    # Bindings that must hold zeros when the kernel runs (split-K's per-tile counters): one
    # dispatch at the start of the run zeroes them all (lower/counters.py).
    zeroed: tuple[int, ...] = ()


def kernels_by_root(kernels: list[Kernel]) -> dict[int, list[Kernel]]:
    """{id of a root value: the kernels binding it or any view of it}, in dispatch order."""
    users: dict[int, list[Kernel]] = {}
    for k in kernels:
        for root in {id(v.root()) for v in k.bindings}:
            users.setdefault(root, []).append(k)
    return users


def texel_reads(target, *values) -> bool:
    """Whether a kernel reads these operands through uniform texel buffers: on texel profiles
    (lavapipe, where a texel fetch is a gather and a storage-buffer load with a per-lane address
    a loop over the lanes), while each fits the device's maxTexelBufferElements."""
    return target.matmul == "texel" and all(v.size <= target.max_texel_elements for v in values)


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
