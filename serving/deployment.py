"""The Ray Serve deployment: one engine (a bundle loaded once) per replica, requests batched
dynamically into the bundle's shape variants, served over HTTP and through Python handles.

- HTTP: POST any path under the route with a JSON, npz or npy body (serving/codec.py) -> outputs;
  GET .../health -> the replica's device, inputs and batch sizes. Bad requests answer 4xx with
  {"error": one line}; every answer names its replica in the `x-vkc-replica` header.
- Python: `handle.infer.remote({"x": array})` -> {output: array}; a bad request raises RequestError.
- Generation (a decoder bundle whose KV cache is its state, serving/generation.py): POST
  .../generate with a JSON request streams newline-delimited JSON, a line per token and a summary;
  `handle.options(stream=True).generate.remote(input_ids=[...], ...)` yields the same records.
  One generation a replica at a time (the model's state is one sequence): the others wait their
  turn in arrival order; the generation runs on the runner thread (serving/streaming.py) and stops
  when its reader goes. A decoder is not run by the plain door: its runs depend on the ones before.
- Batching: `@serve.batch` gathers up to `max_batch` rows (counted by rows, not requests): those
  that queued while the run before ran, plus what arrives within `batch_wait_s` (default 0);
  serving/batching.py packs them into the smallest variants that hold them.
- Runs happen on one runner thread per replica, so the event loop keeps taking requests while the
  device works, and runtime_min's input memory is only ever touched by the thread it was lent to.
- Health: Serve calls check_health(); a replica whose device was lost reports unhealthy and Serve
  replaces it. Shutdown drains: Serve stops routing to the replica, waits for its requests
  (graceful_shutdown_timeout_s), then __del__ closes the engine after its last run.
- Metrics (ray.util.metrics, exported by every node's metrics agent): vkc_request_ms,
  vkc_batch_rows, vkc_batch_requests, vkc_batch_device_ms (timestamps; with timing on),
  vkc_batch_run_ms (wall time of the batch's runs), vkc_rejected_requests (by status);
  generation: vkc_generated_tokens, vkc_time_to_first_token_ms, vkc_tokens_per_s, vkc_generations.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import time

import ray
import runtime_min
from ray import serve
from ray.util import metrics
from starlette.requests import Request as HttpRequest
from starlette.responses import JSONResponse, Response, StreamingResponse

from . import codec, streaming
from .batching import Request, RequestError, plan, split
from .generation import Generation

MS_BOUNDARIES = [0.25, 0.5, 1, 2, 3, 5, 7.5, 10, 15, 20, 30, 50, 75, 100, 200, 500, 1000, 5000]
TOKENS_PER_S_BOUNDARIES = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000]
DEFAULT_BATCH = 16  # the @serve.batch default, replaced in __init__ by the bundle's
NDJSON = "application/x-ndjson"


def _rows(requests: list[Request]) -> int:
    return sum(r.rows for r in requests)


class BundleServer:
    """A Serve deployment's class: build it with `serving.app.application` (which also sets its
    resources), not by hand."""

    def __init__(self, make_engine, max_batch: int | None = None, batch_wait_s: float = 0.0):
        self.engine = make_engine()
        self.layout = self.engine.layout
        self.decoder = getattr(self.engine, "decoder", None)  # None: plain runs only
        self.max_batch = min(max_batch or self.layout.max_batch, self.layout.max_batch) if self.layout else 1
        self._turn = asyncio.Lock()  # one generation at a time; FIFO, so requests go in arrival order
        self._batched.set_max_batch_size(self.max_batch)
        self._batched.set_batch_wait_timeout_s(batch_wait_s)
        self._runner = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="vkc-runner")
        self.replica = serve.get_replica_context().replica_id.unique_id
        # Since the replica started; the sums of ms say where a request's time goes: in the replica
        # (arrival to outputs) and in its batches' runs (the runner thread's fill, run and split).
        self.served = {"requests": 0, "batches": 0, "runs": 0, "rows_run": 0, "replica_ms": 0.0, "run_ms": 0.0,
                       "generations": 0, "generated_tokens": 0, "stopped_generations": 0}
        ctx = serve.get_replica_context()
        tags = {"application": ctx.app_name, "deployment": ctx.deployment, "replica": self.replica}
        keys, rows = tuple(tags), [1, 2, 4, 8, 16, 32, 64, 128, 256]
        self._metrics = {
            "request": metrics.Histogram("vkc_request_ms", "Time from a request's arrival at the replica to "
                                         "its outputs, ms.", boundaries=MS_BOUNDARIES, tag_keys=(*keys, "kind")),
            "rows": metrics.Histogram("vkc_batch_rows", "Rows a run carried (the variant's batch size).",
                                      boundaries=rows, tag_keys=keys),
            "requests": metrics.Histogram("vkc_batch_requests", "Requests gathered into one batch.",
                                          boundaries=rows, tag_keys=keys),
            "device": metrics.Histogram("vkc_batch_device_ms", "Device time of one run, from timestamps, ms.",
                                        boundaries=MS_BOUNDARIES, tag_keys=keys),
            "run": metrics.Histogram("vkc_batch_run_ms", "Wall time of a batch's runs (fill, run, split), ms.",
                                     boundaries=MS_BOUNDARIES, tag_keys=keys),
            "rejected": metrics.Counter("vkc_rejected_requests", "Requests answered 4xx.",
                                        tag_keys=(*keys, "status")),
            "tokens": metrics.Counter("vkc_generated_tokens", "Tokens generated.", tag_keys=(*keys, "kind")),
            "first_token": metrics.Histogram("vkc_time_to_first_token_ms", "Time from a generation request's "
                                             "arrival at the replica (its wait for its turn included) to its "
                                             "first token, ms.", boundaries=MS_BOUNDARIES, tag_keys=keys),
            "tokens_per_s": metrics.Histogram("vkc_tokens_per_s", "Tokens a second of a generation that ran to "
                                              "its end, after its first token.", boundaries=TOKENS_PER_S_BOUNDARIES,
                                              tag_keys=keys),
            "generations": metrics.Counter("vkc_generations", "Generations, by how they ended: finished (eos or "
                                           "max_new_tokens) or stopped (the reader went).",
                                           tag_keys=(*keys, "end")),
        }
        for metric in self._metrics.values():
            metric.set_default_tags(tags)

    # ---- the two doors ----------------------------------------------------------------------

    async def __call__(self, http: HttpRequest) -> Response:
        headers = {"x-vkc-replica": self.replica}
        if http.method == "GET" and http.url.path.rstrip("/").endswith("/health"):
            return JSONResponse(self.info(), headers=headers)
        if http.method != "POST":
            return JSONResponse({"error": "POST a request body to run the model; GET .../health describes it."},
                                status_code=405, headers=headers)
        if http.url.path.rstrip("/").endswith("/generate"):
            return await self._http_generate(http, headers)
        start = time.perf_counter()
        try:
            if self.layout is None:
                raise RequestError("this bundle is a decoder whose KV cache is its state: each run depends on the "
                                   "runs before it, so it is served by POST .../generate alone.")
            kind = codec.media_type(http.headers.get("content-type"))
            request = self.layout.check(codec.decode(await http.body(), kind, self.layout))
        except RequestError as exc:
            self._metrics["rejected"].inc(tags={"status": str(exc.status)})
            return JSONResponse({"error": str(exc)}, status_code=exc.status, headers=headers)
        body, media = codec.encode(await self._batched(request), kind)
        self._done(start, "http")
        return Response(body, media_type=media, headers=headers)

    async def infer(self, feeds: dict) -> dict:
        """Outputs by name for feeds by name (numpy arrays of the bundle's dtypes, batch axis first)."""
        start = time.perf_counter()
        try:
            request = self.layout.check(feeds)
        except RequestError as exc:
            self._metrics["rejected"].inc(tags={"status": str(exc.status)})
            raise
        outputs = await self._batched(request)
        self._done(start, "handle")
        return outputs

    async def generate(self, **request):
        """Records of a generation, streamed (`handle.options(stream=True).generate.remote(input_ids=[...],
        max_new_tokens=8)`): {"id": token[, "text": piece]} a token, then {"done": True, ...}."""
        try:
            job = self._check_generation(request)
        except RequestError as exc:
            self._metrics["rejected"].inc(tags={"status": str(exc.status)})
            raise
        async for record in self._generation(job, "handle"):
            yield record

    async def _http_generate(self, http: HttpRequest, headers: dict) -> Response:
        try:
            if codec.media_type(http.headers.get("content-type")) != codec.JSON:
                raise RequestError("a generation request is JSON; send content-type application/json.", status=415)
            try:
                doc = json.loads(await http.body())
            except ValueError as exc:
                raise RequestError(f"the body is not JSON ({exc}); send {{\"input_ids\": [ids], "
                                   "\"max_new_tokens\": n}.") from None
            job = self._check_generation(doc)
        except RequestError as exc:
            self._metrics["rejected"].inc(tags={"status": str(exc.status)})
            return JSONResponse({"error": str(exc)}, status_code=exc.status, headers=headers)
        return StreamingResponse(self._lines(job), media_type=NDJSON, headers=headers)

    def _check_generation(self, doc) -> Generation:
        if self.decoder is None:
            raise RequestError("this bundle is not a decoder whose KV cache is its state (inputs input_ids and "
                               "position, output logits, a decode variant input_ids=1x1): POST to the route "
                               "to run it; to generate, serve an LLM compiled so (e.g. `vkc compile --max-context N "
                               "--variant input_ids=1x1`).", status=404)
        return self.decoder.check(doc)

    async def _lines(self, job: Generation):
        """A generation as newline-delimited JSON; a failure mid-stream ends it with an error line
        (the status, 200, is sent already)."""
        try:
            async for record in self._generation(job, "http"):
                yield json.dumps(record) + "\n"
        except (RuntimeError, ValueError) as exc:
            yield json.dumps({"error": " ".join(str(exc).split())}) + "\n"

    async def _generation(self, job: Generation, kind: str):
        async with self._turn:
            first = True
            try:
                async for record in streaming.from_thread(self._runner, self.engine.generate(job)):
                    if first and "id" in record:
                        first = False
                        self._metrics["first_token"].observe((job.first_at - job.arrived) * 1e3)
                    yield record
            finally:
                self._generated(job, kind)

    def _generated(self, job: Generation, kind: str) -> None:
        n = len(job.tokens)
        self.served["generations"] += 1
        self.served["generated_tokens"] += n
        self.served["stopped_generations"] += not job.finished
        if n:
            self._metrics["tokens"].inc(n, tags={"kind": kind})
        if job.finished and n > 1:
            self._metrics["tokens_per_s"].observe(job.tokens_per_s)
        self._metrics["generations"].inc(tags={"end": "finished" if job.finished else "stopped"})

    def _done(self, start: float, kind: str) -> None:
        ms = (time.perf_counter() - start) * 1e3
        self._metrics["request"].observe(ms, tags={"kind": kind})
        self.served["replica_ms"] += ms

    # ---- batching ---------------------------------------------------------------------------

    @serve.batch(max_batch_size=DEFAULT_BATCH, batch_wait_timeout_s=0.0, batch_size_fn=_rows)
    async def _batched(self, requests: list[Request]) -> list[dict]:
        start = time.perf_counter()
        results, runs = await asyncio.get_running_loop().run_in_executor(self._runner, self._run, requests)
        ms = (time.perf_counter() - start) * 1e3
        self._metrics["run"].observe(ms)
        self.served["run_ms"] += ms
        self._metrics["requests"].observe(len(requests))
        self.served["requests"] += len(requests)
        self.served["batches"] += 1
        self.served["runs"] += len(runs)
        self.served["rows_run"] += sum(rows for rows, _ in runs)
        for rows, device_s in runs:
            self._metrics["rows"].observe(rows)
            if device_s is not None:
                self._metrics["device"].observe(device_s * 1e3)
        return results

    def _run(self, requests: list[Request]) -> tuple[list[dict], list]:
        results, runs = [None] * len(requests), []
        for chunk in plan(requests, self.layout, self.max_batch):
            outputs, device_s = self.engine.run(chunk, requests)
            runs.append((chunk.batch, device_s))
            for i, out in split(outputs, chunk, self.layout):
                results[i] = out
        return results, runs

    # ---- the replica's life -----------------------------------------------------------------

    def info(self) -> dict:
        """The replica: its id, process, device, inputs, batch sizes and what it served (GET .../health)."""
        plain = {"max_batch": self.max_batch, "inputs": self.layout.expected(),
                 "outputs": list(self.layout.outputs)} if self.layout else {}
        return {"status": "ok", "replica": self.replica, "pid": os.getpid(), "device": self.engine.device,
                **plain, "generate": self.decoder.info() if self.decoder else None,
                "served": dict(self.served)}

    def check_health(self) -> None:
        if self.engine.failure:
            raise RuntimeError(f"the replica's device cannot run any more: {self.engine.failure}")

    def validation_messages(self) -> list[str]:
        """What the Khronos validation layer reported in this replica (with VKC_VALIDATION=1)."""
        return runtime_min.validation_messages()

    def __del__(self):
        # Serve calls this after draining: the last run finishes on the runner, then the device goes.
        runner = getattr(self, "_runner", None)
        if runner is not None:
            runner.submit(self.engine.close).result()
            runner.shutdown()


def replica_device():
    """The Vulkan device of a replica that Ray gave GPUs: the GPU of Ray's first id, counted among
    the loader's GPUs in its order (on a one-vendor node that is the driver's PCI order, as Ray's);
    None (runtime_min's pick, or VKC_DEVICE) for a CPU replica."""
    ids = ray.get_gpu_ids() if ray.is_initialized() else []
    if not ids:
        return None
    gpus = [d.index for d in runtime_min.list_devices() if d.type.endswith("GPU")]
    return gpus[int(ids[0]) % len(gpus)] if gpus else None
