"""Adaptive prefetch, the default: a worker batches short jobs and takes long ones one
at a time, and a batch held up by a slow job hands the rest back. On every backend."""

from __future__ import annotations

import time
from typing import Any

from backends import Backend
from conveyor.core import JobStatus
from conveyor.core.prefetch import PrefetchPolicy
from conveyor.shell.config import parse_config
from conveyor.shell.ports import BatchingJobQueue
from conveyor.shell.registry import Registry
from conveyor.shell.worker.loop import Worker
from conveyor.testing.clock import ManualClock
from helpers import T0, make_job


def _worker(b: Backend, handlers: dict[str, Any], **options: Any) -> Worker:
    return Worker(
        b.queue, b.store, Registry(handlers), clock=ManualClock(T0), clock_check=False, **options
    )


def _claim_sizes(worker: Worker) -> list[int]:
    """Record how many jobs each claim of `worker` asked for."""
    sizes: list[int] = []
    queue: Any = worker.queue
    one, many = queue.dequeue, getattr(queue, "dequeue_many", None)

    def dequeue(name: str, now: Any) -> Any:
        sizes.append(1)
        return one(name, now)

    def dequeue_many(name: str, now: Any, limit: int) -> Any:
        sizes.append(limit)
        return many(name, now, limit)

    queue.dequeue = dequeue
    if many is not None:
        queue.dequeue_many = dequeue_many
    return sizes


def test_auto_claims_one_job_first_then_batches_short_ones(backend: Backend) -> None:
    worker = _worker(backend, {"w": lambda a: None}, prefetch="auto")
    sizes = _claim_sizes(worker)
    for _ in range(300):
        backend.queue.enqueue(make_job("w"))
    assert worker.drain() == 300
    assert sizes[0] == 1, "nothing timed yet: one job"
    if isinstance(backend.queue, BatchingJobQueue):
        # Sized to run in ~100 ms: tens of jobs a claim for no-ops (100 at most).
        assert 20 <= max(sizes) <= 100, sizes
        assert len(sizes) < 40, f"{len(sizes)} claims for 300 short jobs"
    else:
        assert set(sizes) == {1}, "a backend without batched claims takes one at a time"


def test_auto_takes_jobs_longer_than_the_budget_one_at_a_time(backend: Backend) -> None:
    worker = _worker(backend, {"slow": lambda a: time.sleep(0.12)}, prefetch="auto")
    sizes = _claim_sizes(worker)
    for _ in range(4):
        backend.queue.enqueue(make_job("slow"))
    assert worker.drain() == 4
    assert set(sizes[:4]) == {1}, sizes


def test_a_batch_held_up_by_a_slow_job_hands_the_rest_back(backend: Backend) -> None:
    if not isinstance(backend.queue, BatchingJobQueue):
        return  # one job per claim: there is never a rest to hand back
    policy = PrefetchPolicy(first_batch=5, hand_back_after_ms=50)
    ran: list[str] = []

    def work(args: Any) -> None:
        ran.append(args["name"])
        if args["name"] == "slow":
            time.sleep(0.1)

    worker = _worker(backend, {"w": work}, prefetch=policy)
    jobs = [make_job("w", args={"name": "slow"})]
    jobs += [make_job("w", args={"name": f"fast{i}"}) for i in range(4)]
    for job in jobs:
        backend.queue.enqueue(job)
    assert worker.run_once() == 5, "the first claim took all five"
    assert ran == ["slow"], "the four behind the slow job were not started"
    assert backend.store.get(jobs[0].id).status is JobStatus.COMPLETED
    counts = backend.queue.counts(T0)["default"]
    assert (counts.ready, counts.in_flight) == (4, 0), "handed back to ready, not held"
    for job in jobs[1:]:
        found = backend.queue.find(job.id)
        assert found is not None and found.job.attempt == 0, "no attempt charged"
    assert worker.drain() == 4
    assert sorted(ran[1:]) == [f"fast{i}" for i in range(4)]


def test_the_config_default_is_auto_and_a_number_fixes_the_batch() -> None:
    assert parse_config({}).workers.prefetch == "auto"
    assert parse_config({"workers": {"prefetch": 25}}).workers.prefetch == 25


def test_a_bad_prefetch_is_one_line_naming_the_field() -> None:
    import pytest
    from conveyor.core import ValidationError

    for bad in (0, "fast", 2.5, True):
        with pytest.raises(ValidationError, match=r"workers\.prefetch: must be \"auto\""):
            parse_config({"workers": {"prefetch": bad}})
