"""Inline mode, a job enqueued with a plain (blocking) `enqueue` from an async
handler: a run there would stall the event loop the handler runs on, and an async
job could never start, so it runs in the same inline run once that handler has
returned, before the outer `enqueue` returns. It failed the outer job and left the
inner one claimed, `running`, for good."""

from __future__ import annotations

from typing import Any

import conveyor
from conveyor.testing import ManualClock, drain, enqueued_jobs


def build(tasks: conveyor.Tasks) -> conveyor.Runtime:
    return conveyor.build(
        {"provider": "memory"}, handlers=tasks, clock=ManualClock(), env={}, inline=True
    )


def test_an_async_handler_s_plain_enqueue_runs_once_it_has_returned() -> None:
    tasks = conveyor.Tasks()
    order: list[str] = []

    @tasks.task(name="inner")
    async def inner(args: dict[str, Any]) -> str:
        order.append("inner")
        return "inner"

    @tasks.task(name="elsewhere", queue="reports")
    def elsewhere(args: dict[str, Any]) -> str:
        order.append("elsewhere")
        return "elsewhere"

    @tasks.task(name="outer")
    async def outer(args: dict[str, Any]) -> str:
        inner.enqueue({})
        elsewhere.enqueue({})
        order.append("outer returns")
        return "outer"

    rt = build(tasks)
    try:
        job = outer.enqueue({})
        assert rt.result(job.id, timeout=5) == "outer"
        assert order == ["outer returns", "inner", "elsewhere"]
        for task in (inner, elsewhere):
            assert [j.status.value for j in enqueued_jobs(rt, task)] == ["completed"]
        assert drain(rt).processed == 0, "nothing was left for a drain"
    finally:
        rt.close()


def test_a_sync_handler_s_enqueue_still_runs_before_it_returns() -> None:
    tasks = conveyor.Tasks()
    order: list[str] = []

    @tasks.task(name="inner")
    async def inner(args: dict[str, Any]) -> None:
        order.append("inner")

    @tasks.task(name="outer")
    def outer(args: dict[str, Any]) -> None:
        inner.enqueue({})
        order.append("outer returns")

    rt = build(tasks)
    try:
        outer.enqueue({})
        assert order == ["inner", "outer returns"]
    finally:
        rt.close()


def test_no_heartbeat_thread_outlives_an_inline_run_by_more_than_a_moment() -> None:
    # Each inline worker's lease keeper lived on for a quarter of its interval (5 s)
    # after the run and after `close()`: a thread-leak check in a test suite saw it.
    import threading
    import time

    tasks = conveyor.Tasks()

    @tasks.task(name="a")
    def a(args: dict[str, Any]) -> None:
        pass

    before = set(threading.enumerate())
    rt = build(tasks)
    a.enqueue({})
    rt.close()
    ours = [t for t in threading.enumerate() if t not in before and t.name == "conveyor-heartbeat"]
    deadline = time.monotonic() + 3.0  # it took 5 s
    while any(t.is_alive() for t in ours) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not [t for t in ours if t.is_alive()], "a heartbeat thread outlived the run"


def test_a_run_stopped_early_leaves_no_queue_for_a_run_of_other_queues() -> None:
    # The queue an async handler's enqueue left to its run stayed behind when a
    # drain's max_jobs stopped that run, and a later drain of other queues ran it.
    from conveyor.testing import DrainLimit

    tasks = conveyor.Tasks()

    @tasks.task(name="inner", queue="c")
    def inner(args: dict[str, Any]) -> None:
        pass

    @tasks.task(name="outer", queue="a")
    async def outer(args: dict[str, Any]) -> None:
        inner.enqueue({})

    @tasks.task(name="other", queue="b")
    def other(args: dict[str, Any]) -> None:
        pass

    rt = build(tasks)
    try:
        outer.enqueue({}, delay=60)
        other.enqueue({}, delay=60)
        try:
            drain(rt, queues=["a", "b"], max_jobs=1)
        except DrainLimit:
            pass
        assert [j.status.value for j in enqueued_jobs(rt, inner)] == ["pending"]
        assert drain(rt, queues="x", advance_clock=False).processed == 0
        assert [j.status.value for j in enqueued_jobs(rt, inner)] == ["pending"]
    finally:
        rt.close()
