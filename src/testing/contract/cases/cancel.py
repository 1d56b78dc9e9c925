"""Cases of cancellation: a queued job is cancelled at once, a running one by a
request its worker honours, and a cancelled job never runs again nor is recorded
completed.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from ....core import (
    AttemptOutcome,
    CancelCounts,
    CancelResult,
    ErrorInfo,
    Failed,
    JobStatus,
    Policies,
    Succeeded,
    decide,
    start,
)
from ....core.policies import LeasePolicy
from ....shell.cancellation import cancel_job, cancel_many, cancel_requested
from ....shell.context import JobContext
from ....shell.executor import Executor
from ....shell.ports import Claim
from ....shell.registry import Registry
from ....shell.worker.loop import Worker
from ...clock import ManualClock
from ..case import case
from ..subject import BATCHING, CANCELLING, Subject
from ..support import T0, make_job, prune_order

POLICIES = Policies()


def _executor(s: Subject) -> Executor:
    return s.executor(s.queue, s.store, clock=ManualClock(T0))


def _cancel(s: Subject, job_id: Any) -> CancelResult:
    return cancel_job(s.queue, s.store, _executor(s), job_id, T0)


def _worker(s: Subject, handlers: dict[str, Any], **options: Any) -> Worker:
    return Worker(
        s.queue,
        s.store,
        Registry(handlers),
        clock=ManualClock(T0),
        clock_check=False,
        jitter=lambda: 0.5,
        **options,
    )


@case(CANCELLING)
def a_pending_job_cancelled_is_recorded_cancelled_and_never_claimed(s: Subject) -> None:
    job = make_job()
    s.queue.enqueue(job)
    assert _cancel(s, job.id) is CancelResult.CANCELLED
    record = s.store.get(job.id)
    assert record is not None and record.status is JobStatus.CANCELLED
    assert record.finished_at == T0 and record.attempts == ()
    assert s.queue.find(job.id) is None
    assert s.queue.dequeue("default", T0 + timedelta(days=1)) is None


@case(CANCELLING)
def a_scheduled_job_cancelled_never_comes_due(s: Subject) -> None:
    job = make_job(delay=timedelta(minutes=5))
    s.queue.enqueue(job)
    assert _cancel(s, job.id) is CancelResult.CANCELLED
    assert s.store.get(job.id).status is JobStatus.CANCELLED
    assert s.queue.next_due("default") is None
    assert s.queue.dequeue("default", T0 + timedelta(days=1)) is None


@case(CANCELLING)
def a_retrying_job_cancelled_is_not_retried(s: Subject) -> None:
    s.queue.enqueue(make_job())
    claim = s.queue.dequeue("default", T0)
    assert isinstance(claim, Claim)
    failed = Failed(ErrorInfo("Boom", "again", True))
    retry = decide(start(claim.job, T0).unwrap(), failed, T0, POLICIES, 0.5)
    assert retry.job.status is JobStatus.RETRYING and s.queue.replace(claim, retry.job)
    assert _cancel(s, claim.job.id) is CancelResult.CANCELLED
    record = s.store.get(claim.job.id)
    assert record.status is JobStatus.CANCELLED and record.retry_count == 1
    assert s.queue.dequeue("default", T0 + timedelta(days=1)) is None


@case(CANCELLING)
def a_running_job_that_succeeds_after_a_cancel_is_recorded_cancelled(s: Subject) -> None:
    job = make_job()
    s.queue.enqueue(job)
    seen: list[bool] = []

    def handler(args: dict[str, Any], ctx: JobContext) -> str:
        seen.append(ctx.cancel_requested())
        assert _cancel(s, ctx.job_id) is CancelResult.REQUESTED
        seen.append(ctx.cancel_requested())
        return "done anyway"

    worker = _worker(s, {"work": handler})
    assert worker.run_once() == 1
    assert seen == [False, True], "the handler sees the request through its context"
    record = s.store.get(job.id)
    assert record.status is JobStatus.CANCELLED, "never recorded completed"
    assert [a.outcome for a in record.attempts] == [AttemptOutcome.CANCELLED]
    assert record.result == "done anyway"
    assert s.queue.find(job.id) is None
    assert not cancel_requested(s.queue, job.id), "the request goes with the record"
    assert worker.stats.cancelled == 1 and worker.stats.completed == 0
    assert _cancel(s, job.id) is CancelResult.FINISHED


@case(CANCELLING)
def a_running_job_that_fails_after_a_cancel_is_never_retried(s: Subject) -> None:
    job = make_job()
    s.queue.enqueue(job)

    def handler(args: dict[str, Any], ctx: JobContext) -> None:
        assert _cancel(s, ctx.job_id) is CancelResult.REQUESTED
        raise RuntimeError("interrupted")

    worker = _worker(s, {"work": handler})
    worker.run_once()
    record = s.store.get(job.id)
    assert record.status is JobStatus.CANCELLED
    assert record.last_error is not None and record.last_error.type == "RuntimeError"
    assert s.queue.dequeue("default", T0 + timedelta(days=1)) is None


@case(CANCELLING, BATCHING)
def a_prefetched_batch_records_only_the_cancelled_job_cancelled(s: Subject) -> None:
    first, second = make_job(), make_job()
    s.queue.enqueue_many([first, second])

    def handler(args: dict[str, Any], ctx: JobContext) -> int:
        if ctx.job_id == first.id:
            assert _cancel(s, first.id) is CancelResult.REQUESTED
        return 1

    worker = _worker(s, {"work": handler}, prefetch=2)
    assert worker.run_once() == 2
    assert s.store.get(first.id).status is JobStatus.CANCELLED
    assert s.store.get(second.id).status is JobStatus.COMPLETED


@case(CANCELLING, BATCHING)
def outcome_writes_are_refused_while_a_cancel_request_stands(s: Subject) -> None:
    s.queue.enqueue(make_job())
    claim = s.queue.dequeue("default", T0)
    assert isinstance(claim, Claim)
    running = start(claim.job, T0).unwrap()
    done = decide(running, Succeeded(1), T0, POLICIES, 0.5).job
    retry = decide(running, Failed(ErrorInfo("E", "m")), T0, POLICIES, 0.5).job
    assert s.queue.request_cancel(claim.job.id, T0)
    assert s.queue.finish(claim, done) is False
    assert list(s.queue.finish_many([(claim, done)])) == [False]
    assert s.queue.replace(claim, retry) is False
    cutoff = T0 + timedelta(hours=1)
    assert s.queue.reclaim(claim, running, cutoff) is False
    assert s.queue.extend(claim, T0), "the lease is still kept"
    assert s.store.get(claim.job.id) is None, "nothing was recorded"


@case(CANCELLING)
def an_abandoned_claim_with_a_cancel_request_is_cancelled_not_reclaimed(s: Subject) -> None:
    job = make_job()
    s.queue.enqueue(job)
    claim = s.queue.dequeue("default", T0)
    assert isinstance(claim, Claim)
    assert _cancel(s, job.id) is CancelResult.REQUESTED
    later = T0 + timedelta(minutes=10)
    worker = _worker(s, {}, policies=Policies(lease=LeasePolicy(lease_ms=1000)))
    worker.clock = worker.lease_keeper.clock = ManualClock(later)
    worker.lease_keeper.reclaim_abandoned(later)
    record = s.store.get(job.id)
    assert record is not None and record.status is JobStatus.CANCELLED
    assert s.queue.dequeue("default", later) is None


@case(CANCELLING)
def cancel_of_an_unknown_id_is_not_found_and_of_a_finished_job_changes_nothing(
    s: Subject,
) -> None:
    assert _cancel(s, make_job().id) is CancelResult.NOT_FOUND
    s.queue.enqueue(make_job())
    claim = s.queue.dequeue("default", T0)
    assert isinstance(claim, Claim)
    done = decide(start(claim.job, T0).unwrap(), Succeeded(1), T0, POLICIES, 0.5).job
    assert s.queue.finish(claim, done)
    assert _cancel(s, claim.job.id) is CancelResult.FINISHED
    assert s.store.get(claim.job.id) == done
    assert s.queue.request_cancel(claim.job.id, T0) is False


@case(CANCELLING)
def bulk_cancel_takes_only_the_queue_and_type_named(s: Subject) -> None:
    mails = [make_job("mail") for _ in range(3)]
    other_type = make_job("report")
    other_queue = make_job("mail", queue="urgent")
    s.queue.enqueue_many([*mails, other_type, other_queue])
    running = s.queue.dequeue("default", T0)
    assert isinstance(running, Claim) and running.job.id == mails[0].id

    def counts(**options: Any) -> CancelCounts:
        return cancel_many(
            s.queue, s.store, _executor(s), T0, queue_name="default", job_type="mail", **options
        )

    assert counts(dry_run=True) == CancelCounts(cancelled=2, requested=1)
    assert s.store.get(mails[1].id) is None, "a dry run writes nothing"
    assert counts() == CancelCounts(cancelled=2, requested=1)
    assert [s.store.get(j.id).status for j in mails[1:]] == [JobStatus.CANCELLED] * 2
    assert cancel_requested(s.queue, mails[0].id)
    assert s.queue.find(other_type.id) is not None and s.queue.find(other_queue.id) is not None
    assert counts() == CancelCounts(cancelled=0, requested=1), "the request stands"


@case(CANCELLING)
def cancelled_records_are_pruned_by_the_completed_rules(s: Subject) -> None:
    old, recent = make_job(), make_job()
    s.queue.enqueue_many([old, recent])
    assert _cancel(s, old.id) is CancelResult.CANCELLED
    later = T0 + timedelta(days=10)
    assert cancel_job(s.queue, s.store, _executor(s), recent.id, later) is CancelResult.CANCELLED
    order = prune_order(completed_before=T0 + timedelta(days=1))
    assert s.store.count_prunable(order) == 1
    assert s.store.prune(order) == 1
    assert s.store.get(old.id) is None
    assert s.store.get(recent.id).status is JobStatus.CANCELLED


CANCEL_CASES = (
    a_pending_job_cancelled_is_recorded_cancelled_and_never_claimed,
    a_scheduled_job_cancelled_never_comes_due,
    a_retrying_job_cancelled_is_not_retried,
    a_running_job_that_succeeds_after_a_cancel_is_recorded_cancelled,
    a_running_job_that_fails_after_a_cancel_is_never_retried,
    a_prefetched_batch_records_only_the_cancelled_job_cancelled,
    outcome_writes_are_refused_while_a_cancel_request_stands,
    an_abandoned_claim_with_a_cancel_request_is_cancelled_not_reclaimed,
    cancel_of_an_unknown_id_is_not_found_and_of_a_finished_job_changes_nothing,
    bulk_cancel_takes_only_the_queue_and_type_named,
    cancelled_records_are_pruned_by_the_completed_rules,
)
