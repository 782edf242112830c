"""A bounded asyncio HTTP client for the serving load test (aiohttp, which Ray Serve installs).

Closed loop (`concurrency` requests in flight) or open loop (`rate` requests per second, as Poisson
arrivals or evenly spaced), at most `max_requests` requests and `max_seconds` of sending, loopback
only.

Retry policy (what a client of a replicated service must do; docs/SERVING.md): a request that
fails with a connection error, a timeout or a 5xx is sent again, at most `retries` times, after
`backoff_s` doubled each time (inference is idempotent, so a retry is safe). A 4xx is the
request's fault and is never retried. A request is lost when every attempt failed. Its latency
runs from its first attempt to its answer, retries included.
"""
from __future__ import annotations

import asyncio
import socket
import time
from dataclasses import dataclass, field

import aiohttp
import numpy as np


@dataclass
class Outcome:
    start: float          # perf_counter of the first attempt
    index: int = 0        # which request (bodies[index % len(bodies)] was sent)
    end: float = 0.0
    status: int = 0       # the last answer's HTTP status (0: no answer)
    attempts: int = 0
    replica: str = ""     # x-vkc-replica of the answer
    body: bytes = b""
    error: str = ""

    @property
    def latency(self) -> float:
        return self.end - self.start


@dataclass
class Report:
    outcomes: list = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> list:
        return [o for o in self.outcomes if o.status == 200]

    @property
    def lost(self) -> list:
        return [o for o in self.outcomes if o.status != 200 and not 400 <= o.status < 500]

    @property
    def retried(self) -> int:
        return sum(o.attempts > 1 for o in self.outcomes)

    def throughput(self) -> float:
        return len(self.ok) / self.seconds if self.seconds else 0.0

    def percentile(self, q: float) -> float:
        lat = [o.latency for o in self.ok]
        return float(np.percentile(lat, q)) if lat else float("nan")

    def summary(self) -> dict:
        return {"requests": len(self.outcomes), "ok": len(self.ok), "lost": len(self.lost), "retried": self.retried,
                "seconds": round(self.seconds, 3), "throughput_rps": round(self.throughput(), 1),
                "p50_ms": round(self.percentile(50) * 1e3, 3), "p99_ms": round(self.percentile(99) * 1e3, 3)}


async def _send(session, url: str, index: int, body: bytes, content_type: str, retries: int, backoff_s: float,
                timeout_s: float) -> Outcome:
    out = Outcome(time.perf_counter(), index)
    for attempt in range(retries + 1):
        out.attempts = attempt + 1
        try:
            async with session.post(url, data=body, headers={"content-type": content_type},
                                    timeout=aiohttp.ClientTimeout(total=timeout_s)) as r:
                out.status, out.body = r.status, await r.read()
                out.replica = r.headers.get("x-vkc-replica", "")
                out.error = "" if r.status < 400 else out.body[:200].decode(errors="replace")
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            out.status, out.error = 0, f"{type(exc).__name__}: {exc}"
        if out.status < 500 and out.status != 0:
            break
        if attempt < retries:
            await asyncio.sleep(backoff_s * 2 ** attempt)
    out.end = time.perf_counter()
    return out


async def drive(url: str, bodies: list, content_type: str = "application/json", *, concurrency: int = 8,
                rate: float | None = None, arrivals: str = "poisson", max_requests: int = 1000, max_seconds: float = 30.0, retries: int = 6,
                backoff_s: float = 0.05, timeout_s: float = 30.0, seed: int = 0, during=None) -> Report:
    """Send up to `max_requests` requests (bodies taken in turn) for at most `max_seconds`.
    `during(t0)` (a coroutine function), if given, runs beside the load (e.g. killing a replica)."""
    report = Report()
    rng = np.random.default_rng(seed)
    limit = asyncio.Semaphore(concurrency)
    connector = aiohttp.TCPConnector(limit=concurrency, force_close=False)
    async with aiohttp.ClientSession(connector=connector) as session:
        t0 = time.perf_counter()
        side = asyncio.ensure_future(during(t0)) if during else None
        tasks, next_at = [], t0

        async def one(i):
            async with limit:
                report.outcomes.append(await _send(session, url, i, bodies[i % len(bodies)], content_type,
                                                   retries, backoff_s, timeout_s))

        for i in range(max_requests):
            if time.perf_counter() - t0 > max_seconds:
                break
            if rate:  # open loop: the next arrival, of a Poisson process or evenly spaced
                next_at += rng.exponential(1.0 / rate) if arrivals == "poisson" else 1.0 / rate
                await asyncio.sleep(max(0.0, next_at - time.perf_counter()))
            else:
                await limit.acquire()  # closed loop: start one when one finishes
                limit.release()
            tasks.append(asyncio.ensure_future(one(i)))
            await asyncio.sleep(0)
        await asyncio.gather(*tasks)
        report.seconds = time.perf_counter() - t0
        if side is not None:
            await side
    return report


def free_port() -> int:
    """A loopback TCP port free now (for Serve's proxy)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(url: str, bodies: list, content_type: str = "application/json", **kw) -> Report:
    return asyncio.run(drive(url, bodies, content_type, **kw))
