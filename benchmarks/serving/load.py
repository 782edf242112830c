"""The serving load test, on this machine only (loopback): a local Ray instance, lavapipe replicas,
a bounded asyncio client (benchmarks/serving/client.py).

    python -m benchmarks.serving.load [--quick] [--json out/serving.json]

Models (--model): `mlp`, x[n, 256] -> 1024 -> 1024 -> 16 with Relu, bundle variants n = 1, 2, 4, 8, 16,
JSON bodies (a run costs less than the server: shows the serving overhead); `cnn`, tests'
small_cnn at 96x96 with a free batch, variants n = 1, 2, 4, 8, npy bodies (a run costs more than
the server: shows replicas scaling). Measures:
1. one process calling Model.run directly at batch 1 (and onnxruntime's session.run), sequentially;
2. the Serve deployment with vkc inside and with onnxruntime inside (same batching and padding),
   1 and 2 replicas, closed loop: throughput, p50 and p99 latency;
3. serving overhead: one request at a time through HTTP and through a Python handle, p50 minus
   direct Model.run's p50; and the floor, a deployment that answers at once (what Serve alone costs);
4. open loop at 70% of the peak throughput of step 2, Poisson arrivals and evenly spaced: p50, p99;
5. two replicas under load, one killed (SIGKILL) after 2 s: requests lost (after the client's
   retries), retried, and the time until a new replica answers.
Every process runs lavapipe with LP_NUM_THREADS=1 (one core per replica; set it to override).
"""
from __future__ import annotations

import argparse
import asyncio
import functools
import io
import json
import os
import signal
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

from benchmarks.light_models import he_normal, init, small_normal

from . import client

SIZES = (256, 1024, 1024, 16)
CNN_HW = 96


def mlp(sizes=SIZES, seed: int = 0) -> onnx.ModelProto:
    """x[n, sizes[0]] -> Gemm+Relu per hidden layer -> y[n, sizes[-1]], the batch n free."""
    rng = np.random.default_rng(seed)
    nodes, inits, x = [], [], "x"
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        inits += [init(f"w{i}", he_normal(rng, (b, a))), init(f"b{i}", small_normal(rng, (b,)))]
        last = i == len(sizes) - 2
        out = "y" if last else f"h{i}"
        nodes.append(helper.make_node("Gemm", [x, f"w{i}", f"b{i}"], [out], transB=1))
        if not last:
            nodes.append(helper.make_node("Relu", [out], [f"r{i}"]))
            x = f"r{i}"
    graph = helper.make_graph(nodes, "serving_mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", sizes[0]])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", sizes[-1]])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def cnn(hw: int = CNN_HW) -> onnx.ModelProto:
    """tests.onnx_builders.small_cnn with its batch dim free."""
    from tests.onnx_builders import small_cnn
    model = small_cnn(hw=hw)
    for t in (*model.graph.input, *model.graph.output):
        t.type.tensor_type.shape.dim[0].dim_param = "n"
    del model.graph.value_info[:]
    return model


# name -> (model, input name, row shape, batch sizes, content type)
MODELS = {
    "mlp": (mlp, "x", (SIZES[0],), (1, 2, 4, 8, 16), "application/json"),
    "cnn": (cnn, "input", (3, CNN_HW, CNN_HW), (1, 2, 4, 8), "application/x-npy"),
}


def _body(name: str, x: np.ndarray, content_type: str) -> bytes:
    if content_type == "application/json":
        return json.dumps({"inputs": {name: x.tolist()}}).encode()
    buf = io.BytesIO()
    np.save(buf, x)
    return buf.getvalue()


def _stats(seconds: list[float]) -> dict:
    a = np.array(seconds)
    return {"requests": len(a), "throughput_rps": round(float(len(a) / a.sum()), 1),
            "p50_ms": round(float(np.percentile(a, 50)) * 1e3, 3), "p99_ms": round(float(np.percentile(a, 99)) * 1e3, 3)}


