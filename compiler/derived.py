"""Results computed from a constant's array (its float16 copy, its quantized blocks, its
magnitude, a fold of it), kept while that array lives. A model's shape variants read the same
initializer arrays (compile_model converts them once), so what is computed from a weight is
computed once for all of them, not once a variant."""
from __future__ import annotations

import weakref
from collections.abc import Callable, Hashable
from typing import TypeVar

T = TypeVar("T")

_KEPT: dict[tuple, tuple] = {}


def derived(source, how: Hashable, make: Callable[[], T]) -> T:
    """make(), computed once per `source` array and `how` (what make computes from it) while
    the array lives. The result is shared: never modify it."""
    key = (id(source), how)
    hit = _KEPT.get(key)
    if hit is not None and hit[0]() is source:
        return hit[1]
    value = make()
    try:
        ref = weakref.ref(source, lambda _, key=key: _KEPT.pop(key, None))
    except TypeError:   # a numpy scalar: no weak reference, nothing kept
        return value
    _KEPT[key] = (ref, value)
    return value
