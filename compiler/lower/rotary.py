"""Rotary position embedding: ONNX RotaryEmbedding (opset 23) and com.microsoft's RotaryEmbedding
(what onnxruntime-genai's model builder writes), on templates/rotary.comp.j2.

Both rotate, in every head of X, the first rotary_embedding_dim elements (all of the head by
default) by per-position angles: the pair (x1, x2) becomes (x1 cos - x2 sin, x1 sin + x2 cos),
pairs being neighbours (interleaved) or the two halves of the rotated part. X is [B, S, hidden]
(num_heads heads of hidden / num_heads) or [B, num_heads, S, head]. The cos and sin tables are
[max_position, rotary_dim / 2], indexed by position_ids read at run time from their int64 buffer
(the kernel is not specialized on positions: one bundle serves every decoding step), or, in
ONNX's op without position_ids, already gathered per token ([B, S, rotary_dim / 2]).
"""
from __future__ import annotations

import numpy as np

from ..dtypes import kernel_types
from ..errors import CompileError
from ..ir import Node
from ..magnitudes import Magnitude
from ..registry import FLOATS, shape_of_input0
from ..shapes import prod
from .kernel import Kernel, grid_1d, register, unsupported_dtype
from .permuted_layouts import rotary_before_head_split

DTYPES = "float32, float16; position_ids int64"
LIMITS = ("position_ids other than int64; positions outside the tables are clamped (onnxruntime "
          "fails); tables other than [max_position, rotary_dim / 2], or without position_ids "
          "[batch or 1, sequence, rotary_dim / 2]")


def _magnitude(node, ins):
    """A rotation keeps |x1| + |x2| as a bound: |x1 cos - x2 sin| <= |x1| + |x2| for |cos|, |sin|
    <= 1 (the tables' own bound multiplies where they hold larger values); typically x's size."""
    x = ins[0] if ins and ins[0] is not None else None
    grow = max([1.0, *(m.top for m in ins[1:] if m is not None)])
    if x is None:
        return None
    return Magnitude(2 * x.top * grow, x.rms * grow)