def direct(bundle: Path, onnx_path: Path, feeds: dict, n: int) -> dict:
    import onnxruntime as ort

    from runtime_min import load
    out = {}
    with load(bundle, timing=True) as m:
        m.run(feeds)
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            m.run(feeds)
            times.append(time.perf_counter() - t0)
        out["vkc Model.run"] = _stats(times)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = opts.inter_op_num_threads = 1
    s = ort.InferenceSession(str(onnx_path), opts, providers=["CPUExecutionProvider"])
    s.run(None, feeds)
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        s.run(None, feeds)
        times.append(time.perf_counter() - t0)
    out["onnxruntime session.run"] = _stats(times)
    return out


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="fewer requests and seconds (a smoke run)")
    p.add_argument("--json", type=Path, help="write the figures here")
    p.add_argument("--model", choices=sorted(MODELS), default="mlp")
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--batch-wait-ms", type=float, default=0.0)
    p.add_argument("--out", type=Path, default=Path("out/serving"))
    args = p.parse_args(argv)
    os.environ.setdefault("LP_NUM_THREADS", "1")
    seconds, requests = (4.0, 600) if args.quick else (12.0, 4000)

    from ray import serve

    from compiler import compile_model
    from serving import app

    from .ort_engine import OrtEngine

    args.out.mkdir(parents=True, exist_ok=True)
    build, name, row, batches, content_type = MODELS[args.model]
    model = build()
    onnx_path, bundle = args.out / f"{args.model}.onnx", args.out / f"{args.model}.vkb"
    onnx.save(model, onnx_path)
    shapes = [{name: [b, *row]} for b in batches]
    bundle.write_bytes(compile_model(model, target="lavapipe", variants=shapes))
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal((1, *row)).astype(np.float32) for _ in range(16)]
    bodies = [_body(name, x, content_type) for x in xs]
    result = {"model": f"{args.model}: {name} float32[n, {', '.join(map(str, row))}], batch sizes "
                       f"{', '.join(map(str, batches))}, {content_type} bodies",
              "settings": {"concurrency": args.concurrency, "batch_wait_ms": args.batch_wait_ms,
                           "max_seconds": seconds, "max_requests": requests,
                           "LP_NUM_THREADS": os.environ["LP_NUM_THREADS"], "cpus": os.cpu_count()}}
    result["direct"] = direct(bundle, onnx_path, {name: xs[0]}, 100 if args.quick else 1000)
    print(json.dumps(result["direct"]))

    port = client.free_port()
    url = f"http://127.0.0.1:{port}/"
    engines = {"vkc": None, "onnxruntime": functools.partial(OrtEngine, str(onnx_path.resolve()), shapes)}
    try:
        app.connect(num_cpus=os.cpu_count(), object_store_memory=100 << 20)
        serve.start(http_options={"host": "127.0.0.1", "port": port}, logging_config={"enable_access_log": False})

        def deploy(engine: str, replicas: int):
            return app.start(app.application(bundle, replicas=replicas, make_engine=engines[engine],
                                             max_ongoing_requests=64, batch_wait_ms=args.batch_wait_ms), port=port)

        result["closed_loop"] = {}
        for engine in engines:
            for replicas in (1, 2):
                deploy(engine, replicas)
                client.run(url, bodies, content_type, concurrency=args.concurrency, max_requests=200, max_seconds=2)  # warm
                r = client.run(url, bodies, content_type, concurrency=args.concurrency, max_requests=requests,
                               max_seconds=seconds)
                result["closed_loop"][f"{engine} x{replicas}"] = r.summary()
                print(engine, replicas, r.summary())

        floor = serve.run(serve.deployment(Echo, logging_config={"enable_access_log": False}).bind(),
                          name=app.APP, route_prefix="/")
        result["floor"] = {"http": client.run(url, bodies, content_type, concurrency=1, max_requests=requests // 4,
                                              max_seconds=seconds / 2).summary(),
                           "handle": _stats(_time_handle(floor, {name: xs[0]}, 100 if args.quick else 500))}
        print("floor", result["floor"])
        handle = deploy("vkc", 1)
        client.run(url, bodies, content_type, concurrency=1, max_requests=50, max_seconds=2)  # warm
        served = handle.info.remote().result()["served"]
        one = client.run(url, bodies, content_type, concurrency=1, max_requests=requests // 4, max_seconds=seconds / 2)
        times = _time_handle(handle, {name: xs[0]}, 100 if args.quick else 500)
        now = handle.info.remote().result()["served"]
        n = now["requests"] - served["requests"]
        base = result["direct"]["vkc Model.run"]["p50_ms"]
        result["overhead"] = {"http": one.summary(), "handle": _stats(times),
                              "in_replica_mean_ms": round((now["replica_ms"] - served["replica_ms"]) / n, 3),
                              "runner_mean_ms": round((now["run_ms"] - served["run_ms"]) / n, 3)}
        for k in ("http", "handle"):
            result["overhead"][k]["overhead_p50_ms"] = round(result["overhead"][k]["p50_ms"] - base, 3)
        print(result["overhead"])

        best = max((k for k in result["closed_loop"] if k.startswith("vkc")),
                   key=lambda k: result["closed_loop"][k]["throughput_rps"])
        replicas = int(best.split("x")[-1])
        deploy("vkc", replicas)
        rate = 0.7 * result["closed_loop"][best]["throughput_rps"]
        for arrivals in ("poisson", "uniform"):
            r = client.run(url, bodies, content_type, rate=rate, arrivals=arrivals, concurrency=1024,
                           max_requests=int(rate * seconds), max_seconds=seconds)
            result[f"open_loop_70_{arrivals}"] = dict(r.summary(), config=best, rate_rps=round(rate, 1),
                                                      p99_over_p50=round(r.percentile(99) / r.percentile(50), 2))
            print(arrivals, result[f"open_loop_70_{arrivals}"])

        handle = deploy("vkc", 2)
        result["kill"] = kill_under_load(url, handle, bodies, content_type, args.concurrency, requests, seconds)
        print(result["kill"])
    finally:
        serve.shutdown()
        import ray
        ray.shutdown()
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    print(table(result))
    return result


class Echo:
    """The floor: a deployment that answers without reading its request (what Serve costs alone)."""

    async def __call__(self, request):
        return b"{}"

    async def infer(self, feeds):
        return feeds


def _time_handle(handle, feeds: dict, n: int) -> list[float]:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        handle.infer.remote(feeds).result()
        times.append(time.perf_counter() - t0)
    return times


def kill_under_load(url: str, handle, bodies: list, content_type: str, concurrency: int, requests: int,
                    seconds: float) -> dict:
    before = {}
    for _ in range(40):
        info = handle.info.remote().result()
        before[info["replica"]] = info
        if len(before) == 2:
            break
    victim = next(iter(before.values()))
    killed = {}

    async def kill(t0):
        await asyncio.sleep(2.0)
        killed["at"] = time.perf_counter()
        os.kill(victim["pid"], signal.SIGKILL)

    r = client.run(url, bodies, content_type, concurrency=concurrency, max_requests=requests, max_seconds=max(seconds, 8.0),
                   retries=8, during=kill)
    new = [o.end for o in r.outcomes if o.replica and o.replica not in before]
    deadline = time.perf_counter() + 60
    while not new and time.perf_counter() < deadline:  # the load ended first: ask until a new one answers
        new = [time.perf_counter() for info in [handle.info.remote().result()] if info["replica"] not in before]
    after = [o for o in r.outcomes if o.start >= killed["at"]]
    return dict(r.summary(), recovery_s=round(min(new) - killed["at"], 2) if new else None,
                failed_attempts=sum(o.attempts - 1 for o in r.outcomes),
                p99_after_kill_ms=round(float(np.percentile([o.latency for o in after], 99)) * 1e3, 1) if after else None)


def table(result: dict) -> str:
    rows = ["| setup | requests | throughput (req/s) | p50 ms | p99 ms |", "|---|---:|---:|---:|---:|"]
    for name, s in result["direct"].items():
        rows.append(f"| one process, {name}, batch 1, sequential | {s['requests']} | {s['throughput_rps']} | "
                    f"{s['p50_ms']} | {s['p99_ms']} |")
    for name, s in result["closed_loop"].items():
        engine, replicas = name.split(" x")
        rows.append(f"| Serve, {engine} inside, {replicas} replica(s), {result['settings']['concurrency']} in flight | "
                    f"{s['requests']} | {s['throughput_rps']} | {s['p50_ms']} | {s['p99_ms']} |")
    o = result["overhead"]
    rows.append(f"| Serve, vkc, 1 replica, 1 in flight over HTTP | {o['http']['requests']} | {o['http']['throughput_rps']} | "
                f"{o['http']['p50_ms']} | {o['http']['p99_ms']} |")
    rows.append(f"| Serve, vkc, 1 replica, 1 in flight through a Python handle | {o['handle']['requests']} | "
                f"{o['handle']['throughput_rps']} | {o['handle']['p50_ms']} | {o['handle']['p99_ms']} |")
    f = result["floor"]
    rows.append(f"| Serve floor: a deployment answering at once, 1 in flight over HTTP / handle | "
                f"{f['http']['requests']} / {f['handle']['requests']} | {f['http']['throughput_rps']} / "
                f"{f['handle']['throughput_rps']} | {f['http']['p50_ms']} / {f['handle']['p50_ms']} | "
                f"{f['http']['p99_ms']} / {f['handle']['p99_ms']} |")
    for arrivals, label in (("poisson", "Poisson arrivals"), ("uniform", "evenly spaced arrivals")):
        s = result[f"open_loop_70_{arrivals}"]
        rows.append(f"| Serve, {s['config']}, {label} at 70% of its peak ({s['rate_rps']} req/s) | {s['requests']} | "
                    f"{s['throughput_rps']} | {s['p50_ms']} | {s['p99_ms']} |")
    k = result["kill"]
    rows.append(f"| Serve, vkc x2, one replica killed after 2 s | {k['requests']} | {k['throughput_rps']} | "
                f"{k['p50_ms']} | {k['p99_ms']} |")
    lines = ["\n".join(rows), "",
             f"Serving overhead at p50 (vs Model.run's {result['direct']['vkc Model.run']['p50_ms']} ms): HTTP "
             f"{o['http']['overhead_p50_ms']} ms, Python handle {o['handle']['overhead_p50_ms']} ms. Of a request "
             f"at 1 in flight (HTTP and handle together), {o['in_replica_mean_ms']} ms on average is spent in the "
             f"replica, {o['runner_mean_ms']} ms of it on the runner thread (fill, Model.run, split); the rest is "
             "Ray's (proxy, actor calls).",
             f"At 70% of peak: p99/p50 = {result['open_loop_70_poisson']['p99_over_p50']} (Poisson arrivals), "
             f"{result['open_loop_70_uniform']['p99_over_p50']} (evenly spaced).",
             f"Replica killed: {k['lost']} lost of {k['requests']}, {k['retried']} retried ({k['failed_attempts']} failed "
             f"attempts), a new replica answered {k['recovery_s']} s after the kill."]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
