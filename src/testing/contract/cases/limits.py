"""Sweep cases for claims under fair shares, caps and rates
(`LimitedJobQueue.dequeue_limited`). Each runs on every backend through
`test_adapter_surface.py`. The Redis-only cases (its partition index: floods, stale
entries, the upgrade, re-sent takes) are in `test_redis_limits.py`.

Queues carry a fresh name: the PostgreSQL sweep database outlives one case, and the
limit state is kept per queue.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

import attrs
from backends import Backend
from conveyor.core import ErrorInfo, Failed, Policies, Succeeded, decide, decide_cancel, start
from conveyor.core.decisions import Cancel, Retry, decide_reclaim
from conveyor.core.limits import Cap, QueueLimits, Rate
from conveyor.core.policies import LeasePolicy, reclaim_cutoff
from conveyor.shell.ports import Claim, LimitedClaims, LimitedJobQueue, Place
from conveyor.shell.registry import Registry
from conveyor.shell.worker.loop import Worker
from helpers import T0, make_job


def _queue() -> str:
    return f"limited-{uuid.uuid4().hex[:12]}"


def _limited(b: Backend, limits: QueueLimits) -> bool:
    """True when `b` claims under limits (every backend does), and a worker takes them."""
    assert isinstance(b.queue, LimitedJobQueue)
    assert Worker(b.queue, b.store, Registry(), limits=limits).limits == limits
    return True


def _enqueue(b: Backend, queue: str, partition: str, n: int, **options: object) -> None:
    b.queue.enqueue_many(
        [make_job(queue=queue, partition=partition, args={"i": i}, **options) for i in range(n)]
    )


def _partitions(got: LimitedClaims) -> list[str]:
    return [c.job.partition_key or "" for c in got.claims if isinstance(c, Claim)]


def limited_claims_take_partitions_in_turn(b: Backend) -> None:
    limits = QueueLimits(fair=True)
    if not _limited(b, limits):
        return
    queue = _queue()
    _enqueue(b, queue, "flood", 20)
    _enqueue(b, queue, "small", 3)
    got = b.queue.dequeue_limited(queue, T0, 6, limits)
    assert _partitions(got) == ["flood", "small", "flood", "small", "flood", "small"]
    # The turns carry over to the next claim through the stored passes.
    assert _partitions(b.queue.dequeue_limited(queue, T0, 2, limits)) == ["flood", "flood"]


def limited_claims_keep_priority_order(b: Backend) -> None:
    limits = QueueLimits(fair=True)
    if not _limited(b, limits):
        return
    queue = _queue()
    _enqueue(b, queue, "a", 3)
    _enqueue(b, queue, "b", 1, priority="critical")
    got = b.queue.dequeue_limited(queue, T0, 2, limits)
    assert _partitions(got) == ["b", "a"]


def a_cap_counts_claimed_rows_and_a_finish_frees_its_slot(b: Backend) -> None:
    limits = QueueLimits(caps=(Cap(2, per_partition=True),))
    if not _limited(b, limits):
        return
    queue = _queue()
    _enqueue(b, queue, "a", 5)
    _enqueue(b, queue, "b", 1)
    first = b.queue.dequeue_limited(queue, T0, 10, limits)
    assert sorted(_partitions(first)) == ["a", "a", "b"]
    assert b.queue.dequeue_limited(queue, T0, 10, limits).claims == []
    claim = first.claims[0]
    assert isinstance(claim, Claim)
    record = decide(start(claim.job, T0).unwrap(), Succeeded(1), T0, Policies(), 0.5).job
    assert b.queue.finish(claim, record)
    assert _partitions(b.queue.dequeue_limited(queue, T0, 10, limits)) == ["a"]


def a_reclaimed_claim_gives_its_cap_slot_back(b: Backend) -> None:
    limits = QueueLimits(max_running=1)
    if not _limited(b, limits):
        return
    queue = _queue()
    _enqueue(b, queue, "a", 2)
    [held] = b.queue.dequeue_limited(queue, T0, 5, limits).claims
    assert b.queue.dequeue_limited(queue, T0, 5, limits).claims == []
    later = T0 + timedelta(seconds=10)
    cutoff = reclaim_cutoff(later, 1000)
    [found] = [c for c in b.queue.abandoned(cutoff) if c.queue == queue]
    assert isinstance(found, Claim) and found.token == held.token
    decision = decide_reclaim(start(found.job, T0).unwrap(), later, LeasePolicy(1000), cutoff)
    assert b.queue.reclaim(found, decision.job, cutoff)
    assert len(b.queue.dequeue_limited(queue, later, 5, limits).claims) == 1


def a_rate_holds_claims_until_its_next_token(b: Backend) -> None:
    limits = QueueLimits(rates=(Rate(2, 1.0),))
    if not _limited(b, limits):
        return
    queue = _queue()
    _enqueue(b, queue, "a", 5)
    first = b.queue.dequeue_limited(queue, T0, 5, limits)
    assert len(first.claims) == 2
    held = b.queue.dequeue_limited(queue, T0, 5, limits)
    assert held.claims == [] and held.held_back
    assert held.wait_until == T0 + timedelta(milliseconds=500)
    assert len(b.queue.dequeue_limited(queue, held.wait_until, 5, limits).claims) == 1


def a_job_type_cap_lets_other_types_pass(b: Backend) -> None:
    limits = QueueLimits(caps=(Cap(1, job_type="charge"),))
    if not _limited(b, limits):
        return
    queue = _queue()
    for job_type in ("charge", "charge", "mail"):
        b.queue.enqueue(make_job(job_type, queue=queue))
    got = b.queue.dequeue_limited(queue, T0, 5, limits)
    assert [c.job.job_type for c in got.claims if isinstance(c, Claim)] == ["charge", "mail"]


def a_tenant_is_the_partition_when_no_key_is_given(b: Backend) -> None:
    limits = QueueLimits(caps=(Cap(1, per_partition=True),))
    if not _limited(b, limits):
        return
    queue = _queue()
    for tenant in ("t1", "t1", "t2"):
        b.queue.enqueue(make_job(queue=queue, tenant_id=tenant))
    got = b.queue.dequeue_limited(queue, T0, 5, limits)
    assert sorted(c.job.tenant_id or "" for c in got.claims if isinstance(c, Claim)) == [
        "t1",
        "t2",
    ]


def limited_claims_skip_jobs_claimed_or_cancelled_meanwhile(b: Backend) -> None:
    limits = QueueLimits(fair=True)
    if not _limited(b, limits):
        return
    queue = _queue()
    _enqueue(b, queue, "a", 4)
    _enqueue(b, queue, "b", 1)
    # The queue's limits are in use before the plain claim and the cancel below.
    assert len(b.queue.dequeue_limited(queue, T0, 1, limits).claims) == 1
    plain = b.queue.dequeue_many(queue, T0, 1)
    [left] = [q for q in b.queue.scan(queue, Place.READY) if q.job.partition_key == "a"][:1]
    cancel = decide_cancel(left.job, T0, in_flight=False)
    assert isinstance(cancel, Cancel) and b.queue.cancel(cancel.job)
    got = b.queue.dequeue_limited(queue, T0, 10, limits).claims
    taken = {c.job.id for c in got if isinstance(c, Claim)}
    assert len(taken) == len(got) == 2
    assert not taken & {c.job.id for c in plain if isinstance(c, Claim)}
    assert left.job.id not in taken
    assert b.queue.dequeue_limited(queue, T0, 10, limits).claims == []


def a_retried_job_goes_back_to_its_partition_for_limited_claims(b: Backend) -> None:
    limits = QueueLimits(caps=(Cap(1, per_partition=True),))
    if not _limited(b, limits):
        return
    queue = _queue()
    _enqueue(b, queue, "a", 1)
    [claim] = b.queue.dequeue_limited(queue, T0, 5, limits).claims
    assert isinstance(claim, Claim)
    error = ErrorInfo("Boom", "again", True)
    decision = decide(start(claim.job, T0).unwrap(), Failed(error), T0, Policies(), 0.5)
    assert isinstance(decision, Retry)
    assert b.queue.replace(claim, attrs.evolve(decision.job, run_at=T0))
    [again] = b.queue.dequeue_limited(queue, T0 + timedelta(seconds=1), 5, limits).claims
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
