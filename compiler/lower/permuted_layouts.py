"""What vkc.Attention and the rotary embeddings do with a Transpose beside them
(passes/transposes_in_place.py, take_transposes_into_layouts): the facts their declarations
carry.

- vkc.Attention reads Q, K and V and writes its output at any strides (its `layouts`): a
  Transpose of a contiguous operand, or of its contiguous output, that keeps the last dim (a
  prompt's head split, [B, S, H, D] -> [B, H, S, D], and its merge back) is other strides.
- A rotary embedding of [B, H, S, D] rotates each (token, head) row by the token's angles, so
  that of a head split Transpose([B, S, H, D]) is the head split of the rotation of [B, S, H * D]
  with num_heads H: the Transpose moves after it, to the attention or cache write reading it.
"""
from __future__ import annotations

from ..ir import Node, Value
from ..shapes import contiguous_strides

HEAD_SPLIT = [0, 2, 1, 3]
OPERANDS = {0: "q", 1: "k", 2: "v"}


def _contiguous(node: Node, name: str, v: Value) -> bool:
    """Whether the attention reads (or writes) operand `name`, the 4-D v, as v's own contiguous
    layout, one stride per dim of v, with no two-part dim."""
    offset, strides = node.attrs["layouts"][name]
    return len(v.shape) == 4 and not offset and name not in node.attrs.get("parts", {}) and \
        tuple(strides) == tuple(contiguous_strides(v.shape))


def attention_reads_permuted(node: Node, slot: int, perm: list[int], x: Value) -> Node | None:
    """The attention reading Q, K or V (input `slot`) as Transpose(x, perm), keeping the last dim,
    at x's strides."""
    name = OPERANDS.get(slot)
    own = node.inputs[slot] if name is not None else None
    if own is None or len(perm) != 4 or perm[3] != 3 or sum(v is own for v in node.inputs) != 1 or \
            not _contiguous(node, name, own):
        return None
    strides = contiguous_strides(x.shape)
    layouts = {**node.attrs["layouts"], name: (0, tuple(strides[p] for p in perm))}
    inputs = [x if i == slot else v for i, v in enumerate(node.inputs)]
    return Node(node.op_type, node.name, inputs, list(node.outputs), {**node.attrs, "layouts": layouts},
                node.domain, node.sources)


def attention_stores_permuted(node: Node, perm: list[int], z: Value) -> Node | None:
    """The attention writing its output as z = Transpose(output, perm), keeping the last dim."""
    y = node.outputs[0]
    if len(perm) != 4 or perm[3] != 3 or len(node.outputs) != 1 or not _contiguous(node, "out", y):
        return None
    strides = contiguous_strides(z.shape)
    # output dim i is z's dim j where perm[j] == i
    layouts = {**node.attrs["layouts"], "out": (0, tuple(strides[perm.index(i)] for i in range(4)))}
    return Node(node.op_type, node.name, list(node.inputs), [z], {**node.attrs, "layouts": layouts},
                node.domain, node.sources)


def rotary_before_head_split(node: Node, perm: list[int], x: Value) -> tuple[Node, Value] | None:
    """(the rotation of x [B, S, H, D] read as [B, S, H * D] with num_heads H, its result viewed as
    [B, S, H, D]) where the node rotates x's head split [B, H, S, D] (perm (0, 2, 1, 3)): the
    same rows at the same positions."""
    if list(perm) != HEAD_SPLIT or len(x.shape) != 4 or len(node.outputs) != 1 or \
            any(k in node.attrs for k in ("input_columns", "stores_rows", "carries_rows")):
        return None
    b, s, h, d = x.shape
    y = node.outputs[0]
    tokens = Value(f"{x.name}/tokens", x.dtype, (b, s, h * d), alias_of=x)
    rotated = Value(f"{y.name}/tokens", y.dtype, (b, s, h * d))
    heads = Value(f"{y.name}/token_heads", y.dtype, (b, s, h, d), alias_of=rotated)
    inputs = [tokens, *node.inputs[1:]]
    return Node(node.op_type, node.name, inputs, [rotated], {**node.attrs, "num_heads": h},
                node.domain, node.sources), heads
