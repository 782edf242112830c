"""Token generation with a decoder bundle that keeps its KV cache as state (FORMAT.md, "State").

The bundle's contract: inputs `input_ids` (int64 [1, S]) and `position` (int64 [1], the cache
rows already filled), output `logits` ([1, S, vocab]); shape variants give the S it runs (a
decode variant of S = 1, and prefill chunk lengths). The prompt goes in chunks of the longest
variant that fits what is left, then one token a run. Names can be given for other bundles.
A bundle of onnxruntime-genai's model builder takes `attention_mask` (int64 [1, N], compiled at
N = its cache's rows) instead of `position`: its first P + S entries are 1 (the rows filled and
this run's), the rest 0, and the graph counts the rows from it.

A bundle compiled with `--argmax-output logits` also outputs `logits_argmax` (the last
position's argmax, on the device): greedy decoding then copies back that one int64 a run and
never the logits, and prefill chunks before the last copy back nothing. One compiled with
`--top-k-output logits:K` also outputs `logits_topk_values` / `logits_topk_indices` (the last
position's K largest logits and their ids, on the device): sampling with 0 < top_k <= K copies
back those 2K numbers and draws exactly the token it would draw from the whole row.
"""
from __future__ import annotations

from collections.abc import Iterator

import numpy as np


class Sampler:
    """Picks the next token from a row of logits: greedy (temperature 0), or a draw at
    `temperature` from the top_k most likely tokens (0: all) within top_p of the probability."""

    def __init__(self, temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0, seed=None):
        if temperature < 0 or top_k < 0 or not 0 < top_p <= 1:
            raise ValueError(f"temperature {temperature} must be >= 0, top_k {top_k} >= 0 and top_p {top_p} "
                             "in (0, 1].")
        self.temperature, self.top_k, self.top_p = float(temperature), int(top_k), float(top_p)
        self.rng = np.random.default_rng(seed)

    def __call__(self, logits: np.ndarray) -> int:
        logits = np.asarray(logits, np.float64)
        if self.temperature == 0:
            return int(np.argmax(logits))
        order = _largest(logits, self.top_k) if self.top_k else np.argsort(-logits, kind="stable")
        return self._draw(logits[order], order)

    def from_top_k(self, values: np.ndarray, ids: np.ndarray) -> int:
        """The pick from a row's largest logits and their ids, largest first and ties to the lower
        id (a TopK of at least top_k, computed on the device): what __call__ gives for the row."""
        k = self.top_k
        if self.temperature == 0 or not 0 < k <= len(values):
            raise ValueError(f"sampling from the top {len(values)} logits needs temperature > 0 and top_k in "
                             f"1..{len(values)}; this sampler has temperature {self.temperature}, top_k {k}.")
        return self._draw(np.asarray(values[:k], np.float64), np.asarray(ids[:k], np.int64))

    def _draw(self, values: np.ndarray, ids: np.ndarray) -> int:
        """A draw at `temperature` among `values` (largest first) within top_p; the id drawn."""
        z = (values - values[0]) / self.temperature
        p = np.exp(z) / np.exp(z).sum()
        keep = min(int(np.searchsorted(np.cumsum(p), self.top_p)) + 1, len(p))  # the fewest whose mass reaches top_p
        p = p[:keep] / p[:keep].sum()
        return int(ids[self.rng.choice(keep, p=p)])


def _largest(logits: np.ndarray, k: int) -> np.ndarray:
    """The indices of the k largest logits, largest first, ties to the lower index: what a stable
    sort's first k are, without sorting a whole vocabulary (13 ms a token at 128 K entries)."""
    if k >= len(logits):
        return np.argsort(-logits, kind="stable")
    kth = np.partition(logits, len(logits) - k)[len(logits) - k]
    if np.isnan(kth):
        return np.argsort(-logits, kind="stable")[:k]
    above = np.flatnonzero(logits > kth)
    picked = np.concatenate([above, np.flatnonzero(logits == kth)[:k - len(above)]])
    return picked[np.lexsort((picked, -logits[picked]))]


