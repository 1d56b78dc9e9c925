"""Cases of `LimitReportingJobQueue.limit_usage`: what `conveyor status` and the
dashboard read to show shares, caps in use and throttled work.

Queues carry a fresh name: a server's data may outlive one case.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from ....core import Policies, Succeeded, decide, start
from ....core.limits import Cap, QueueLimits, Rate
from ....shell.ports import Claim, LimitReportingJobQueue
from ..case import case
from ..subject import LIMIT_REPORTING, Subject
from ..support import T0, make_job


def _queue() -> str:
    return f"usage-{uuid.uuid4().hex[:12]}"


@case(LIMIT_REPORTING)
def usage_counts_running_by_type_and_ready_by_partition(s: Subject) -> None:
    assert isinstance(s.queue, LimitReportingJobQueue)
    queue = _queue()
    s.queue.enqueue_many([make_job("mail", queue=queue, partition="a") for _ in range(4)])
    s.queue.enqueue_many([make_job("charge", queue=queue, partition="b") for _ in range(2)])
    limits = QueueLimits(fair=True)
    taken = s.queue.dequeue_limited(queue, T0, 2, limits).claims
    assert len(taken) == 2
    usage = s.queue.limit_usage(queue, T0)
    assert dict(usage.running) == {("mail", "a"): 1, ("charge", "b"): 1}
    assert dict(usage.ready) == {"a": 3, "b": 1}
    heads: dict[str, Any] = {}
    for c in sorted(usage.candidates, key=lambda c: (c.priority, c.seq)):
        heads.setdefault(c.partition, c)
    assert {p: c.job_type for p, c in heads.items()} == {"a": "mail", "b": "charge"}
    # The pass of each partition is stored by the claim and read back.
    assert set(usage.passes) == {"a", "b"}


@case(LIMIT_REPORTING)
def usage_of_a_queue_never_claimed_is_empty(s: Subject) -> None:
    assert isinstance(s.queue, LimitReportingJobQueue)
    usage = s.queue.limit_usage(_queue(), T0)
    assert (dict(usage.running), dict(usage.ready), list(usage.candidates)) == ({}, {}, [])
    assert (dict(usage.buckets), dict(usage.passes)) == ({}, {})


@case(LIMIT_REPORTING)
def usage_reads_the_buckets_a_claim_stored(s: Subject) -> None:
    assert isinstance(s.queue, LimitReportingJobQueue)
    queue = _queue()
    limits = QueueLimits(rates=(Rate(3, 60.0),))
    s.queue.enqueue_many([make_job(queue=queue) for _ in range(5)])
    assert len(s.queue.dequeue_limited(queue, T0, 5, limits).claims) == 3
    usage = s.queue.limit_usage(queue, T0)
    [bucket] = usage.buckets.values()
    assert bucket.tokens == 0.0
    report = usage.describe(queue, limits, T0)
    [default] = report.partitions
    assert default.ready == 2 and default.running == 3
    assert default.waits == "rate all types: 3 per 60s: next start in 20.0s"
    assert report.throttled == 2


@case(LIMIT_REPORTING)
def a_finish_frees_the_cap_slot_usage_shows(s: Subject) -> None:
    assert isinstance(s.queue, LimitReportingJobQueue)
    queue = _queue()
    limits = QueueLimits(caps=(Cap(1, job_type="charge", per_partition=True),))
    s.queue.enqueue_many([make_job("charge", queue=queue, partition="acme") for _ in range(2)])
    [claim] = s.queue.dequeue_limited(queue, T0, 5, limits).claims
    assert isinstance(claim, Claim)

    def report_now() -> str | None:
        [acme] = s.queue.limit_usage(queue, T0).describe(queue, limits, T0).partitions
        waits: str | None = acme.waits
        return waits

    assert report_now() == "cap charge per partition full (1/1)"
    record = decide(start(claim.job, T0).unwrap(), Succeeded(1), T0, Policies(), 0.5).job
    assert s.queue.finish(claim, record)
    assert report_now() is None


@case(LIMIT_REPORTING)
def usage_leaves_due_parked_jobs_where_they_are(s: Subject) -> None:
    assert isinstance(s.queue, LimitReportingJobQueue)
    queue = _queue()
    s.queue.enqueue(make_job(queue=queue, run_at=T0 + timedelta(seconds=5)))
    later = T0 + timedelta(seconds=10)
    assert dict(s.queue.limit_usage(queue, later).ready) == {}
    assert s.queue.counts(later)[queue].scheduled == 1


LIMIT_USAGE_CASES = (
    usage_counts_running_by_type_and_ready_by_partition,
    usage_of_a_queue_never_claimed_is_empty,
    usage_reads_the_buckets_a_claim_stored,
    a_finish_frees_the_cap_slot_usage_shows,
    usage_leaves_due_parked_jobs_where_they_are,
)