def rotary_kernels(node, target, *, x, cos, sin, position_ids, interleaved: int,
                   rotary_dim: int, num_heads: int, contrib: bool = False):
    """The kernel of both ops. position_ids: None (cos, sin per token: [B or 1, S, half]),
    [B, S] positions, or for the contrib op (`contrib`) also a one-element start position
    (token s of the sequence is at start + s); the contrib op also takes a 3-D input without
    num_heads, its head size then being the tables' rotary dim."""
    where = f"{node.op_type} '{node.name}'"
    # input_columns (first, width, shape): X is [..., width], of whose rows the node rotates a
    # part's columns from `first` on (one part of a packed Q/K/V projection, read in place:
    # passes/split_parts.py); `shape` is the part's (or a view of all of it), Y's. Two outputs
    # (joined: Q's and K's parts side by side): the first takes the first `output_columns`
    # columns of each row of the rotated [B, S, hidden], the second the rest.
    packed = node.attrs.get("input_columns")
    shape = tuple(packed[2]) if packed else tuple(x.shape)
    size = prod(shape)
    for v in (x, cos, sin):  # position_ids aside, the op computes on floats (dtypes=None)
        if np.dtype(v.dtype).name not in FLOATS:
            raise unsupported_dtype(node, v, "a rotary embedding")
    if len(shape) == 4:
        b, heads, s, head = shape
        if num_heads and num_heads != heads:
            raise CompileError(f"{where}: num_heads {num_heads} differs from the {heads} heads "
                               f"of the 4-D input '{x.name}' {list(shape)}.")
        s_div = head                    # [B, N, S, H]: the position is dim 2
    elif len(shape) == 3:
        b, s, hidden = shape
        if not num_heads:
            if contrib and not rotary_dim and cos.shape[-1] * 2 <= hidden:
                num_heads = hidden // (cos.shape[-1] * 2)  # onnxruntime's inference for 3-D input
            else:
                raise CompileError(f"{where}: a 3-D input '{x.name}' needs the num_heads "
                                   "attribute (to split its hidden dim into heads).")
        if hidden % num_heads:
            raise CompileError(f"{where}: hidden size {hidden} of '{x.name}' is not a multiple "
                               f"of num_heads {num_heads}.")
        heads, head = num_heads, hidden // num_heads
        s_div = hidden                  # [B, S, N * H]: the position is dim 1
    else:
        raise CompileError(f"{where}: input '{x.name}' is {len(shape)}-D; the op takes "
                           "[batch, sequence, hidden] or [batch, heads, sequence, head].")
    rot = rotary_dim or head
    if rot > head or rot % 2:
        raise CompileError(f"{where}: rotary_embedding_dim {rot} must be even and at most the "
                           f"head size {head}.")
    half = rot // 2
    for t in (cos, sin):
        if t.shape[-1] != half:
            raise CompileError(f"{where}: the last dim of '{t.name}' {list(t.shape)} must be "
                               f"rotary_embedding_dim / 2 = {half}.")
    if cos.shape != sin.shape:
        raise CompileError(f"{where}: cos_cache {list(cos.shape)} and sin_cache "
                           f"{list(sin.shape)} differ in shape.")
    if position_ids is None:
        if len(cos.shape) != 3 or cos.shape[1] != s or cos.shape[0] not in (1, b):
            raise CompileError(f"{where}: without position_ids, cos_cache and sin_cache must be "
                               f"[batch, sequence, rotary_dim / 2] = [{b}, {s}, {half}]; "
                               f"'{cos.name}' is {list(cos.shape)}.")
        positions = 0
        table_rows = cos.shape[0] * s
    else:
        if np.dtype(position_ids.dtype) != np.int64:
            raise CompileError(f"{where}: position_ids '{position_ids.name}' are "
                               f"{np.dtype(position_ids.dtype).name}; the op takes int64.")
        if len(cos.shape) != 2:
            raise CompileError(f"{where}: with position_ids, cos_cache and sin_cache must be "
                               f"[max_position, rotary_dim / 2]; '{cos.name}' is "
                               f"{list(cos.shape)}.")
        ids = list(position_ids.shape)
        if contrib and position_ids.size == 1:
            positions = 2
        elif ids == [b, s]:
            positions = 1
        else:
            raise CompileError(f"{where}: position_ids '{position_ids.name}' {ids} must be "
                               f"[batch, sequence] = [{b}, {s}]"
                               + (" or one start position [1]." if contrib else "."))
        table_rows = cos.shape[0]
    spec = [("TOTAL", "int32", size), ("HEAD", "int32", head), ("S", "int32", s),
            ("S_DIV", "int32", s_div), ("B_DIV", "int32", size // b), ("HALF", "int32", half),
            ("TABLE_ROWS", "int32", table_rows)]
    split = node.attrs.get("output_columns")
    # stores_rows (passes/cache_row_stores.py): output `stored` goes into a cache's rows, the
    # cache viewed as [outer, C_ROWS, C_INNER] elements along its axis, from the write index of
    # each batch (C_PER_BATCH outer rows) on; the output's elements are one row of the cache's
    stored, axis, mode, indices = node.attrs.get("stores_rows", (None, 0, "linear", None))
    # stored_tokens: the stored output is that many tokens' rows of each batch, token-major
    tokens = node.attrs.get("stored_tokens", 1)
    carried = node.attrs.get("carries_rows")
    own = node.outputs[:-1] if carried else node.outputs
    sizes = [y.size // y.shape[axis] * tokens if i == stored else y.size for i, y in enumerate(own)]
    if packed:
        first, width = packed[0], x.shape[-1]
        rows = x.size // width
        part = size // rows
        if size != rows * part or first + part > width or \
                sum(sizes) != size or (split and sizes[0] != rows * split):
            raise CompileError(f"{where}: columns {list(packed[:2])} of '{x.name}' {list(x.shape)} "
                               f"do not hold its {list(shape)} part (a vkc bug).")
        spec += [("X_OFF", "int32", int(first)), ("X_ROW", "int32", int(width)), ("Y_ROW", "int32", part)]
        spec += [("Y_SPLIT", "int32", split)] if split else []
    write_indices = [node.inputs[indices]] if indices is not None else []
    if stored is not None:
        cache = node.outputs[stored]
        spec += [("C_ROWS", "int32", cache.shape[axis]), ("C_INNER", "int32", prod(cache.shape[axis + 1:])),
                 ("C_PER_BATCH", "int32", prod(cache.shape[1:axis]))] + ([("C_TOKENS", "int32", tokens)] if tokens > 1 else [])
    # carries_rows (first, width): the last output is a second cache of the first's shape, into
    # whose rows the kernel also copies the `width` columns of X's rows from `first` on
    total = size
    if carried:
        spec += [("V_OFF", "int32", int(carried[0])), ("V_ROW", "int32", int(carried[1])),
                 ("V_TOTAL", "int32", rows * int(carried[1]))]
        total += rows * int(carried[1])
    local = target.elementwise_local
    # position_ids is int64: read as two int words (the low one holds any valid position).
    params = dict(LOCAL=local, interleaved=bool(interleaved), positions=positions, packed=bool(packed),
                  partial=rot < head, batch_tables=positions == 0 and cos.shape[0] == b, split=bool(split),
                  stored=stored, tokens=tokens > 1, carried=bool(carried), circular=mode == "circular", row_indices=bool(write_indices),
                  idx_words=np.dtype(write_indices[0].dtype).itemsize // 4 if write_indices else 1,
                  **kernel_types(x), TC=kernel_types(cos)["T"])
    bindings = [x, cos, sin] + ([position_ids] if positions else []) + write_indices + list(node.outputs)
    return [Kernel("rotary", params, spec, bindings, writes=list(range(len(bindings) - len(node.outputs), len(bindings))),
                   groups=grid_1d(total, local), local_size=(local, 1, 1), nodes=node.sources,
                   flops=3 * size)]


def _tokens(node, shape) -> tuple | None:
    """(batch, tokens, head size, a token's elements) of a rotary embedding whose tokens'
    elements lie together (3-D with num_heads, or 4-D at one token); None otherwise."""
    if len(shape) == 4 and shape[2] == 1:
        return shape[0], 1, shape[3], shape[1] * shape[3]
    heads = node.attrs.get("num_heads", 0)
    if len(shape) == 3 and heads and shape[2] % heads == 0:
        return shape[0], shape[1], shape[2] // heads, shape[2]
    return None


def _same(u, v) -> bool:
    """Whether u and v are one tensor, or views of the same bytes in one shape (the positions
    each rotary embedding of an optimum export reshapes apart)."""
    return u is v or (u is not None and v is not None and u.root() is v.root() and u.dtype == v.dtype and
                      u.root_offset() == v.root_offset() and tuple(u.shape) == tuple(v.shape))


def _joined(a, b):
    """One node rotating the parts of two, side by side in the tensor both read their columns
    of (Q's and K's, passes/split_parts.py), with an output each: where they share the tables,
    positions, attributes (the head count aside), tokens and head size, b's columns right
    after a's. None otherwise."""
    ca, cb = a.attrs.get("input_columns"), b.attrs.get("input_columns")
    if ca is None or cb is None or (a.op_type, a.domain) != (b.op_type, b.domain) or \
            len(a.outputs) != 1 or len(b.outputs) != 1 or len(a.inputs) != len(b.inputs) or \
            not all(_same(u, v) for u, v in zip(a.inputs, b.inputs)) or a.outputs[0].dtype != b.outputs[0].dtype:
        return None
    own = lambda n: {k: v for k, v in n.attrs.items() if k not in ("num_heads", "input_columns")}  # noqa: E731
    ta, tb = _tokens(a, ca[2]), _tokens(b, cb[2])
    if own(a) != own(b) or ta is None or tb is None or ta[:3] != tb[:3] or cb[0] != ca[0] + ta[3]:
        return None
    batch, tokens, head, width = ta
    attrs = {**a.attrs, "input_columns": (ca[0], ca[1], (batch, tokens, width + tb[3])),
             "num_heads": (width + tb[3]) // head, "output_columns": width}
    return Node(a.op_type, f"{a.name}+{b.name}", list(a.inputs), [a.outputs[0], b.outputs[0]], attrs,
                a.domain, a.sources + b.sources)


def _stores_rows(node, index, update, cache, indices, axis, mode, perm=None):
    """The node storing output `index` (seen as `update`) into `cache`'s rows from the write
    indices on (passes/cache_row_stores.py: the keys into the KV cache): where it rotates one
    token a batch, so that the output's elements lie as the cache's rows do (the update is the
    cache's shape with one row along axis), or where the update is its tokens' heads [B, S, H, D]
    read as the cache's [B, H, S, D] rows (perm (0, 2, 1, 3): a prompt's head split), once per
    node."""
    shape = tuple(node.attrs["input_columns"][2]) if "input_columns" in node.attrs else tuple(node.inputs[0].shape)
    tokens = _tokens(node, shape)
    if "stores_rows" in node.attrs or tokens is None or update.dtype != cache.dtype:
        return None
    if perm is None:
        fits = tokens[1] == 1 and len(update.shape) == len(cache.shape) and update.shape[axis] == 1 and \
            all(u == c for i, (u, c) in enumerate(zip(update.shape, cache.shape)) if i != axis)
    else:
        fits = list(perm) == [0, 2, 1, 3] and axis == 2 and len(cache.shape) == 4 and \
            tuple(update.shape) == (cache.shape[0], tokens[1], cache.shape[1], cache.shape[3])
    if not fits:
        return None
    inputs = list(node.inputs) + ([indices] if indices is not None else [])
    outputs = [cache if i == index else o for i, o in enumerate(node.outputs)]
    attrs = {**node.attrs, "stores_rows": (index, axis, mode, len(node.inputs) if indices is not None else None)}
    if perm is not None:
        attrs["stored_tokens"] = tokens[1]
    return Node(node.op_type, node.name, inputs, outputs, attrs, node.domain, node.sources)


def _carries_rows(node, columns, cache, indices, axis, mode, perm=None):
    """The node storing a cache's rows (_stores_rows) also copying `columns` (first, count) of
    each row of its packed input into the rows of `cache`, a second cache of the first's shape,
    type, write indices, axis and tokens' order (V's rows, right after Q's and K's columns), once."""
    if "carries_rows" in node.attrs or "stores_rows" not in node.attrs or "input_columns" not in node.attrs or \
            (perm is not None) != ("stored_tokens" in node.attrs) or perm not in (None, [0, 2, 1, 3], (0, 2, 1, 3)):
        return None
    stored, axis_k, mode_k, slot = node.attrs["stores_rows"]
    own_first, width, shape = node.attrs["input_columns"]
    x, keys = node.inputs[0], node.outputs[stored]
    part = prod(shape) // (x.size // width)
    first, per_row = columns
    # the columns are a token's elements of each batch: a cache row, for every batch and head
    if per_row * shape[0] != keys.size // keys.shape[axis] or (axis, mode) != (axis_k, mode_k) or \
            (indices is None) != (slot is None) or (slot is not None and not _same(node.inputs[slot], indices)) or \
            first != own_first + part or first + per_row > width or \
            tuple(cache.shape) != tuple(keys.shape) or cache.dtype != keys.dtype:
        return None
    return Node(node.op_type, node.name, list(node.inputs), [*node.outputs, cache],
                {**node.attrs, "carries_rows": (first, per_row)}, node.domain, node.sources)


def _decode_rotation(node) -> dict | None:
    """A decode step's rotation, described for a reader that rotates as it reads (split-KV
    attention: passes/rotary_in_attention.py): the node rotates Q's and K's columns of one packed
    projection (joined), one token a batch, stores K's rotated row into its cache and carries
    V's into its own (passes/cache_row_stores.py), at run-time positions [batch, 1] (or the
    contrib op's one start position) into [max_position, rotary_dim / 2] tables. None for any
    other form. The description: the packed tensor `x`, the tables, `positions` and
    `write_rows` (values); Q's columns from `first` on in rows of `width`, `q_columns` of
    them; K's right after; V's `v_columns` from `v_first` on; heads of `head` elements, of
    which the first 2 * `half` rotate, pairs neighbours where `interleaved`; `one_position`:
    the contrib op's start position."""
    a = node.attrs
    if "carries_rows" not in a or "output_columns" not in a or "input_columns" not in a or "stored_tokens" in a:
        return None
    stored, axis, mode, slot = a["stores_rows"]
    contrib = node.domain == "com.microsoft"
    x = node.inputs[0]
    cos, sin = (node.inputs[2], node.inputs[3]) if contrib else (node.inputs[1], node.inputs[2])
    positions = node.inputs[1] if contrib else node.input(3)
    first, width, shape = a["input_columns"]
    tokens = _tokens(node, tuple(shape))
    if stored != 1 or mode != "linear" or slot is None or positions is None or tokens is None or \
            np.dtype(positions.dtype) != np.int64 or len(cos.shape) != 2 or cos.shape != sin.shape:
        return None
    batch, count, head, _ = tokens
    one_position = contrib and positions.size == 1
    if count != 1 or (not one_position and tuple(positions.shape) != (batch, 1)):
        return None
    rot = a.get("rotary_embedding_dim", 0) or head
    if rot > head or rot % 2 or cos.shape[1] != rot // 2:
        return None
    return dict(x=x, cos=cos, sin=sin, positions=positions, write_rows=node.inputs[slot],
                first=int(first), width=int(width), q_columns=int(a["output_columns"]), head=head,
                half=rot // 2, interleaved=bool(a.get("interleaved", 0)), one_position=one_position,
                v_first=int(a["carries_rows"][0]), v_columns=int(a["carries_rows"][1]), axis=axis)


@register("RotaryEmbedding", since=23, schema=23, dtypes=None, float16=True, limits=LIMITS,
          dtypes_doc=DTYPES, magnitude=_magnitude, reads_columns=(0,), joins=_joined, stores_rows=_stores_rows,
          carries_rows=_carries_rows, before_transpose=rotary_before_head_split,
          decode_rotation=_decode_rotation)
def lower_rotary_embedding(node, target):
    return rotary_kernels(node, target, x=node.inputs[0], cos=node.inputs[1], sin=node.inputs[2],
                          position_ids=node.input(3),
                          interleaved=node.attrs.get("interleaved", 0),
                          rotary_dim=node.attrs.get("rotary_embedding_dim", 0),
                          num_heads=node.attrs.get("num_heads", 0))


def _contrib_attrs(node) -> None:
    where = f"com.microsoft RotaryEmbedding '{node.name}'"
    if node.attrs.get("is_packed_batching", 0):
        raise CompileError(f"{where}: is_packed_batching 1 is not supported; export the model "
                           "with padded batches (is_packed_batching 0).")
    scale = node.attrs.get("scale", 1.0)
    if scale != 1.0:
        raise CompileError(f"{where}: scale {scale} is not supported (onnxruntime's CPU kernel "
                           "ignores it); export the model with scale 1.")


@register("RotaryEmbedding", domain="com.microsoft", dtypes=None, float16=True,
          dtypes_doc=DTYPES,
          limits=LIMITS + "; is_packed_batching 1; scale other than 1",
          output_shape=shape_of_input0, magnitude=_magnitude, reads_columns=(0,), joins=_joined,
          stores_rows=_stores_rows, carries_rows=_carries_rows, before_transpose=rotary_before_head_split,
          decode_rotation=_decode_rotation)
def lower_contrib_rotary_embedding(node, target):
    """Inputs (input, position_ids, cos_cache, sin_cache): position_ids are [B, S] positions or
    one start position for the whole batch."""
    _contrib_attrs(node)
    return rotary_kernels(node, target, x=node.inputs[0], cos=node.inputs[2], sin=node.inputs[3],
                          position_ids=node.inputs[1], contrib=True,
                          interleaved=node.attrs.get("interleaved", 0),
                          rotary_dim=node.attrs.get("rotary_embedding_dim", 0),
                          num_heads=node.attrs.get("num_heads", 0))
