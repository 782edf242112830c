"""Token generation for a decoder bundle whose KV cache is its state (runtime_min.generate): what a
generation request may hold, checked before anything runs, and the records a generation streams.
No Ray here.

A request is a mapping (the JSON body of POST .../generate, or a handle's keywords):
`input_ids` (a list of ints) or `prompt` (text, with a tokenizer), and optionally
`max_new_tokens`, `temperature`, `top_k`, `top_p`, `seed`, `eos_token_id`. A generation yields one
record per token, `{"id": 39}` (with `"text"`, the piece of text it adds, given a tokenizer), then
one summary `{"done": true, ...}`: counts, why it stopped, time to first token and tokens/s.
"""
from __future__ import annotations

import math
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from runtime_min.generate import Sampler, generate

from .batching import RequestError

IDS, POSITION, LOGITS = "input_ids", "position", "logits"  # runtime_min.generate's default names
DEFAULT_NEW_TOKENS = 32  # as `vkc generate`
FIELDS = ("input_ids", "prompt", "max_new_tokens", "temperature", "top_k", "top_p", "seed", "eos_token_id")


@dataclass
class Generation:
    """One checked request, and what its run produced (written by the runner thread)."""
    ids: list
    max_new_tokens: int
    sampler: Sampler
    eos_token_id: int | None
    arrived: float = field(default_factory=time.perf_counter)
    tokens: list = field(default_factory=list)
    first_at: float | None = None
    finished: bool = False  # ran to its end (eos or max_new_tokens), not stopped by its reader
    tokens_per_s: float | None = None  # after the first token, once finished


