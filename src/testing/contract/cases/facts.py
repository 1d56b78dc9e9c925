"""Cases of the facts every backend keeps of a job: its partition (the core's
`partition_of`: its partition key, else its tenant, else the default partition) and
its rank (the core's `Priority.rank`), and the claim order they give (most urgent
rank first, then first in, first out). The expectations come from the core, never
from a backend.

Queues carry a fresh name: a server's data may outlive one case.
"""

from __future__ import annotations

import uuid
from collections import Counter
from datetime import timedelta

from ....core import Job
from ....core.limits import Cap, QueueLimits, partition_of
from ....shell.ports import Claim, LimitReportingJobQueue
from ..case import case
from ..subject import LIMIT_REPORTING, Subject
from ..support import T0, make_job

LATER = T0 + timedelta(seconds=10)


def _queue() -> str:
    return f"facts-{uuid.uuid4().hex[:12]}"


def _mix(queue: str) -> tuple[list[Job], Job]:
    """Jobs of every kind of partition and every priority, in enqueue order, and a
    parked one that comes due before `LATER`."""
    ready = [
        make_job("mail", queue=queue, priority="low", partition="p1"),
        make_job("mail", queue=queue, priority="critical", tenant_id="acme"),
        make_job("charge", queue=queue, priority="normal", tenant_id="acme", partition="p2"),
        make_job("charge", queue=queue, priority="high"),
        make_job("mail", queue=queue, priority="critical", partition="p1"),
        make_job("sms", queue=queue, priority="normal"),
        make_job("charge", queue=queue, priority="high", tenant_id="acme"),
    ]
    parked = make_job(
        "sms", queue=queue, priority="high", tenant_id="zen", run_at=T0 + timedelta(seconds=5)
    )
    return ready, parked


def _claim_order(jobs: list[Job]) -> list[Job]:
    """The core's claim order of jobs given in enqueue order: rank, then FIFO."""
    return sorted(jobs, key=lambda j: j.priority.rank)  # stable: FIFO within a rank


def _ids(claims: list[object]) -> list[uuid.UUID]:
    return [c.job.id for c in claims if isinstance(c, Claim)]


@case(LIMIT_REPORTING)
def a_job_is_indexed_under_the_cores_partition_and_rank(s: Subject) -> None:
    assert isinstance(s.queue, LimitReportingJobQueue)
    queue = _queue()
    ready, parked = _mix(queue)
    s.queue.limit_usage(queue, T0)  # the queue's limits in use before its jobs arrive
    s.queue.enqueue_many(ready)
    s.queue.enqueue(parked)
    assert s.queue.promote_due(LATER) == 1
    jobs = [*ready, parked]  # the promoted job's turn is its promotion
    usage = s.queue.limit_usage(queue, LATER)
    assert dict(usage.ready) == Counter(partition_of(j) for j in jobs)
    by_id = {str(j.id): j for j in jobs}
    seen = {c.id: (c.partition, c.priority, c.job_type) for c in usage.candidates}
    assert seen == {i: (partition_of(j), j.priority.rank, j.job_type) for i, j in by_id.items()}
    in_order = sorted(usage.candidates, key=lambda c: (c.priority, c.seq))
    assert [c.id for c in in_order] == [str(j.id) for j in _claim_order(jobs)]


@case(LIMIT_REPORTING)
def a_claim_under_limits_takes_the_cores_order_and_counts_the_cores_partition(
    s: Subject,
) -> None:
    assert isinstance(s.queue, LimitReportingJobQueue)
    queue = _queue()
    ready, parked = _mix(queue)
    s.queue.enqueue_many(ready)  # ready before the queue's limits are used
    s.queue.enqueue(parked)
    jobs = [*ready, parked]
    got = s.queue.dequeue_limited(queue, LATER, len(jobs), QueueLimits()).claims
    assert _ids(list(got)) == [j.id for j in _claim_order(jobs)]
    running = s.queue.limit_usage(queue, LATER).running
    assert dict(running) == Counter((j.job_type, partition_of(j)) for j in jobs)


@case(LIMIT_REPORTING)
def a_cap_per_partition_holds_each_of_the_cores_partitions(s: Subject) -> None:
    assert isinstance(s.queue, LimitReportingJobQueue)
    queue = _queue()
    ready, parked = _mix(queue)
    s.queue.enqueue_many(ready)
    s.queue.enqueue(parked)
    jobs = [*ready, parked]
    one_each = QueueLimits(caps=(Cap(1, per_partition=True),))
    got = s.queue.dequeue_limited(queue, LATER, len(jobs), one_each).claims
    # The first job of each partition in claim order, and no other.
    firsts: dict[str, Job] = {}
    for job in _claim_order(jobs):
        firsts.setdefault(partition_of(job), job)
    assert _ids(list(got)) == [j.id for j in _claim_order(list(firsts.values()))]


@case(LIMIT_REPORTING)
def a_plain_claim_takes_the_cores_order_and_is_counted_under_its_partition(
    s: Subject,
) -> None:
    assert isinstance(s.queue, LimitReportingJobQueue)
    queue = _queue()
    ready, parked = _mix(queue)
    s.queue.enqueue_many(ready)
    s.queue.enqueue(parked)
    jobs = [*ready, parked]
    got = s.queue.dequeue_many(queue, LATER, len(jobs))
    assert _ids(list(got)) == [j.id for j in _claim_order(jobs)]
    # Claimed before the queue's limits were ever used: still counted under its partition.
    running = s.queue.limit_usage(queue, LATER).running
    assert dict(running) == Counter((j.job_type, partition_of(j)) for j in jobs)


FACT_CASES = (
    a_job_is_indexed_under_the_cores_partition_and_rank,
    a_claim_under_limits_takes_the_cores_order_and_counts_the_cores_partition,
    a_cap_per_partition_holds_each_of_the_cores_partitions,
    a_plain_claim_takes_the_cores_order_and_is_counted_under_its_partition,
)
