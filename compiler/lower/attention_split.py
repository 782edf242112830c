"""Split-KV (flash-decoding) attention: a decode step has one query row (or a few) per head, so
the one-kernel form (lower/attention.py) gives the device only batch x heads workgroups, each
walking the whole cache. Here the run's keys go in CHUNKS chunks, a workgroup per (batch, group
of query heads sharing a K/V head, chunk): the first pass (attention.comp.j2 or
attention_tiled.comp.j2 with `split`) writes each row's max, sum of exp and unnormalized output
per chunk to a float32 scratch tensor, and the chunks are combined (log-sum-exp) into the output
in its dtype: by the tiled kernel's last workgroup of each row block to finish (counted in a
counter the run zeroes first, lower/counters.py: one dispatch), or on texel profiles by
attention_combine.comp.j2.

The rule (split_kv):
  - at most SPLIT_MAX_QUERIES query rows (decode steps and short chunks; a prefill keeps the one
    kernel, whose query blocks already fill the device);
  - query heads per workgroup: the most of a K/V head's kv_group (a divisor) whose rows stay
    within SPLIT_GROUP_ROWS, so that K and V are read once for them all;
  - chunks: enough workgroups for the target's min_workgroups (nvidia's and --target host's:
    two per SM or compute unit), but no more than chunks of CHUNK_STEP keys over the cache's
    capacity; at least 2, else no split.
The chunk length is a run-time value: the keys the run attends (nonpad_kv_seqlen's count) over
CHUNKS, rounded up to a multiple of CHUNK_STEP, so a short context fills few chunks of
CHUNK_STEP keys and the workgroups of the others return at once, and a long one spreads over
all of them.
"""
from __future__ import annotations

import numpy as np

from ..dtypes import float_literal, kernel_types
from ..ir import Value
from .kernel import Kernel, grid_1d

SPLIT_MAX_QUERIES = 8
SPLIT_GROUP_ROWS = 16
# Keys of a chunk: a multiple of this (of every key block the first-pass kernels take), at least it.
CHUNK_STEP = 64


def split_kv(b: int, h: int, sq: int, keys: int, kv_group: int, target) -> tuple[int, int] | None:
    """(query heads a workgroup serves, chunks) where attention of `sq` query rows over at most
    `keys` keys is split, else None."""
    if sq > SPLIT_MAX_QUERIES:
        return None
    heads = max(g for g in range(1, kv_group + 1) if kv_group % g == 0 and g * sq <= SPLIT_GROUP_ROWS)
    units = b * h // heads
    chunks = min(-(-target.min_workgroups // units), -(-keys // CHUNK_STEP))
    return (heads, chunks) if chunks >= 2 else None


def partials(out: Value, b: int, h: int, sq: int, dv: int, chunks: int) -> Value:
    """The first pass's results: a record of DV + 2 floats (o, m, l) per row and chunk."""
    return Value(f"{out.name}/split_kv_partials", np.dtype(np.float32), (b * h * sq * chunks * (dv + 2),))


def combine(node, part: Value, lengths: Value | None, out: Value, common: dict, chunks: int,
            target) -> Kernel:
    """The second pass: every output element from the chunks' records."""
    b, h, sq, _, _, dv = node.attrs["dims"]
    offset, strides = node.attrs["layouts"]["out"]
    total, local = b * h * sq * dv, target.elementwise_local
    combine_spec = [("TOTAL", "int32", total), ("H", "int32", h), ("SQ", "int32", sq),
                    ("DV", "int32", dv), ("CHUNKS", "int32", chunks), ("OUT_OFF", "int32", int(offset))]
    combine_spec += [("WINDOW", "int32", int(node.attrs["window"]))] if common["window"] else []
    combine_spec += [(f"OUT_S{i}", "int32", int(s)) for i, s in enumerate(strides)]
    params = dict(LOCAL=local, TO=kernel_types(out)["T"], NAN=float_literal(np.nan),
                  **{k: common[k] for k in ("lengths", "causal", "causal_top_left", "window", "KEYS",
                                             "empty_rows_zero", "NEG_INF", "CHUNK_STEP")})
    bindings = [part] + ([lengths] if lengths is not None else []) + [out]
    return Kernel("attention_combine", params, combine_spec, bindings, writes=[len(bindings) - 1],
                  groups=grid_1d(total, local), local_size=(local, 1, 1), nodes=node.sources,
                  flops=3 * total * chunks)