class Decoder:
    """A loaded decoder Model (and optionally a tokenizers.Tokenizer) serving generations; used
    from one thread at a time, since the model's state is one sequence."""

    def __init__(self, model, tokenizer=None):
        self.model, self.tokenizer = model, tokenizer
        self.vocabulary = next(o.shape[-1] for o in model.outputs if o.name == LOGITS)
        self.context = min(s.shape[-2] for s in model.state)  # the cache rows, as generate counts them
        self.produced = 0  # tokens the model has generated for requests, counted as they come

    @classmethod
    def of(cls, model, tokenizer=None) -> "Decoder | None":
        """A Decoder when runtime_min.generate can run the model (state, its inputs and output, a
        decode variant of one token), else None: the bundle is served for plain runs."""
        if not model.state or {IDS, POSITION} - {i.name for i in model.inputs}:
            return None
        if LOGITS not in {o.name for o in model.outputs} or all(s[IDS][-1] != 1 for s in model.shapes):
            return None
        return cls(model, tokenizer)

    def warm_up(self) -> None:
        """Generate once, the prompt long enough to run every prefill length and then the decode
        step: a bundle's first runs cost more (0.6 s on lavapipe for a toy) than the first request
        should pay."""
        lengths = {s[IDS][-1] for s in self.model.shapes}
        prompt = max(1, min(sum(lengths), self.context - 2))
        for _ in generate(self.model, [0] * prompt, min(2, self.context - prompt)):
            pass

    def info(self) -> dict:
        return {"context": self.context, "vocabulary": self.vocabulary, "tokenizer": self.tokenizer is not None,
                "produced": self.produced}

    def check(self, doc) -> Generation:
        """The request as a Generation, or RequestError naming the first problem and its fix."""
        if not hasattr(doc, "keys"):
            raise RequestError("a generation request is {\"input_ids\": [ids] or \"prompt\": text, "
                               "\"max_new_tokens\": n, ...}.")
        unknown = [k for k in doc if k not in FIELDS]
        if unknown:
            raise RequestError(f"unknown field {unknown[0]!r}; a generation request takes {', '.join(FIELDS)}.")
        if (doc.get("input_ids") is None) == (doc.get("prompt") is None):
            raise RequestError("give the prompt as \"input_ids\": [ids] or as \"prompt\": text (with a "
                               "tokenizer), one of them.")
        ids = self._prompt(doc["prompt"]) if doc.get("prompt") is not None else self._ids(doc["input_ids"])
        new = _integer(doc, "max_new_tokens", DEFAULT_NEW_TOKENS)
        if new < 0:
            raise RequestError(f"max_new_tokens must be >= 0, not {new}.")
        if len(ids) + new > self.context:
            raise RequestError(f"{len(ids)} prompt tokens + {new} new ones exceed the {self.context} rows of the "
                               "model's cache; ask for fewer tokens, or compile it for a longer context.")
        try:
            sampler = Sampler(_number(doc, "temperature", 0.0), _integer(doc, "top_k", 0),
                              _number(doc, "top_p", 1.0), _integer(doc, "seed", None))
        except ValueError as exc:
            raise RequestError(str(exc)) from None
        return Generation(ids, new, sampler, _integer(doc, "eos_token_id", None))

    def _ids(self, value) -> list:
        if not isinstance(value, list) or not value or not all(_is_int(t) for t in value):
            raise RequestError(f"input_ids must be a non-empty list of token ids (integers), not {_show(value)}.")
        outside = [t for t in value if not 0 <= t < self.vocabulary]
        if outside:
            raise RequestError(f"input_ids holds token id {outside[0]}, outside the model's vocabulary of "
                               f"{self.vocabulary} (0 to {self.vocabulary - 1}); give ids of this model's tokenizer.")
        return [int(t) for t in value]

    def _prompt(self, text) -> list:
        if self.tokenizer is None:
            raise RequestError("\"prompt\" needs a tokenizer, and this deployment has none: put tokenizer.json "
                               "beside the bundle or start it with `vkc serve --tokenizer PATH`, or send input_ids.")
        if not isinstance(text, str):
            raise RequestError(f"prompt must be text, not {_show(text)}.")
        ids = self.tokenizer.encode(text).ids
        if not ids:
            raise RequestError("the prompt encodes to no tokens; give some text.")
        if max(ids) >= self.vocabulary:
            raise RequestError(f"the tokenizer gives token id {max(ids)}, but the model's vocabulary has "
                               f"{self.vocabulary} entries; serve the tokenizer saved with this model.")
        return ids

    def records(self, job: Generation) -> Iterator[dict]:
        """Run the generation (on the thread that owns the model): a record per token as it comes,
        then the summary. Closing this iterator stops the generation after the token in hand."""
        pieces = _TextPieces(self.tokenizer, job.ids) if self.tokenizer is not None else None
        started = time.perf_counter()
        for token in generate(self.model, job.ids, job.max_new_tokens, eos_token_id=job.eos_token_id,
                              sampler=job.sampler):
            job.first_at = job.first_at or time.perf_counter()
            job.tokens.append(token)
            self.produced += 1
            yield {"id": token, "text": pieces.add(token)} if pieces else {"id": token}
        end = time.perf_counter()
        n = len(job.tokens)
        job.tokens_per_s = (n - 1) / max(end - job.first_at, 1e-9) if n > 1 else None  # as `vkc generate`
        job.finished = True
        yield {"done": True, "prompt_tokens": len(job.ids), "new_tokens": n,
               "stop": "eos" if n and job.tokens[-1] == job.eos_token_id else "max_new_tokens",
               "queued_ms": round((started - job.arrived) * 1e3, 3),
               "time_to_first_token_ms": round((job.first_at - job.arrived) * 1e3, 3) if n else None,
               "tokens_per_s": round(job.tokens_per_s, 2) if n > 1 else None}


class _TextPieces:
    """The text each new token adds: the decoding of a few tokens before it and of those plus it,
    differenced, so a piece has its leading space and a multi-byte character waits until whole (a
    decoding that ends in U+FFFD is held back)."""

    def __init__(self, tokenizer, prompt: list):
        self.tokenizer, self.tokens = tokenizer, list(prompt)
        self.prefix, self.read = max(len(prompt) - 5, 0), len(prompt)

    def add(self, token: int) -> str:
        self.tokens.append(token)
        before = self.tokenizer.decode(self.tokens[self.prefix:self.read])
        after = self.tokenizer.decode(self.tokens[self.prefix:])
        if len(after) <= len(before) or after.endswith("\ufffd"):
            return ""
        self.prefix, self.read = self.read, len(self.tokens)
        return after[len(before):]


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _integer(doc, name: str, default):
    v = doc.get(name)
    if v is None:
        return default
    if not _is_int(v):
        raise RequestError(f"{name} must be an integer, not {_show(v)}.")
    return v


def _number(doc, name: str, default: float) -> float:
    v = doc.get(name)
    if v is None:
        return default
    if not (_is_int(v) or isinstance(v, float)) or not math.isfinite(v):
        raise RequestError(f"{name} must be a finite number, not {_show(v)}.")
    return float(v)


def _show(v) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."
