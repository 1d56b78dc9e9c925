"""Sweep cases for the asyncio writers behind `Runtime.aenqueue`: a job they write is
the job `enqueue` writes, in the same place in the claim order. Each runs on every
backend through `test_adapter_surface.py`; SQLite's path is `enqueue` in a thread
(docs/asyncio.md), so there the case checks that path.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from backends import REDIS_TEST_DB, Backend
from conveyor.core import Job, Priority
from conveyor.shell.async_enqueue import InlineWriter
from conveyor.shell.ports import Claim
from helpers import T0, make_job


class _ThreadWriter:
    """SQLite's path: the sync enqueue in a worker thread."""

    def __init__(self, queue: Any) -> None:
        self._queue = queue

    async def enqueue(self, job: Job) -> None:
        await asyncio.to_thread(self._queue.enqueue, job)

    async def enqueue_many(self, jobs: Sequence[Job]) -> None:
        await asyncio.to_thread(self._queue.enqueue_many, jobs)

    async def aclose(self) -> None:
        return None


def _writer(b: Backend) -> Any:
    """The writer `aenqueue` uses on `b`'s backend, over `b`'s data."""
    if b.name == "memory":
        return InlineWriter(b.queue)
    if b.name == "sqlite":
        return _ThreadWriter(b.queue)
    if b.name == "postgresql":
        from conveyor.shell.adapters.sql.async_queue import AsyncSqlQueue

        return AsyncSqlQueue(b.queue.engine.url.render_as_string(hide_password=False))
    from conveyor.shell.adapters.redis.async_queue import AsyncRedisQueue
    from conveyor.testing.redis_server import redis_url

    return AsyncRedisQueue(redis_url(REDIS_TEST_DB))


def _in_a_loop(b: Backend, work: Callable[[Any], Awaitable[None]]) -> None:
    async def main() -> None:
        writer = _writer(b)
        try:
            await work(writer)
        finally:
            await writer.aclose()

    asyncio.run(main())


def async_writes_take_their_place_in_the_claim_order(b: Backend) -> None:
    a, e = make_job(args={"n": "a"}), make_job(args={"n": "e"}, priority=Priority.HIGH)
    b_, c, d = (
        make_job(args={"n": "b"}),
        make_job(args={"n": "c"}, priority=Priority.HIGH),
        make_job(args={"n": "d"}),
    )

    async def work(writer: Any) -> None:
        b.queue.enqueue(a)
        await writer.enqueue(b_)
        await writer.enqueue_many([c, d])
        b.queue.enqueue(e)

    _in_a_loop(b, work)
    claimed = []
    while (claim := b.queue.dequeue("default", T0)) is not None:
        assert isinstance(claim, Claim)
        claimed.append(claim.job)
    assert [j.args["n"] for j in claimed] == ["c", "e", "a", "b", "d"]
    assert claimed[0] == c  # the whole job, as written


def an_async_write_upserts_by_id(b: Backend) -> None:
    first = make_job(args={"v": 1})
    second = make_job(args={"v": 2}, id=first.id)

    async def work(writer: Any) -> None:
        await writer.enqueue(first)
        await writer.enqueue(second)

    _in_a_loop(b, work)
    claim = b.queue.dequeue("default", T0)
    assert isinstance(claim, Claim) and claim.job.args["v"] == 2
    assert b.queue.dequeue("default", T0) is None


ASYNCIO_CASES = (async_writes_take_their_place_in_the_claim_order, an_async_write_upserts_by_id)
