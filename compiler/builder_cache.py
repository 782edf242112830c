"""A decoder as onnxruntime-genai's model builder writes it, compiled with --max-context N.

Its caches are read and written in place by com.microsoft GroupQueryAttention (inputs 3 and 4,
past_key_values.N.key / .value [batch, kv heads, rows, head size]) and the rows it counts come
from attention_mask [batch, total length] (seqlens_k = its sum - 1). With max_context N, every
such cache input is pinned to [1, kv heads, N, head size] and attention_mask to [1, N]: the
caches become bundle state (state.py: GroupQueryAttention declares its caches' in-place updates),
and Model.generate feeds the mask, ones for the rows filled and the run's
(runtime_min/generate.py). Dims the given shapes pin are kept. The head size is the cache input's
own where static, else the query projection's width over the heads (head_size).
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from .errors import CompileError

MASK = "attention_mask"
# What an If's condition may compute from attention_mask's length for vkc to decide it at both
# ends of the lengths a pinned mask stands for: picks of the length and one comparison with
# constants, so that the condition is monotone in the length (Phi-3's long-context rotary
# tables, chosen by `total length > original context`).
LENGTH_OPS = {"Shape", "Gather", "Slice", "Squeeze", "Unsqueeze", "Reshape", "Cast", "Constant", "Identity"}
COMPARISONS = {"Greater", "Less", "GreaterOrEqual", "LessOrEqual"}


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
        for past in node.input[3:5]:
            if past not in inputs:
                continue
            dims = [d.dim_value if d.HasField("dim_value") else None for d in inputs[past].type.tensor_type.shape.dim]
            if len(dims) != 4:
                raise CompileError(f"GroupQueryAttention '{node.name}': its cache input '{past}' has rank {len(dims)}, "
                                   "not 4 ([batch, kv heads, rows, head size]).")
            size = dims[3] or head_size(model, node)
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
    shapes, capacity = (given, capacity) if pinned is None else (pinned, None)
    if shapes and MASK in shapes and (pinned is not None or builder_shapes(model, None, 1) is not None):
        check_mask_length(model, int(shapes[MASK][-1]))
    return shapes, capacity


# What may stand between a projection and GroupQueryAttention's query input
PASS_THROUGH = {"Add", "Identity", "Cast"}


def head_size(model: onnx.ModelProto, gqa: onnx.NodeProto) -> int | None:
    """The head size of a GroupQueryAttention: the width of its query input (the projection's
    output columns: a MatMul's constant weight or a MatMulNBits' N, through a bias Add) over the
    heads it holds (packed Q, K and V: num_heads + 2 kv_num_heads). Not the rotary tables'
    width, which covers only the rotated part of a head under partial rotary (Phi-2, Phi-4-mini,
    Nemotron)."""
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in gqa.attribute}
    packed = len(gqa.input) < 2 or not gqa.input[1]
    heads = int(attrs.get("num_heads", 0)) + (2 * int(attrs.get("kv_num_heads", 0)) if packed else 0)
    producers = {o: n for n in model.graph.node for o in n.output}
    shapes = {t.name: list(t.dims) for t in model.graph.initializer}
    name = gqa.input[0]
    while name in producers:
        node = producers[name]
        if node.op_type == "MatMulNBits":
            width = next((a.i for a in node.attribute if a.name == "N"), None)
        elif node.op_type == "MatMul" and len(shapes.get(node.input[1], [])) == 2:
            width = shapes[node.input[1]][1]
        elif node.op_type in PASS_THROUGH:
            name = next((i for i in node.input if i and i not in shapes), "")
            continue
        else:
            return None
        return width // heads if heads and width and width % heads == 0 else None
    return None


def check_mask_length(model: onnx.ModelProto, length: int) -> None:
    """attention_mask pinned to `length` rows (the cache's) stands for every total length from 1
    to `length`: an If whose condition reads the mask's length must decide the same at both ends
    (its condition monotone in it, LENGTH_OPS), else it is refused, naming it."""
    g = model.graph
    producers = {o: n for n in g.node for o in n.output}
    constants = {t.name: t for t in g.initializer}
    for node in g.node:
        if node.op_type != "If":
            continue
        needed, stack, seen, reads_mask, other = [], [node.input[0]], set(), False, None
        while stack:
            name = stack.pop()
            if not name or name in seen or name in constants:
                continue
            seen.add(name)
            if name == MASK:
                reads_mask = True
            elif name not in producers:
                other = name
            else:
                needed.append(producers[name])
                stack.extend(producers[name].input)
        if not reads_mask:
            continue
        where = (f"If '{node.name}' chooses its branch from attention_mask's length (the total length of the "
                 f"sequence), which a cache of {length} rows pins to {length}")
        ops = [n.op_type for n in needed]
        if other is not None or sum(op in COMPARISONS for op in ops) != 1 or \
                any(op not in LENGTH_OPS | COMPARISONS for op in ops):
            raise CompileError(f"{where}; vkc decides only a comparison of the length with constants. Not "
                               "built: an If decided at run time.")
        order = [n for n in g.node if any(n is m for m in needed)]
        used = {i for n in order for i in n.input}
        cond = helper.make_graph(order, "condition", [helper.make_tensor_value_info(MASK, onnx.TensorProto.INT64, [1, None])],
                                 [helper.make_tensor_value_info(node.input[0], onnx.TensorProto.BOOL, None)],
                                 [t for name, t in constants.items() if name in used])
        from onnx.reference import ReferenceEvaluator
        evaluator = ReferenceEvaluator(helper.make_model(cond, opset_imports=model.opset_import))
        first, last = (bool(np.asarray(evaluator.run(None, {MASK: np.ones((1, n), np.int64)})[0]).reshape(-1)[0])
                       for n in (1, length))
        if first != last:
            raise CompileError(f"{where}: it takes the {'then' if last else 'else'} branch at {length} and the "
                               f"{'then' if first else 'else'} branch at 1, so shorter sequences would take the "
                               f"wrong one. Give --max-context at most the length where it switches (Phi-3: the "
                               "original context, whose rotary tables then serve every position); a cache "
                               "past it is not built.")
