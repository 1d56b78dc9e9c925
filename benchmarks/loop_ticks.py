"""How long `aenqueue` holds up the event loop, per backend (docs/asyncio.md).

A task ticks every 1 ms while another awaits 1,000 enqueues one after another; the
figures are the longest gap between two ticks (during the first call, which opens
the connection and compiles the statement, and after it) and the total time. Run for
`aenqueue` (the asyncio driver), `aenqueue` forced onto the thread fallback, and
the sync `enqueue` called from a coroutine (what blocks the loop).

    .venv/bin/python -m benchmarks.loop_ticks [memory sqlite postgresql redis]
"""

from __future__ import annotations

import asyncio
import sqlite3
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import conveyor
from conveyor.shell.async_enqueue import AsyncWriters
from conveyor.shell.runtime import Runtime

N = 1000


def _config(backend: str, folder: str) -> dict[str, Any]:
    base: dict[str, Any] = {"entry_points": False, "workers": {"count": 0}}
    if backend == "memory":
        return {**base, "provider": "memory"}
    if backend == "sqlite":
        return {**base, "url": f"sqlite:///{folder}/ticks.db"}
    if backend == "postgresql":
        from conveyor.testing.postgres_server import fresh_database

        return {**base, "url": fresh_database(prefix="conveyor_ticks"), "auto_migrate": True}
    from conveyor.testing.redis_server import redis_url

    return {**base, "provider": "redis", "redis": {"url": redis_url(12), "prefix": "ticks"}}


async def _measure(enqueue: Callable[[int], Awaitable[Any]]) -> tuple[float, float, float]:
    """While `enqueue(i)` runs N times: the longest tick gap during the first call
    (which connects and compiles), the longest after it, and the total seconds."""
    gaps: list[tuple[int, float]] = []
    done = False
    calls = 0

    async def ticker() -> None:
        last = time.perf_counter()
        while not done:
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            gaps.append((calls, now - last))
            last = now

    tick = asyncio.create_task(ticker())
    await asyncio.sleep(0.01)
    began = time.perf_counter()
    for i in range(N):
        await enqueue(i)
        calls += 1
    total = time.perf_counter() - began
    done = True
    await tick
    first = max((gap for n, gap in gaps if n == 0), default=0.0)
    steady = max((gap for n, gap in gaps if n > 0), default=0.0)
    return first, steady, total


async def _run(rt: Runtime) -> dict[str, tuple[float, float, float]]:
    out: dict[str, tuple[float, float, float]] = {}
    out[f"aenqueue ({rt.async_writers.driver})"] = await _measure(
        lambda i: rt.aenqueue("tick", {"i": i})
    )
    await rt.aclose()
    native = rt.async_writers
    rt.async_writers = AsyncWriters(rt.config, rt.queue, native=False)
    out["aenqueue (thread)"] = await _measure(lambda i: rt.aenqueue("tick", {"i": i}))
    rt.async_writers = native

    async def blocking(i: int) -> None:
        rt.enqueue("tick", {"i": i})

    out["enqueue (blocks the loop)"] = await _measure(blocking)
    return out


async def _behind_a_writer(path: str, enqueue: Callable[[], Awaitable[Any]]) -> float:
    """The longest tick gap while one `enqueue()` waits for a SQLite writer that holds
    the lock for 1 s (another connection, as another process would)."""
    writer = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    writer.execute("BEGIN IMMEDIATE")
    threading.Timer(1.0, lambda: writer.execute("COMMIT")).start()
    gaps: list[float] = []
    done = False

    async def ticker() -> None:
        last = time.perf_counter()
        while not done:
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    tick = asyncio.create_task(ticker())
    await asyncio.sleep(0.01)
    await enqueue()
    done = True
    await tick
    writer.close()
    return max(gaps)


def writer_lock(folder: str) -> None:
    """`aenqueue` and `enqueue` behind a SQLite writer holding the lock for 1 s."""
    rt = conveyor.build(_config("sqlite", folder))
    path = f"{folder}/ticks.db"

    async def blocking() -> None:
        rt.enqueue("tick", {})

    try:
        for name, call in (("aenqueue", lambda: rt.aenqueue("tick", {})), ("enqueue", blocking)):
            gap = asyncio.run(_behind_a_writer(path, call))
            print(f"sqlite     {name} behind a 1 s writer: longest tick gap {gap * 1000:7.1f} ms")
    finally:
        rt.close()


def main(backends: list[str]) -> None:
    for backend in backends or ["memory", "sqlite", "postgresql", "redis"]:
        with tempfile.TemporaryDirectory() as folder:
            rt = conveyor.build(_config(backend, folder))
            try:
                for path, (first, steady, total) in asyncio.run(_run(rt)).items():
                    print(
                        f"{backend:10} {path:30} longest tick gap: first call"
                        f" {first * 1000:7.1f} ms, after {steady * 1000:7.1f} ms;"
                        f" {N} in {total:5.2f} s"
                    )
            finally:
                rt.close()
            if backend == "sqlite":
                writer_lock(folder)


if __name__ == "__main__":
    main(sys.argv[1:])
