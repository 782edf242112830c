"""The engine a replica serves with: a bundle loaded once through runtime_min, each chunk of a batch
written straight into the model's input memory (input_arrays: padding costs no extra copy) and run.

Engines are used from one thread (the replica's runner thread): arrays from input_arrays() belong
to the thread that asked for them and to the one run that reads them, so a chunk is filled and run
in the same call and nothing of that memory escapes it (split() copies each request's rows out).
Another engine (onnxruntime, in benchmarks/serving) only needs `layout`, `run` and `close`.

A decoder bundle whose KV cache is its state (serving/generation.py) is served for generation
only: its runs depend on the runs before them, so it has a `decoder` and no `layout`.
"""
from __future__ import annotations

from runtime_min import DeviceLostError, VkcRuntimeError, load

from .batching import Chunk, Layout, Request, fill, split, variant_shapes
from .generation import Decoder, Generation


class VkcEngine:
    """A .vkb on one device. `timing` records the device time of every batch (timestamps: about 50 us
    more per run on lavapipe, nothing measurable on a GPU). `tokenizer` (a tokenizers.Tokenizer) gives
    a decoder's generations text in and out."""

    def __init__(self, bundle, device=None, *, validation=None, timing: bool = True, tokenizer=None):
        self.model = load(bundle, device, validation=validation, timing=timing, build_all=True)
        m = self.model
        self.decoder = Decoder.of(m, tokenizer)
        self.layout = None if self.decoder else Layout.of(m.shapes, {i.name: i.dtype for i in m.inputs},
                                                          [o.name for o in m.outputs])
        self.device = m.device_name
        self.failure = None  # why the device cannot run any more (the replica then reports unhealthy)
        self.warm_up()

    def warm_up(self) -> None:
        """Run every variant once on zeros: builds nothing at the first request, and checks that every
        output is batched along axis 0 (split refuses it otherwise). A decoder generates once."""
        if self.decoder:
            self.decoder.warm_up()
            return
        for key, sizes in self.layout.groups.items():
            for batch in sizes:
                chunk = Chunk(key, batch)
                split(self.run(chunk, [])[0], chunk, self.layout)

    def run(self, chunk: Chunk, requests: list[Request]) -> tuple[dict, float | None]:
        """The outputs of the chunk's variant (batch rows first) and its device seconds (None
        without timing)."""
        try:
            feeds = self.model.input_arrays(variant_shapes(chunk, self.layout))
            fill(feeds, chunk, requests, self.layout)
            outputs = self.model.run(feeds)
        except (DeviceLostError, VkcRuntimeError) as exc:
            self.failure = str(exc)
            raise
        t = self.model.gpu_time
        return outputs, (t.total if t is not None else None)

    def generate(self, job: Generation):
        """The records of a generation (serving/generation.py), run on the caller's thread."""
        try:
            yield from self.decoder.records(job)
        except (DeviceLostError, VkcRuntimeError) as exc:
            self.failure = str(exc)
            raise

    def close(self) -> None:
        self.model.close()
