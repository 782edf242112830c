"""The bundle behind Ray Serve on this machine: two lavapipe replicas (validated), HTTP and Python
handles, 4xx answers, and a short load during which one replica process is killed: no request is
lost (the client's retry policy, benchmarks/serving/client.py) and a new replica serves."""
import io
import json
import os
import signal
import time

import numpy as np
import pytest

import ray
import requests

from benchmarks.serving import client
from runtime_min import load
from serving import app


@pytest.fixture(scope="module")
def served(bundle):
    """(url, handle) of two replicas of `bundle`; Ray and Serve are shut down whatever happens."""
    from ray import serve
    port = client.free_port()
    try:
        app.connect(num_cpus=2, object_store_memory=100 << 20)
        handle = app.start(app.application(bundle, replicas=2, cpus_per_replica=1, batch_wait_ms=2),
                           port=port)
        yield f"http://127.0.0.1:{port}/", handle
    finally:
        if ray.is_initialized():
            serve.shutdown()
            ray.shutdown()


def _replicas(handle, want: int, tries: int = 40) -> dict:
    """{replica id: info} of `want` distinct replicas (calls go to a replica chosen by the router)."""
    seen = {}
    for _ in range(tries):
        info = handle.info.remote().result()
        seen[info["replica"]] = info
        if len(seen) >= want:
            break
    return seen


def _reference(bundle, xs):
    with load(bundle, validation=True) as m:
        return [np.concatenate([m.run({"x": x[i:i + 1]})["y"] for i in range(len(x))]) for x in xs]


@pytest.mark.timeout(120)
def test_http_and_handles_answer_and_refuse(served, bundle, rng):
    url, handle = served
    x = rng.standard_normal((3, 16)).astype(np.float32)
    (ref,) = _reference(bundle, [x])
    r = requests.post(url, json={"inputs": {"x": x.tolist()}})
    assert r.status_code == 200 and r.headers["x-vkc-replica"]
    np.testing.assert_allclose(np.array(r.json()["outputs"]["y"], np.float32), ref, rtol=1e-6, atol=1e-7)
    buf = io.BytesIO()
    np.save(buf, x[:1])
    r = requests.post(url, data=buf.getvalue(), headers={"content-type": "application/x-npy"})
    assert r.status_code == 200
    np.testing.assert_allclose(np.load(io.BytesIO(r.content)), ref[:1], rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(handle.infer.remote({"x": x}).result()["y"], ref, rtol=1e-6, atol=1e-7)
    for body, status, message in [
        ({"inputs": {"ids": x.tolist()}}, 400, "unknown input 'ids'; the bundle's inputs are x."),
        ({"inputs": {"x": x[:, :4].tolist()}}, 400, "no variant takes rows of shape x=4"),
        ({"inputs": {"x": [[0.0] * 16] * 5}}, 413, "a request of 5 rows is over every variant (at most 4"),
    ]:
        r = requests.post(url, data=json.dumps(body), headers={"content-type": "application/json"})
        assert r.status_code == status and message in r.json()["error"], r.text
    r = requests.post(url, data=b"x", headers={"content-type": "text/plain"})
    assert r.status_code == 415
    with pytest.raises(ValueError, match="input 'x' is float64, the bundle takes float32"):
        handle.infer.remote({"x": x.astype(np.float64)}).result()
    health = requests.get(url + "health").json()
    assert health["status"] == "ok" and health["inputs"] == "x float32[n, 16] with n <= 4 (batch sizes 1, 4)"


@pytest.mark.timeout(150)
def test_no_request_is_lost_when_a_replica_is_killed_under_load(served, bundle, rng):
    url, handle = served
    before = _replicas(handle, 2)
    assert len(before) == 2, f"expected two replicas, saw {list(before)}"
    victim = next(iter(before.values()))
    xs = [rng.standard_normal((1 + i % 2, 16)).astype(np.float32) for i in range(8)]
    refs = _reference(bundle, xs)
    bodies = [json.dumps({"inputs": {"x": x.tolist()}}).encode() for x in xs]
    killed = {}

    async def kill(t0):
        import asyncio
        await asyncio.sleep(1.0)
        killed["at"] = time.perf_counter()
        os.kill(victim["pid"], signal.SIGKILL)

    report = client.run(url, bodies, concurrency=6, max_requests=3000, max_seconds=8, retries=8, during=kill)
    assert "at" in killed and any(o.start > killed["at"] for o in report.outcomes), "the load ended before the kill"
    assert not report.lost, f"{len(report.lost)} of {len(report.outcomes)} lost, e.g. {report.lost[0].error}"
    assert all(o.status == 200 for o in report.outcomes), [o.error for o in report.outcomes if o.status != 200][:3]
    for o in report.outcomes:
        got = np.array(json.loads(o.body)["outputs"]["y"], np.float32)
        np.testing.assert_allclose(got, refs[o.index % len(xs)], rtol=1e-6, atol=1e-7)
    new = [o.end for o in report.outcomes if o.replica not in before]
    deadline = time.perf_counter() + 30
    while not new and time.perf_counter() < deadline:  # the load ended first: ask until a new one answers
        new = [time.perf_counter() for info in [handle.info.remote().result()] if info["replica"] not in before]
    assert new, "no new replica answered within 30 s of the load"
    print(f"\n{report.summary()}; a new replica answered {min(new) - killed['at']:.2f} s after the kill")
    now = _replicas(handle, 2)
    assert victim["replica"] not in now and len(now) == 2
    survivor_id = next(r for r in now if r in before)
    survivor = now[survivor_id]["served"]
    assert survivor["requests"] > survivor["batches"], f"no batch held two requests: {survivor}"
    assert survivor["rows_run"] >= survivor["requests"]  # padded rows included
    for _ in range(6):  # the replicas, the new one included, ran validated: nothing reported
        assert handle.validation_messages.remote().result() == []
    # the metrics reached the node's exporter, tagged by replica (Ray exports every few seconds)
    port, found = ray.nodes()[0]["MetricsExportPort"], ""
    deadline = time.perf_counter() + 20
    while f'replica="{survivor_id}"' not in found and time.perf_counter() < deadline:
        time.sleep(1)
        found = "\n".join(line for line in requests.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text.splitlines()
                          if line.startswith("ray_vkc_batch_rows_count"))
    assert f'replica="{survivor_id}"' in found, found or "no ray_vkc_batch_rows_count exported"


@pytest.mark.timeout(60)
def test_deleting_the_application_drains_it(served):
    """The last test of the module (it takes the application down): requests sent before the delete
    all get their outputs; after it, the route is gone (404), never a dropped request."""
    from ray import serve
    url, _ = served
    body = json.dumps({"inputs": {"x": [[0.25] * 16]}}).encode()
    marks = {}

    async def delete(t0):
        import asyncio
        await asyncio.sleep(1.0)
        marks["at"] = time.perf_counter()
        await asyncio.get_running_loop().run_in_executor(None, serve.delete, app.APP)

    report = client.run(url, [body], concurrency=6, max_requests=3000, max_seconds=3, retries=0, during=delete)
    before = [o for o in report.outcomes if o.start < marks["at"]]
    assert before and all(o.status == 200 for o in before), [o.error for o in before if o.status != 200][:3]
    others = [o.error for o in report.outcomes if o.status not in (200, 404)]
    assert not others, others[:3]