def generate(model, input_ids, max_new_tokens: int, *, eos_token_id=None, sampler: Sampler | None = None,
             ids: str = "input_ids", position: str = "position", logits: str = "logits",
             max_context: int | None = None, attention_mask: str = "attention_mask") -> Iterator[int]:
    """Yield up to max_new_tokens token ids after the prompt `input_ids` (a sequence of ints),
    stopping after eos_token_id. The model's state is reset first: each call is a new sequence.
    max_context: the cache rows (by default the state's second-last axis, [batch, heads, rows,
    size]); a sequence that would pass it is refused before anything runs. A bundle without
    `position` input that has `attention_mask` input [1, N] is fed the mask instead (the module's
    docstring); N bounds the sequence too."""
    prompt = [int(t) for t in np.asarray(input_ids, np.int64).reshape(-1)]
    if not prompt:
        raise ValueError("input_ids is empty; give at least one prompt token.")
    if max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be >= 0, not {max_new_tokens}.")
    names = {i.name for i in model.inputs}
    where = position if position in names or attention_mask not in names else attention_mask
    if {ids, where} - names or logits not in {o.name for o in model.outputs} or not model.state:
        raise ValueError(f"generate needs a bundle with state, inputs {ids!r} and {position!r} (or "
                         f"{attention_mask!r}) and output {logits!r}; this one has inputs {sorted(names)}, outputs "
                         f"{[o.name for o in model.outputs]} and {len(model.state)} state tensor(s).")
    mask_length = _mask_length(model, attention_mask) if where == attention_mask else None
    lengths = sorted({s[ids][1] for s in model.shapes}, reverse=True)
    if 1 not in lengths:
        raise ValueError(f"generate needs a decode variant of {ids}=1x1; this bundle has {ids} lengths {lengths} "
                         f"(compile with --variant {ids}=1x1 as well).")
    context = min(max_context or min(s.shape[-2] for s in model.state), mask_length or np.inf)
    if len(prompt) + max_new_tokens > context:
        raise ValueError(f"{len(prompt)} prompt tokens + {max_new_tokens} new ones exceed the {context} rows "
                         "of the model's cache; compile it for a longer context or ask for fewer tokens.")
    pick = sampler or Sampler()
    on_device = argmax_output(model, logits) if pick.temperature == 0 else None
    top = top_k_output(model, logits, pick)
    wanted = [on_device] if on_device else list(top) if top else [logits]

    def feeds(tokens: list[int], filled: int) -> dict:
        if mask_length is None:
            return {ids: np.array([tokens], np.int64), position: np.array([filled], np.int64)}
        mask = np.zeros((1, mask_length), np.int64)
        mask[0, :filled + len(tokens)] = 1
        return {ids: np.array([tokens], np.int64), attention_mask: mask}

    model.reset_state()
    filled, out = 0, None
    while filled < len(prompt):
        n = next(n for n in lengths if n <= len(prompt) - filled)
        out = model.run(feeds(prompt[filled:filled + n], filled), fetch=wanted if filled + n == len(prompt) else [])
        filled += n
    for step in range(max_new_tokens):
        token = (int(out[on_device].reshape(-1)[0]) if on_device else
                 pick.from_top_k(out[top[0]].reshape(-1), out[top[1]].reshape(-1)) if top else pick(out[logits][0, -1]))
        yield token
        if token == eos_token_id or step == max_new_tokens - 1:
            return
        out = model.run(feeds([token], filled), fetch=wanted)
        filled += 1


def _mask_length(model, attention_mask: str) -> int:
    """N of the attention_mask input [1, N], the same in every variant; else a ValueError."""
    found = {tuple(s[attention_mask]) for s in model.shapes}
    if len(found) != 1 or len(next(iter(found))) != 2 or next(iter(found))[0] != 1:
        raise ValueError(f"generate feeds {attention_mask!r} as int64 [1, N] with N the cache's rows, the same in "
                         f"every variant; this bundle has {sorted(found)}. Compile it with --input-shape "
                         f"{attention_mask}=1xN (N: the past inputs' rows) in every variant.")
    return int(next(iter(found))[1])


def argmax_output(model, logits: str = "logits") -> str | None:
    """The output holding the argmax of `logits`' last row (compile_model(argmax_output=...)), or None."""
    name = logits + "_argmax"
    return name if any(o.name == name for o in model.outputs) else None


def top_k_output(model, logits: str = "logits", sampler: Sampler | None = None) -> tuple[str, str] | None:
    """The outputs holding the top K of `logits`' last row and their ids
    (compile_model(top_k_output=...)), where there are and the sampler draws from at most K of
    them (temperature > 0, 0 < top_k <= K); else None."""
    found = {o.name: o for o in model.outputs}
    names = (logits + "_topk_values", logits + "_topk_indices")
    if not all(n in found for n in names):
        return None
    if sampler is not None and (sampler.temperature == 0 or not 0 < sampler.top_k <= found[names[0]].shape[-1]):
        return None
    return names
