"""Requests into a bundle's shape variants: check a request, pack a batch of them into variant-sized
chunks, pad, and split the outputs back. No Ray and no device here.

The contract: axis 0 of every input and output is the batch, and rows do not interact (what a
model served with dynamic batching must satisfy anyway). A request carries n >= 1 rows of every
input. A bundle's variants are grouped by their row shapes (every input's shape past axis 0); in
each group the batch sizes are the variants' leading dims. A chunk takes requests of one group in
arrival order while their rows fit the group's largest batch, and runs on the smallest variant that
holds its rows, the rest zero-padded.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


class RequestError(ValueError):
    """A request the bundle cannot serve, as one line; `status` is the HTTP code it answers with."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Layout:
    """What serving needs of a bundle: input names and dtypes, and per row shape (one tuple of
    per-input shapes past axis 0) the batch sizes compiled for it, ascending."""
    inputs: tuple[str, ...]
    dtypes: tuple[np.dtype, ...]
    groups: dict  # row key -> tuple of batch sizes
    outputs: tuple[str, ...] = ()

    @classmethod
    def of(cls, shapes: list[dict], dtypes: dict, outputs=()) -> "Layout":
        """From a Model's `shapes` (one {input: shape} per variant) and input dtypes."""
        names = tuple(shapes[0])
        groups: dict = {}
        for variant in shapes:
            dims = [tuple(variant[n]) for n in names]
            if any(len(d) == 0 for d in dims) or len({d[0] for d in dims}) != 1:
                raise ValueError("serving batches along axis 0 of every input, but this bundle's variant "
                                 f"{_label(names, dims)} has inputs without one common leading dim; compile "
                                 "the model with a batch dim first in every input.")
            groups.setdefault(tuple(d[1:] for d in dims), set()).add(dims[0][0])
        return cls(names, tuple(np.dtype(dtypes[n]) for n in names),
                   {k: tuple(sorted(v)) for k, v in groups.items()}, tuple(outputs))

    @property
    def max_batch(self) -> int:
        return max(max(s) for s in self.groups.values())

    def expected(self) -> str:
        """What a request may hold, e.g. `x float32[n, 8] with n <= 4 (batch sizes 1, 4)`."""
        return "; or ".join(", ".join(f"{n} {d.name}[{', '.join(['n', *map(str, r)])}]"
                                      for n, d, r in zip(self.inputs, self.dtypes, key))
                            + f" with n <= {sizes[-1]} (batch sizes {', '.join(map(str, sizes))})"
                            for key, sizes in self.groups.items())

    def check(self, feeds) -> "Request":
        """The request as arrays of the declared dtypes, or RequestError naming the first problem.
        Arrays are never cast (float64 for a float32 input is refused), as in Model.run."""
        if not hasattr(feeds, "keys"):
            raise RequestError(f"a request is a mapping of input name -> array; expected {self.expected()}.")
        unknown = [n for n in feeds if n not in self.inputs]
        if unknown:
            raise RequestError(f"unknown input {unknown[0]!r}; the bundle's inputs are {', '.join(self.inputs)}.")
        missing = [n for n in self.inputs if n not in feeds]
        if missing:
            raise RequestError(f"missing input {missing[0]!r}; expected {self.expected()}.")
        arrays = []
        for name, dtype in zip(self.inputs, self.dtypes):
            a = feeds[name]
            if not isinstance(a, np.ndarray):
                raise RequestError(f"input {name!r} is a {type(a).__name__}, not a numpy array.")
            if a.dtype.newbyteorder("=") != dtype:
                raise RequestError(f"input {name!r} is {a.dtype.name}, the bundle takes {dtype.name} "
                                   f"(convert it first; the server does not cast).")
            if a.ndim == 0 or a.shape[0] < 1:
                raise RequestError(f"input {name!r} has shape {a.shape}: it needs a batch axis first with at "
                                   f"least one row; expected {self.expected()}.")
            arrays.append(a)
        rows = arrays[0].shape[0]
        if any(a.shape[0] != rows for a in arrays):
            raise RequestError("the inputs' batch axes differ (" + ", ".join(
                f"{n}: {a.shape[0]}" for n, a in zip(self.inputs, arrays)) + "); every input needs the same n.")
        key = tuple(a.shape[1:] for a in arrays)
        if key not in self.groups:
            raise RequestError(f"no variant takes rows of shape {_label(self.inputs, key)}; expected "
                               f"{self.expected()}.")
        if rows > self.groups[key][-1]:
            raise RequestError(f"a request of {rows} rows is over every variant (at most {self.groups[key][-1]} "
                               f"for these row shapes); split it.", status=413)
        return Request(key, rows, tuple(arrays))


@dataclass(frozen=True)
class Request:
    key: tuple     # the row shapes: which variant group serves it
    rows: int
    arrays: tuple  # in the layout's input order


@dataclass
class Chunk:
    """Requests (by index into the batch) that run together on the variant of `batch` rows."""
    key: tuple
    batch: int
    members: list = field(default_factory=list)  # (request index, first row, rows)

    @property
    def rows(self) -> int:
        return sum(m[2] for m in self.members)


def plan(requests: list[Request], layout: Layout, max_rows: int | None = None) -> list[Chunk]:
    """The chunks a batch of checked requests runs as: per row shape, in arrival order, requests
    join a chunk while its rows fit min(max_rows, the group's largest batch); each chunk then takes
    the smallest batch size that holds it."""
    open_chunks: dict = {}
    done = []
    for i, r in enumerate(requests):
        sizes = layout.groups[r.key]
        cap = max(min(max_rows or sizes[-1], sizes[-1]), r.rows)
        c = open_chunks.get(r.key)
        if c is not None and c.rows + r.rows > cap:
            done.append(c)
            c = None
        if c is None:
            c = open_chunks[r.key] = Chunk(r.key, 0)
        c.members.append((i, c.rows, r.rows))
    done += open_chunks.values()
    for c in done:
        c.batch = next(s for s in layout.groups[c.key] if s >= c.rows)
    return sorted(done, key=lambda c: c.members[0][0])


def fill(dest: dict, chunk: Chunk, requests: list[Request], layout: Layout) -> None:
    """Write a chunk's rows into `dest` (input name -> array of the chunk's variant shape, e.g. a
    Model's input_arrays) and zero the padding rows."""
    for j, name in enumerate(layout.inputs):
        d = dest[name]
        for i, first, rows in chunk.members:
            d[first:first + rows] = requests[i].arrays[j]
        d[chunk.rows:] = 0


def split(outputs: dict, chunk: Chunk, layout: Layout) -> list[tuple[int, dict]]:
    """(request index, its outputs) per member: the member's rows of every output, copied (the
    outputs of a run must not keep a whole batch alive, nor memory a runtime lends)."""
    for name, a in outputs.items():
        if a.ndim == 0 or a.shape[0] != chunk.batch:
            raise ValueError(f"output {name!r} has shape {a.shape}, not {chunk.batch} rows first as the "
                             "variant's batch: serving needs outputs batched along axis 0.")
    return [(i, {n: np.array(a[first:first + rows]) for n, a in outputs.items()})
            for i, first, rows in chunk.members]


def variant_shapes(chunk: Chunk, layout: Layout) -> dict:
    """{input: shape} of the variant a chunk runs on."""
    return {n: (chunk.batch, *r) for n, r in zip(layout.inputs, chunk.key)}


def _label(names, dims) -> str:
    return ",".join(f"{n}={'x'.join(map(str, d)) or 'scalar'}" for n, d in zip(names, dims))
