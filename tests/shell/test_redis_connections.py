"""How many connections one process may hold to Redis at once.

An idle worker holds a connection for its blocking wait (`BLPOP` on the queue's
wake list), and so does every thread of a web server enqueueing at the same
moment. redis-py 8 caps a client's pool at 100 connections unless told otherwise:
past that, a worker's wait or an enqueue failed with "Too many connections" (an
outage to the retry loop) while the server had room for thousands. A client made
from a URL is capped at what a server takes by default instead.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from typing import Any

import conveyor
import pytest
import redis
from backends import REDIS_TEST_DB
from conveyor.shell.adapters.redis.client import connect
from conveyor.testing.redis_server import redis_url

# More than redis-py 8's own cap of a pool (100).
MANY = 130


def _forget(prefix: str) -> None:
    client = redis.Redis.from_url(redis_url(REDIS_TEST_DB))
    for key in client.scan_iter(f"{{{prefix}}}*"):
        client.delete(key)
    client.close()


def test_one_client_serves_more_blocked_threads_than_redis_pys_default_pool() -> None:
    client = connect(redis_url(REDIS_TEST_DB))
    key = f"conn-test:{uuid.uuid4().hex}"
    failures: list[BaseException] = []
    started = threading.Barrier(MANY + 1, timeout=30)

    def blocked() -> None:
        started.wait()
        try:
            client.blpop([key], timeout=5)
        except BaseException as exc:  # recorded for the assertion below
            failures.append(exc)

    threads = [threading.Thread(target=blocked) for _ in range(MANY)]
    for thread in threads:
        thread.start()
    started.wait()
    try:
        client.lpush(key, *range(MANY))  # every waiter takes one and returns
        for thread in threads:
            thread.join(30)
    finally:
        client.delete(key)
        client.close()
    assert failures == []


def test_a_process_runs_more_workers_at_once_than_redis_pys_default_pool() -> None:
    """Each job waits until all of them run: they finish only if every worker of the
    process got a connection for its claim while the others held theirs."""
    together = threading.Barrier(MANY, timeout=30)

    def meet(args: object) -> str:
        together.wait()
        return "met"

    prefix = f"conn-{uuid.uuid4().hex[:8]}"
    runtime = conveyor.build(
        {
            "provider": "redis",
            "redis": {"url": redis_url(REDIS_TEST_DB), "prefix": prefix},
            "workers": {"count": MANY},
        },
        handlers={"meet": meet},
        env={},
    )
    try:
        runtime.start()
        jobs = [runtime.enqueue("meet", {}) for _ in range(MANY)]
        outcomes = [runtime.result(job.id, timeout=60) for job in jobs]
        assert outcomes == ["met"] * MANY
    finally:
        runtime.stop(10)
        runtime.close()
        _forget(prefix)


@pytest.mark.parametrize("asked", [5, 300])
def test_a_cap_given_in_the_url_is_kept(asked: int) -> None:
    client = connect(f"{redis_url(REDIS_TEST_DB)}?max_connections={asked}")
    try:
        assert client.connection_pool.max_connections == asked
    finally:
        client.close()


def test_asyncio_code_has_more_sends_in_flight_than_redis_pys_default_pool() -> None:
    """`aenqueue` from many tasks of one event loop, while the server holds writes for
    a moment (busy, or a slow link): each send in flight holds a connection of the
    asyncio client's pool, so all of them are open at once. Capped at 100, the rest
    were refused and retried as an outage, after the pause."""
    prefix = f"conn-{uuid.uuid4().hex[:8]}"
    runtime = conveyor.build(
        {
            "provider": "redis",
            "redis": {"url": redis_url(REDIS_TEST_DB), "prefix": prefix},
            "workers": {"count": 0},
        },
        handlers={"meet": lambda args: None},
        env={},
    )
    # The test server is this process's own (see `conveyor.testing.redis_server`):
    # the pause holds no one else's writes.
    watcher = redis.Redis.from_url(redis_url(REDIS_TEST_DB))
    before = len(watcher.client_list())
    peak = 0
    jobs: list[Any] = []

    async def all_at_once() -> None:
        sends = [runtime.aenqueue("meet", {"n": n}) for n in range(MANY)]
        jobs.extend(await asyncio.gather(*sends))

    try:
        watcher.execute_command("CLIENT", "PAUSE", 20_000, "WRITE")
        sending = threading.Thread(target=asyncio.run, args=(all_at_once(),))
        sending.start()
        deadline = time.monotonic() + 10
        while peak < before + MANY and time.monotonic() < deadline:
            peak = max(peak, len(watcher.client_list()))
            time.sleep(0.02)
        watcher.execute_command("CLIENT", "UNPAUSE")
        sending.join(30)
        assert len({job.id for job in jobs}) == MANY, "every send got its reply"
        assert peak - before >= MANY, f"{peak - before} sends in flight at once"
    finally:
        watcher.execute_command("CLIENT", "UNPAUSE")
        watcher.close()
        runtime.close()
        _forget(prefix)
