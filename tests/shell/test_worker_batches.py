"""Prefetch: a worker claims several jobs per round trip and finishes them together,
on every backend, without giving up priority order or write-before-release."""

from __future__ import annotations

from typing import Any

from backends import Backend
from conveyor.core import JobStatus, Priority
from conveyor.shell.registry import Registry
from conveyor.shell.worker.loop import Worker
from conveyor.testing.clock import ManualClock
from helpers import T0, Crash, locate, make_job


def _worker(b: Backend, handlers: dict[str, Any], **options: Any) -> Worker:
    return Worker(
        b.queue, b.store, Registry(handlers), clock=ManualClock(T0), clock_check=False, **options
    )


def test_a_prefetching_worker_keeps_priority_then_fifo_order(backend: Backend) -> None:
    ran: list[int] = []
    worker = _worker(backend, {"w": lambda a: ran.append(a["i"])}, prefetch=4)
    jobs = [make_job("w", args={"i": i}, priority=p) for i, p in enumerate(["low", "high"] * 5)]
    for job in jobs:
        backend.queue.enqueue(job)
    assert worker.drain() == 10
    assert ran == [1, 3, 5, 7, 9, 0, 2, 4, 6, 8]
    assert all(backend.store.get(j.id).status is JobStatus.COMPLETED for j in jobs)
    assert worker.stats.completed == 10


def test_failures_in_a_batch_are_retried_and_dead_lettered_as_usual(backend: Backend) -> None:
    def boom(args: Any) -> None:
        raise ValueError("no")

    worker = _worker(backend, {"ok": lambda a: 1, "bad": boom}, prefetch=5)
    ok, retried, dead = (
        make_job("ok"),
        make_job("bad", max_retries=1),
        make_job("bad", max_retries=0),
    )
    for job in (ok, retried, dead):
        backend.queue.enqueue(job)
    assert worker.drain() == 3
    assert backend.store.get(ok.id).status is JobStatus.COMPLETED
    assert backend.store.get(dead.id).status is JobStatus.FAILED
    assert backend.queue.counts(T0)["default"].scheduled == 1, "the retry is parked"
    assert (worker.stats.completed, worker.stats.retried, worker.stats.dead_lettered) == (1, 1, 1)


def test_a_crash_before_the_batch_is_finished_leaves_every_job_in_flight(backend: Backend) -> None:
    import time

    worker = _worker(backend, {"w": lambda a: None}, prefetch=3, heartbeat_interval_ms=2)
    jobs = [make_job("w") for _ in range(3)]
    for job in jobs:
        backend.queue.enqueue(job)

    def crash(*_: Any) -> None:
        raise Crash("finish_many")

    worker.executor.finish_many = crash  # type: ignore[method-assign]
    try:
        worker.run_once()
    except Crash:
        pass
    assert [locate(backend.queue, backend.store, j.id) for j in jobs] == ["in flight"] * 3
    # Left to their leases: the worker no longer renews them, or they would stay
    # claimed, never reclaimed, for as long as the process lives.
    queue: Any = backend.queue
    renewed: list[Any] = []
    extend = queue.extend
    queue.extend = lambda claim, now: renewed.append(claim.job.id) or extend(claim, now)
    time.sleep(0.1)  # fifty heartbeat intervals
    assert renewed == []


def test_stopping_hands_unstarted_prefetched_claims_back(backend: Backend) -> None:
    seen: list[int] = []

    def first_stops(args: Any) -> None:
        seen.append(args["i"])
        worker.stop()

    worker = _worker(backend, {"w": first_stops}, prefetch=3)
    for i in range(3):
        backend.queue.enqueue(make_job("w", args={"i": i}, priority=Priority.NORMAL))
    worker.run_once()
    assert seen == [0]
    counts = backend.queue.counts(T0)["default"]
    assert (counts.ready, counts.in_flight) == (2, 0)


def test_no_renewal_lands_between_an_outcome_write_and_its_release(
    backend: Backend, caplog: Any
) -> None:
    import logging
    import time

    queue: Any = backend.queue
    answers: list[bool] = []
    extend = queue.extend

    def recording(claim: Any, now: Any) -> bool:
        ok = bool(extend(claim, now))
        answers.append(ok)
        return ok

    def slow_reply(write: Any) -> Any:
        def written(*args: Any, **kwargs: Any) -> Any:
            result = write(*args, **kwargs)
            time.sleep(0.01)  # committed; the answer is still on its way back
            return result

        return written

    queue.extend = recording
    for name in ("finish", "finish_many", "replace", "ack"):
        if hasattr(queue, name):
            setattr(queue, name, slow_reply(getattr(queue, name)))
    worker = Worker(
        backend.queue,
        backend.store,
        Registry({"w": lambda a: time.sleep(0.005), "r": lambda a: 1 / 0}),
        clock_check=False,
        heartbeat_interval_ms=2,  # renewals as often as they can go
        prefetch=1,
    )
    jobs = [make_job("w" if i % 3 else "r", max_retries=5) for i in range(20)]
    for job in jobs:
        backend.queue.enqueue(job)
    with caplog.at_level(logging.WARNING, logger="conveyor.worker"):
        for _ in range(20):
            worker.run_once()
    assert answers, "the heartbeat renewed"
    assert all(answers), f"{answers.count(False)} renewals found a claim already written"
    # Of this test's jobs (a worker an earlier test left running may log of its own).
    lost = [r.getMessage() for r in caplog.records if "was lost while held" in r.getMessage()]
    assert not [m for m in lost if any(str(job.id) in m for job in jobs)], lost


def test_a_prefetched_job_whose_handler_runs_is_listed_as_running(backend: Backend) -> None:
    """The batch's first job runs under the batch's token, never started apart: while
    its handler runs, the worker lists it among its running jobs (the heartbeat beside
    the presence table, the dashboard's "running now")."""
    import threading

    began, release = threading.Event(), threading.Event()

    def slow(args: Any) -> None:
        began.set()
        release.wait(10)

    for _ in range(3):
        backend.queue.enqueue(make_job(job_type="slow"))
    worker = _worker(backend, {"slow": slow}, prefetch=3)
    runner = threading.Thread(target=worker.run_once)
    runner.start()
    try:
        assert began.wait(10), "the first handler never began"
        running = worker.running()
    finally:
        release.set()
        runner.join(10)
    assert len(running) == 1, running
