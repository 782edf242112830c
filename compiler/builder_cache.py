"""A decoder as onnxruntime-genai's model builder writes it, compiled with --max-context N.

Its caches are read and written in place by com.microsoft GroupQueryAttention (inputs 3 and 4,
past_key_values.N.key / .value [batch, kv heads, rows, head size]) and the rows it counts come
from attention_mask [batch, total length] (seqlens_k = its sum - 1). With max_context N, every
such cache input is pinned to [1, kv heads, N, head size] and attention_mask to [1, N]: the
caches become bundle state (state.py: GroupQueryAttention declares its caches' in-place updates),
and Model.generate feeds the mask, ones for the rows filled and the run's
(runtime_min/generate.py). Dims the given shapes pin are kept. The head size is the cache input's
own where static, else twice the width of the attention's cos cache [positions, head size / 2].
"""
from __future__ import annotations

import onnx

from .errors import CompileError

MASK = "attention_mask"


def builder_shapes(model: onnx.ModelProto, given: dict | None, capacity: int) -> dict[str, list[int]] | None:
    """The input shapes of the builder's form at `capacity` cache rows (given's taking
    precedence), or None where the model has no GroupQueryAttention reading a cache input."""
    g = model.graph
    weights = {t.name: t for t in g.initializer}
    inputs = {i.name: i for i in g.input if i.name not in weights}
    shapes = {}
    for node in g.node:
        if node.op_type != "GroupQueryAttention" or node.domain != "com.microsoft":
            continue
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        cos = weights.get(node.input[7]) if len(node.input) > 7 else None
        for past in node.input[3:5]:
            if past not in inputs:
                continue
            dims = [d.dim_value if d.HasField("dim_value") else None for d in inputs[past].type.tensor_type.shape.dim]
            if len(dims) != 4:
                raise CompileError(f"GroupQueryAttention '{node.name}': its cache input '{past}' has rank {len(dims)}, "
                                   "not 4 ([batch, kv heads, rows, head size]).")
            size = dims[3] or (2 * cos.dims[1] if cos is not None and len(cos.dims) == 2 else None)
            if size is None:
                raise CompileError(f"GroupQueryAttention '{node.name}': the head size of '{past}' is not in the model; "
                                   f"give it with --variant {past}=1xHx{capacity}xD (H kv heads, D the head size).")
            shapes[past] = [1, dims[1] or int(attrs.get("kv_num_heads", 0)), capacity, size]
    if not shapes:
        return None
    if MASK in inputs:
        shapes[MASK] = [1, capacity]
    return {**shapes, **(given or {})}


def pinned_for_context(model: onnx.ModelProto, given: dict | None,
                       capacity: int | None) -> tuple[dict | None, int | None]:
    """(input shapes, max_context) as the frontend takes them: the builder's form pinned at
    `capacity` rows (no max_context left: its caches are not grown), else as given."""
    pinned = builder_shapes(model, given, capacity) if capacity is not None else None
    return (given, capacity) if pinned is None else (pinned, None)
