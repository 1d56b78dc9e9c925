"""`JobQueue.counts` split by priority, on every backend, from the same read as the totals.

Redis keeps its scheduled and in-flight sets per queue, so it splits them by reading
each member's hash, only up to `COUNT_SPLIT_LIMIT` members per set; beyond that it
reports None for those figures per priority rather than zeros (docs/observability.md).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from backends import BACKENDS, Backend, make_backend
from conveyor.core import Priority
from conveyor.shell.ports import Claim, PriorityCounts, QueueCounts
from helpers import T0, make_job


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    made = make_backend(request.param)
    yield made
    made.cleanup()


def _mix(b: Backend) -> QueueCounts:
    """default: one critical in flight, one critical and one low scheduled, two high and
    one low ready; other: one normal ready."""
    b.queue.enqueue(make_job(priority=Priority.CRITICAL))
    claim = b.queue.dequeue("default", T0)
    assert isinstance(claim, Claim) and claim.job.priority is Priority.CRITICAL
    for priority in (Priority.HIGH, Priority.HIGH, Priority.LOW):
        b.queue.enqueue(make_job(priority=priority))
    for priority in (Priority.CRITICAL, Priority.LOW):
        b.queue.enqueue(make_job(priority=priority, delay=timedelta(hours=1)))
    b.queue.enqueue(make_job(priority=Priority.NORMAL, queue="other"))
    return b.queue.counts(T0)["default"]


def test_ready_jobs_are_counted_per_priority(backend: Backend) -> None:
    counts = _mix(backend)
    ready = {p: c.ready for p, c in counts.by_priority.items() if c.ready}
    assert ready == {Priority.HIGH: 2, Priority.LOW: 1}


def test_scheduled_and_in_flight_jobs_are_counted_per_priority(backend: Backend) -> None:
    counts = _mix(backend)
    assert counts.by_priority == {
        Priority.CRITICAL: PriorityCounts(ready=0, scheduled=1, in_flight=1),
        Priority.HIGH: PriorityCounts(ready=2, scheduled=0, in_flight=0),
        Priority.LOW: PriorityCounts(ready=1, scheduled=1, in_flight=0),
    }


def test_redis_leaves_out_the_split_of_a_set_above_its_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from conveyor.shell.adapters.redis import reads as redis_queue

    b = make_backend("redis")
    try:
        monkeypatch.setattr(redis_queue, "COUNT_SPLIT_LIMIT", 1)
        counts = _mix(b)
        assert counts.by_priority == {  # two scheduled: above the limit; one in flight
            Priority.CRITICAL: PriorityCounts(ready=0, scheduled=None, in_flight=1),
            Priority.HIGH: PriorityCounts(ready=2, scheduled=None, in_flight=0),
            Priority.LOW: PriorityCounts(ready=1, scheduled=None, in_flight=0),
            Priority.NORMAL: PriorityCounts(ready=0, scheduled=None, in_flight=0),
        }
        assert counts.scheduled == 2
    finally:
        b.cleanup()


def test_the_split_adds_up_to_the_queue_totals(backend: Backend) -> None:
    counts = _mix(backend)
    assert (counts.ready, counts.scheduled, counts.in_flight) == (3, 2, 1)
    assert sum(c.ready for c in counts.by_priority.values()) == counts.ready
    assert sum(c.scheduled or 0 for c in counts.by_priority.values()) == counts.scheduled
    assert sum(c.in_flight or 0 for c in counts.by_priority.values()) == counts.in_flight


def test_each_queue_is_split_on_its_own(backend: Backend) -> None:
    _mix(backend)
    other = backend.queue.counts(T0)["other"]
    assert list(other.by_priority) == [Priority.NORMAL]
    assert other.by_priority[Priority.NORMAL].ready == 1


def test_priorities_come_most_urgent_first(backend: Backend) -> None:
    counts = _mix(backend)
    order = list(counts.by_priority)
    assert order == sorted(order, key=lambda p: p.rank)


def test_a_queue_emptied_again_has_no_priorities(backend: Backend) -> None:
    backend.queue.enqueue(make_job(priority=Priority.HIGH))
    claim = backend.queue.dequeue("default", T0)
    assert isinstance(claim, Claim)
    assert backend.queue.ack(claim)
    assert backend.queue.counts(T0).get("default", QueueCounts()) == QueueCounts()
