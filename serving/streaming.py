"""A blocking iterator run on an executor's thread and read on the event loop as an async iterator.

The replica's event loop must stay free while a generation runs (health checks, other requests),
and the model must be run by the runner thread alone; so the iterator is advanced on the runner
and its items cross to the loop through a queue. When the reader goes (a client that disconnects
cancels its task; a handle's stream closed), the runner stops after the item in hand and closes
the iterator, and the reader's exit waits for that: the next generation starts on a quiet model.
"""
from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator

_ITEM, _FAILED, _END = range(3)


async def from_thread(executor, items: Iterator) -> AsyncIterator:
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue = asyncio.Queue()
    stop = threading.Event()

    def put(kind, value) -> None:
        try:
            loop.call_soon_threadsafe(queue.put_nowait, (kind, value))
        except RuntimeError:  # the loop has closed: nobody reads any more
            stop.set()

    def pump() -> None:
        try:
            while not stop.is_set():
                try:
                    item = next(items)
                except StopIteration:
                    break
                put(_ITEM, item)
        except Exception as exc:  # noqa: BLE001  raised again on the loop, in the reader
            put(_FAILED, exc)
        finally:
            items.close()
            put(_END, None)

    pumped = loop.run_in_executor(executor, pump)
    try:
        while True:
            kind, value = await queue.get()
            if kind == _END:
                return
            if kind == _FAILED:
                raise value
            yield value
    finally:
        stop.set()
        await _settled(pumped)


async def _settled(pumped) -> None:
    """Wait until the runner has stopped, through more cancellations (Serve may cancel a request
    again): the wait is one item long, and the next generation must not start under this one."""
    while not pumped.done():
        try:
            await asyncio.shield(pumped)
        except asyncio.CancelledError:
            pass
