"""`JobQueue.counts` split by priority, on every backend, from the same read as the totals.

Redis splits ready jobs only: its scheduled and in-flight sets hold ids, and a job's
priority is in its hash, so splitting them would read every job. It reports None for
those figures per priority (docs/observability.md).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from backends import BACKENDS, Backend, make_backend
from conveyor.core import Priority
from conveyor.shell.ports import Claim, PriorityCounts, QueueCounts
from helpers import T0, make_job

SPLITS_EVERY_STATE = ("memory", "sqlite", "postgresql")


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
    if backend.name in SPLITS_EVERY_STATE:
        assert counts.by_priority == {
            Priority.CRITICAL: PriorityCounts(ready=0, scheduled=1, in_flight=1),
            Priority.HIGH: PriorityCounts(ready=2, scheduled=0, in_flight=0),
            Priority.LOW: PriorityCounts(ready=1, scheduled=1, in_flight=0),
        }
    else:  # Redis: per queue only, and it says so rather than reporting zeros
        assert counts.by_priority == {
            Priority.HIGH: PriorityCounts(ready=2, scheduled=None, in_flight=None),
            Priority.LOW: PriorityCounts(ready=1, scheduled=None, in_flight=None),
        }


def test_the_split_adds_up_to_the_queue_totals(backend: Backend) -> None:
    counts = _mix(backend)
    assert (counts.ready, counts.scheduled, counts.in_flight) == (3, 2, 1)
    assert sum(c.ready for c in counts.by_priority.values()) == counts.ready
    if backend.name in SPLITS_EVERY_STATE:
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
