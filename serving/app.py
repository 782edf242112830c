"""Put a bundle behind Ray Serve: the application (replicas and their resources) and `vkc serve`.

Replicas ask Ray for what their device needs: one GPU each where the cluster has GPUs (the
replica then runs on that GPU, deployment.replica_device), else `cpus_per_replica` CPUs each (lavapipe:
the device is the CPU; its llvmpipe threads are capped to those CPUs through LP_NUM_THREADS).
Replica processes do not share the driver's environment on a cluster, so the variables that
steer the runtime and the Vulkan loader (VKC_*, VK_*, LP_*, MESA_*) and the driver's PYTHONPATH
travel in the replicas' runtime_env.
"""
from __future__ import annotations

import functools
import os
import signal
import threading
from pathlib import Path

import ray
from ray import serve

from .deployment import BundleServer, replica_device
from .engine import VkcEngine

APP = "vkc"
ENV_PREFIXES = ("VKC_", "VK_", "LP_", "MESA_")
ROOT = Path(__file__).resolve().parent.parent


class ServingError(RuntimeError):
    """`vkc serve` cannot start: one line naming the problem and the fix."""


def replica_env(cpus_per_replica: float | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if k.startswith(ENV_PREFIXES)}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    if cpus_per_replica:
        env.setdefault("LP_NUM_THREADS", str(max(1, int(cpus_per_replica))))
    return env


def _vkc_engine(bundle: str, timing: bool, tokenizer=None):
    return VkcEngine(bundle, replica_device(), timing=timing, tokenizer=tokenizer)


def application(bundle, *, replicas: int = 1, max_batch: int | None = None, batch_wait_ms: float = 0.0,
                gpus: bool | None = None, cpus_per_replica: float = 1.0, timing: bool = True,
                make_engine=None, max_ongoing_requests: int = 64, access_log: bool = False,
                name: str = "BundleServer", tokenizer=None):
    """The bound Serve application. `make_engine` (a picklable callable) replaces the vkc engine
    (benchmarks/serving puts onnxruntime behind the same deployment); `gpus` None asks Ray whether
    the cluster has any. `tokenizer` (a tokenizers.Tokenizer, pickled to the replicas) gives a
    decoder bundle's generations text in and out. Serve's access log (a line per request) is off
    unless `access_log`: it costs the replica time per request (docs/SERVING.md)."""
    if gpus is None:
        gpus = ray.cluster_resources().get("GPU", 0) > 0
    options = {"num_gpus": 1, "num_cpus": cpus_per_replica} if gpus else {"num_cpus": cpus_per_replica}
    options["runtime_env"] = {"env_vars": replica_env(None if gpus else cpus_per_replica)}
    make_engine = make_engine or functools.partial(_vkc_engine, str(Path(bundle).resolve()), timing, tokenizer)
    deployment = serve.deployment(BundleServer, name=name).options(
        num_replicas=replicas, ray_actor_options=options, max_ongoing_requests=max_ongoing_requests,
        health_check_period_s=2.0, health_check_timeout_s=30.0, logging_config={"enable_access_log": access_log},
        graceful_shutdown_wait_loop_s=0.2, graceful_shutdown_timeout_s=30.0)
    return deployment.bind(make_engine, max_batch, batch_wait_ms / 1e3)


def connect(address: str | None = None, *, num_cpus=None, object_store_memory: int | None = None) -> None:
    """Join the running cluster at `address` (`ray://head:10001`, `auto`), else start a local Ray
    instance (head and workers as processes on this machine)."""
    if ray.is_initialized():
        return
    if address:
        ray.init(address=address, logging_level="WARNING")
    else:
        ray.init(num_cpus=num_cpus, object_store_memory=object_store_memory, include_dashboard=False,
                 logging_level="WARNING")


def start(app, *, host: str = "127.0.0.1", port: int = 8000, route_prefix: str = "/", access_log: bool = False):
    """Run the application behind Serve's HTTP proxy at host:port; returns its handle. The proxy's
    access log is off unless `access_log` (when this call starts Serve)."""
    serve.start(http_options={"host": host, "port": port}, logging_config={"enable_access_log": access_log})
    return serve.run(app, name=APP, route_prefix=route_prefix)


def serve_forever(bundle: Path, *, replicas: int, max_batch: int | None, address: str | None, host: str,
                  port: int, batch_wait_ms: float, tokenizer=None, say=print) -> None:
    """`vkc serve`: start, serve until SIGINT or SIGTERM, then drain (Serve waits for the requests
    in flight) and stop."""
    if not Path(bundle).is_file():
        raise ServingError(f"{bundle}: no such bundle; give the path of a .vkb (on a cluster, a path every node has).")
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        try:
            connect(address)
        except ConnectionError as exc:
            raise ServingError(f"cannot reach the Ray cluster at {address} ({' '.join(str(exc).split())}); check the "
                               "address, and on a cluster with token authentication set RAY_AUTH_MODE=token and "
                               "give its token (docs/SERVING.md, \"On a cluster\").") from None
        start(application(bundle, replicas=replicas, max_batch=max_batch, batch_wait_ms=batch_wait_ms,
                          tokenizer=tokenizer), host=host, port=port)
        say(f"serving {bundle} at http://{host}:{port}/ with {replicas} replica(s); Ctrl-C drains and stops")
        stop.wait()
        say("draining")
    finally:
        if ray.is_initialized():
            if address:  # a shared cluster: take this application down (drained), leave Serve running
                serve.delete(APP)
            else:
                serve.shutdown()
            ray.shutdown()
