"""Cases of the asyncio writer behind `Runtime.aenqueue` (the subject's
`async_writer`): a job it writes is the job `enqueue` writes, in the same place in
the claim order. Where no asyncio driver serves (SQLite, docs/asyncio.md) the writer
is `ThreadWriter`, the queue's own enqueue in a thread, and the case checks that path.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from ....core import Job, Priority
from ....shell.ports import Claim
from ..case import case
from ..subject import ASYNC_WRITER, Subject
from ..support import T0, make_job


class ThreadWriter:
    """The path `aenqueue` takes where no asyncio driver serves (SQLite, by choice): the
    queue's own enqueue in a worker thread. A subject's `async_writer` may return one."""

    driver = "thread"

    def __init__(self, queue: Any) -> None:
        self._queue = queue

    async def enqueue(self, job: Job) -> None:
        await asyncio.to_thread(self._queue.enqueue, job)

    async def enqueue_many(self, jobs: Sequence[Job]) -> None:
        await asyncio.to_thread(self._queue.enqueue_many, jobs)

    async def aclose(self) -> None:
        return None


def _in_a_loop(s: Subject, work: Callable[[Any], Awaitable[None]]) -> None:
    async def main() -> None:
        assert s.async_writer is not None
        writer = s.async_writer()
        try:
            await work(writer)
        finally:
            await writer.aclose()

    asyncio.run(main())


@case(ASYNC_WRITER)
def async_writes_take_their_place_in_the_claim_order(s: Subject) -> None:
    a, e = make_job(args={"n": "a"}), make_job(args={"n": "e"}, priority=Priority.HIGH)
    b_, c, d = (
        make_job(args={"n": "b"}),
        make_job(args={"n": "c"}, priority=Priority.HIGH),
        make_job(args={"n": "d"}),
    )

    async def work(writer: Any) -> None:
        s.queue.enqueue(a)
        await writer.enqueue(b_)
        await writer.enqueue_many([c, d])
        s.queue.enqueue(e)

    _in_a_loop(s, work)
    claimed = []
    while (claim := s.queue.dequeue("default", T0)) is not None:
        assert isinstance(claim, Claim)
        claimed.append(claim.job)
    assert [j.args["n"] for j in claimed] == ["c", "e", "a", "b", "d"]
    assert claimed[0] == c  # the whole job, as written


@case(ASYNC_WRITER)
def an_async_write_upserts_by_id(s: Subject) -> None:
    first = make_job(args={"v": 1})
    second = make_job(args={"v": 2}, id=first.id)

    async def work(writer: Any) -> None:
        await writer.enqueue(first)
        await writer.enqueue(second)

    _in_a_loop(s, work)
    claim = s.queue.dequeue("default", T0)
    assert isinstance(claim, Claim) and claim.job.args["v"] == 2
    assert s.queue.dequeue("default", T0) is None


ASYNCIO_CASES = (async_writes_take_their_place_in_the_claim_order, an_async_write_upserts_by_id)
