"""Cases of claims under fair shares, caps and rates
(`LimitedJobQueue.dequeue_limited`).

Queues carry a fresh name: a server's data may outlive one case, and the limit
state is kept per queue.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import attrs

from ....core import ErrorInfo, Failed, Policies, Succeeded, decide, decide_cancel, start
from ....core.decisions import Cancel, Retry, decide_reclaim
from ....core.limits import Cap, QueueLimits, Rate
from ....core.policies import LeasePolicy, reclaim_cutoff
from ....shell.ports import Claim, LimitedClaims, LimitedJobQueue, Place
from ....shell.registry import Registry
from ....shell.worker.loop import Worker
from ..case import case
from ..subject import CANCELLING, LIMITED, Subject
from ..support import T0, make_job


def _queue() -> str:
    return f"limited-{uuid.uuid4().hex[:12]}"


def _limited(s: Subject, limits: QueueLimits) -> bool:
    """True when `b` claims under limits (every backend does), and a worker takes them."""
    assert isinstance(s.queue, LimitedJobQueue)
    assert Worker(s.queue, s.store, Registry(), limits=limits).limits == limits
    return True


def _enqueue(s: Subject, queue: str, partition: str, n: int, **options: Any) -> None:
    s.queue.enqueue_many(
        [make_job(queue=queue, partition=partition, args={"i": i}, **options) for i in range(n)]
    )


def _partitions(got: LimitedClaims) -> list[str]:
    return [c.job.partition_key or "" for c in got.claims if isinstance(c, Claim)]


@case(LIMITED)
def limited_claims_take_partitions_in_turn(s: Subject) -> None:
    limits = QueueLimits(fair=True)
    if not _limited(s, limits):
        return
    queue = _queue()
    _enqueue(s, queue, "flood", 20)
    _enqueue(s, queue, "small", 3)
    got = s.queue.dequeue_limited(queue, T0, 6, limits)
    assert _partitions(got) == ["flood", "small", "flood", "small", "flood", "small"]
    # The turns carry over to the next claim through the stored passes.
    assert _partitions(s.queue.dequeue_limited(queue, T0, 2, limits)) == ["flood", "flood"]


@case(LIMITED)
def limited_claims_keep_priority_order(s: Subject) -> None:
    limits = QueueLimits(fair=True)
    if not _limited(s, limits):
        return
    queue = _queue()
    _enqueue(s, queue, "a", 3)
    _enqueue(s, queue, "b", 1, priority="critical")
    got = s.queue.dequeue_limited(queue, T0, 2, limits)
    assert _partitions(got) == ["b", "a"]


@case(LIMITED)
def a_cap_counts_claimed_rows_and_a_finish_frees_its_slot(s: Subject) -> None:
    limits = QueueLimits(caps=(Cap(2, per_partition=True),))
    if not _limited(s, limits):
        return
    queue = _queue()
    _enqueue(s, queue, "a", 5)
    _enqueue(s, queue, "b", 1)
    first = s.queue.dequeue_limited(queue, T0, 10, limits)
    assert sorted(_partitions(first)) == ["a", "a", "b"]
    assert s.queue.dequeue_limited(queue, T0, 10, limits).claims == []
    claim = first.claims[0]
    assert isinstance(claim, Claim)
    record = decide(start(claim.job, T0).unwrap(), Succeeded(1), T0, Policies(), 0.5).job
    assert s.queue.finish(claim, record)
    assert _partitions(s.queue.dequeue_limited(queue, T0, 10, limits)) == ["a"]


@case(LIMITED)
def a_reclaimed_claim_gives_its_cap_slot_back(s: Subject) -> None:
    limits = QueueLimits(max_running=1)
    if not _limited(s, limits):
        return
    queue = _queue()
    _enqueue(s, queue, "a", 2)
    [held] = s.queue.dequeue_limited(queue, T0, 5, limits).claims
    assert s.queue.dequeue_limited(queue, T0, 5, limits).claims == []
    later = T0 + timedelta(seconds=10)
    cutoff = reclaim_cutoff(later, 1000)
    [found] = [c for c in s.queue.abandoned(cutoff) if c.queue == queue]
    assert isinstance(found, Claim) and found.token == held.token
    decision = decide_reclaim(start(found.job, T0).unwrap(), later, LeasePolicy(1000), cutoff)
    assert s.queue.reclaim(found, decision.job, cutoff)
    assert len(s.queue.dequeue_limited(queue, later, 5, limits).claims) == 1


@case(LIMITED)
def a_rate_holds_claims_until_its_next_token(s: Subject) -> None:
    limits = QueueLimits(rates=(Rate(2, 1.0),))
    if not _limited(s, limits):
        return
    queue = _queue()
    _enqueue(s, queue, "a", 5)
    first = s.queue.dequeue_limited(queue, T0, 5, limits)
    assert len(first.claims) == 2
    held = s.queue.dequeue_limited(queue, T0, 5, limits)
    assert held.claims == [] and held.held_back
    assert held.wait_until == T0 + timedelta(milliseconds=500)
    assert len(s.queue.dequeue_limited(queue, held.wait_until, 5, limits).claims) == 1


@case(LIMITED)
def a_job_type_cap_lets_other_types_pass(s: Subject) -> None:
    limits = QueueLimits(caps=(Cap(1, job_type="charge"),))
    if not _limited(s, limits):
        return
    queue = _queue()
    for job_type in ("charge", "charge", "mail"):
        s.queue.enqueue(make_job(job_type, queue=queue))
    got = s.queue.dequeue_limited(queue, T0, 5, limits)
    assert [c.job.job_type for c in got.claims if isinstance(c, Claim)] == ["charge", "mail"]


@case(LIMITED)
def a_tenant_is_the_partition_when_no_key_is_given(s: Subject) -> None:
    limits = QueueLimits(caps=(Cap(1, per_partition=True),))
    if not _limited(s, limits):
        return
    queue = _queue()
    for tenant in ("t1", "t1", "t2"):
        s.queue.enqueue(make_job(queue=queue, tenant_id=tenant))
    got = s.queue.dequeue_limited(queue, T0, 5, limits)
    assert sorted(c.job.tenant_id or "" for c in got.claims if isinstance(c, Claim)) == [
        "t1",
        "t2",
    ]


@case(LIMITED, CANCELLING)
def limited_claims_skip_jobs_claimed_or_cancelled_meanwhile(s: Subject) -> None:
    limits = QueueLimits(fair=True)
    if not _limited(s, limits):
        return
    queue = _queue()
    _enqueue(s, queue, "a", 4)
    _enqueue(s, queue, "b", 1)
    # The queue's limits are in use before the plain claim and the cancel below.
    assert len(s.queue.dequeue_limited(queue, T0, 1, limits).claims) == 1
    plain = s.queue.dequeue_many(queue, T0, 1)
    [left] = [q for q in s.queue.scan(queue, Place.READY) if q.job.partition_key == "a"][:1]
    cancel = decide_cancel(left.job, T0, in_flight=False)
    assert isinstance(cancel, Cancel) and s.queue.cancel(cancel.job)
    got = s.queue.dequeue_limited(queue, T0, 10, limits).claims
    taken = {c.job.id for c in got if isinstance(c, Claim)}
    assert len(taken) == len(got) == 2
    assert not taken & {c.job.id for c in plain if isinstance(c, Claim)}
    assert left.job.id not in taken
    assert s.queue.dequeue_limited(queue, T0, 10, limits).claims == []


@case(LIMITED)
def a_retried_job_goes_back_to_its_partition_for_limited_claims(s: Subject) -> None:
    limits = QueueLimits(caps=(Cap(1, per_partition=True),))
    if not _limited(s, limits):
        return
    queue = _queue()
    _enqueue(s, queue, "a", 1)
    [claim] = s.queue.dequeue_limited(queue, T0, 5, limits).claims
    assert isinstance(claim, Claim)
    error = ErrorInfo("Boom", "again", True)
    decision = decide(start(claim.job, T0).unwrap(), Failed(error), T0, Policies(), 0.5)
    assert isinstance(decision, Retry)
    assert s.queue.replace(claim, attrs.evolve(decision.job, run_at=T0))
    [again] = s.queue.dequeue_limited(queue, T0 + timedelta(seconds=1), 5, limits).claims
    assert isinstance(again, Claim) and again.job.id == claim.job.id
    assert again.job.partition_key == "a"


LIMIT_CASES = (
    limited_claims_take_partitions_in_turn,
    limited_claims_keep_priority_order,
    a_cap_counts_claimed_rows_and_a_finish_frees_its_slot,
    a_reclaimed_claim_gives_its_cap_slot_back,
    a_rate_holds_claims_until_its_next_token,
    a_job_type_cap_lets_other_types_pass,
    a_tenant_is_the_partition_when_no_key_is_given,
    limited_claims_skip_jobs_claimed_or_cancelled_meanwhile,
    a_retried_job_goes_back_to_its_partition_for_limited_claims,
)
