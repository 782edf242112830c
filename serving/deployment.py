"""The Ray Serve deployment: one engine (a bundle loaded once) per replica, requests batched
dynamically into the bundle's shape variants, served over HTTP and through Python handles.

- HTTP: POST any path under the route with a JSON, npz or npy body (serving/codec.py) -> outputs;
  GET .../health -> the replica's device, inputs and batch sizes. Bad requests answer 4xx with
  {"error": one line}; every answer names its replica in the `x-vkc-replica` header.
- Python: `handle.infer.remote({"x": array})` -> {output: array}; a bad request raises RequestError.
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
  vkc_batch_run_ms (wall time of the batch's runs), vkc_rejected_requests (by status).
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import os
import time

import ray
import runtime_min
from ray import serve
from ray.util import metrics
from starlette.requests import Request as HttpRequest
from starlette.responses import JSONResponse, Response

from . import codec
from .batching import Request, RequestError, plan, split

MS_BOUNDARIES = [0.25, 0.5, 1, 2, 3, 5, 7.5, 10, 15, 20, 30, 50, 75, 100, 200, 500, 1000, 5000]
DEFAULT_BATCH = 16  # the @serve.batch default, replaced in __init__ by the bundle's


def _rows(requests: list[Request]) -> int:
    return sum(r.rows for r in requests)


class BundleServer:
    """A Serve deployment's class: build it with `serving.app.application` (which also sets its
    resources), not by hand."""

    def __init__(self, make_engine, max_batch: int | None = None, batch_wait_s: float = 0.0):
        self.engine = make_engine()
        self.layout = self.engine.layout
        self.max_batch = min(max_batch or self.layout.max_batch, self.layout.max_batch)
        self._batched.set_max_batch_size(self.max_batch)
        self._batched.set_batch_wait_timeout_s(batch_wait_s)
        self._runner = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="vkc-runner")
        self.replica = serve.get_replica_context().replica_id.unique_id
        # Since the replica started; the sums of ms say where a request's time goes: in the replica
        # (arrival to outputs) and in its batches' runs (the runner thread's fill, run and split).
        self.served = {"requests": 0, "batches": 0, "runs": 0, "rows_run": 0, "replica_ms": 0.0, "run_ms": 0.0}
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
        start = time.perf_counter()
        try:
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
        return {"status": "ok", "replica": self.replica, "pid": os.getpid(), "device": self.engine.device,
                "max_batch": self.max_batch, "inputs": self.layout.expected(), "outputs": list(self.layout.outputs),
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
