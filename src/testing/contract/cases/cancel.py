"""Sweep cases for cancellation: a queued job is cancelled at once, a running one by a
request its worker honours, and a cancelled job never runs again nor is recorded
completed. Each runs on every backend through `test_adapter_surface.py`.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from backends import Backend
from conveyor.core import (
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
from conveyor.core.policies import LeasePolicy
from conveyor.core.retention import PruneOrder
from conveyor.shell.cancellation import cancel_job, cancel_many, cancel_requested
from conveyor.shell.context import JobContext
from conveyor.shell.executor import Executor
from conveyor.shell.ports import Claim
from conveyor.shell.registry import Registry
from conveyor.shell.worker.loop import Worker
from conveyor.testing.clock import ManualClock
from helpers import T0, make_job

POLICIES = Policies()


def _executor(b: Backend) -> Executor:
    return Executor(b.queue, b.store, clock=ManualClock(T0))


def _cancel(b: Backend, job_id: Any) -> CancelResult:
    return cancel_job(b.queue, b.store, _executor(b), job_id, T0)


def _worker(b: Backend, handlers: dict[str, Any], **options: Any) -> Worker:
    return Worker(
        b.queue,
        b.store,
        Registry(handlers),
        clock=ManualClock(T0),
        clock_check=False,
        jitter=lambda: 0.5,
        **options,
    )


def a_pending_job_cancelled_is_recorded_cancelled_and_never_claimed(b: Backend) -> None:
    job = make_job()
    b.queue.enqueue(job)
    assert _cancel(b, job.id) is CancelResult.CANCELLED
    record = b.store.get(job.id)
    assert record is not None and record.status is JobStatus.CANCELLED
    assert record.finished_at == T0 and record.attempts == ()
    assert b.queue.find(job.id) is None
    assert b.queue.dequeue("default", T0 + timedelta(days=1)) is None


def a_scheduled_job_cancelled_never_comes_due(b: Backend) -> None:
    job = make_job(delay=timedelta(minutes=5))
    b.queue.enqueue(job)
    assert _cancel(b, job.id) is CancelResult.CANCELLED
    assert b.store.get(job.id).status is JobStatus.CANCELLED
    assert b.queue.next_due("default") is None
    assert b.queue.dequeue("default", T0 + timedelta(days=1)) is None


def a_retrying_job_cancelled_is_not_retried(b: Backend) -> None:
    b.queue.enqueue(make_job())
    claim = b.queue.dequeue("default", T0)
    assert isinstance(claim, Claim)
    failed = Failed(ErrorInfo("Boom", "again", True))
    retry = decide(start(claim.job, T0).unwrap(), failed, T0, POLICIES, 0.5)
    assert retry.job.status is JobStatus.RETRYING and b.queue.replace(claim, retry.job)
    assert _cancel(b, claim.job.id) is CancelResult.CANCELLED
    record = b.store.get(claim.job.id)
    assert record.status is JobStatus.CANCELLED and record.retry_count == 1
    assert b.queue.dequeue("default", T0 + timedelta(days=1)) is None


def a_running_job_that_succeeds_after_a_cancel_is_recorded_cancelled(b: Backend) -> None:
    job = make_job()
    b.queue.enqueue(job)
    seen: list[bool] = []

    def handler(args: dict[str, Any], ctx: JobContext) -> str:
        seen.append(ctx.cancel_requested())
        assert _cancel(b, ctx.job_id) is CancelResult.REQUESTED
        seen.append(ctx.cancel_requested())
        return "done anyway"

    worker = _worker(b, {"work": handler})
    assert worker.run_once() == 1
    assert seen == [False, True], "the handler sees the request through its context"
    record = b.store.get(job.id)
    assert record.status is JobStatus.CANCELLED, "never recorded completed"
    assert [a.outcome for a in record.attempts] == [AttemptOutcome.CANCELLED]
    assert record.result == "done anyway"
    assert b.queue.find(job.id) is None
    assert not cancel_requested(b.queue, job.id), "the request goes with the record"
    assert worker.stats.cancelled == 1 and worker.stats.completed == 0
    assert _cancel(b, job.id) is CancelResult.FINISHED


def a_running_job_that_fails_after_a_cancel_is_never_retried(b: Backend) -> None:
    job = make_job()
    b.queue.enqueue(job)

    def handler(args: dict[str, Any], ctx: JobContext) -> None:
        assert _cancel(b, ctx.job_id) is CancelResult.REQUESTED
        raise RuntimeError("interrupted")

    worker = _worker(b, {"work": handler})
    worker.run_once()
    record = b.store.get(job.id)
    assert record.status is JobStatus.CANCELLED
    assert record.last_error is not None and record.last_error.type == "RuntimeError"
    assert b.queue.dequeue("default", T0 + timedelta(days=1)) is None


def a_prefetched_batch_records_only_the_cancelled_job_cancelled(b: Backend) -> None:
    first, second = make_job(), make_job()
    b.queue.enqueue_many([first, second])

    def handler(args: dict[str, Any], ctx: JobContext) -> int:
        if ctx.job_id == first.id:
            assert _cancel(b, first.id) is CancelResult.REQUESTED
        return 1

    worker = _worker(b, {"work": handler}, prefetch=2)
    assert worker.run_once() == 2
    assert b.store.get(first.id).status is JobStatus.CANCELLED
    assert b.store.get(second.id).status is JobStatus.COMPLETED


def outcome_writes_are_refused_while_a_cancel_request_stands(b: Backend) -> None:
    b.queue.enqueue(make_job())
    claim = b.queue.dequeue("default", T0)
    assert isinstance(claim, Claim)
    running = start(claim.job, T0).unwrap()
    done = decide(running, Succeeded(1), T0, POLICIES, 0.5).job
    retry = decide(running, Failed(ErrorInfo("E", "m")), T0, POLICIES, 0.5).job
    assert b.queue.request_cancel(claim.job.id, T0)
    assert b.queue.finish(claim, done) is False
    assert list(b.queue.finish_many([(claim, done)])) == [False]
    assert b.queue.replace(claim, retry) is False
    cutoff = T0 + timedelta(hours=1)
    assert b.queue.reclaim(claim, running, cutoff) is False
    assert b.queue.extend(claim, T0), "the lease is still kept"
    assert b.store.get(claim.job.id) is None, "nothing was recorded"


def an_abandoned_claim_with_a_cancel_request_is_cancelled_not_reclaimed(b: Backend) -> None:
    job = make_job()
    b.queue.enqueue(job)
    claim = b.queue.dequeue("default", T0)
    assert isinstance(claim, Claim)
    assert _cancel(b, job.id) is CancelResult.REQUESTED
    later = T0 + timedelta(minutes=10)
    worker = _worker(b, {}, policies=Policies(lease=LeasePolicy(lease_ms=1000)))
    worker.clock = worker.lease_keeper.clock = ManualClock(later)
    worker.lease_keeper.reclaim_abandoned(later)
    record = b.store.get(job.id)
    assert record is not None and record.status is JobStatus.CANCELLED
    assert b.queue.dequeue("default", later) is None


def cancel_of_an_unknown_id_is_not_found_and_of_a_finished_job_changes_nothing(
    b: Backend,
) -> None:
    assert _cancel(b, make_job().id) is CancelResult.NOT_FOUND
    b.queue.enqueue(make_job())
    claim = b.queue.dequeue("default", T0)
    assert isinstance(claim, Claim)
    done = decide(start(claim.job, T0).unwrap(), Succeeded(1), T0, POLICIES, 0.5).job
    assert b.queue.finish(claim, done)
    assert _cancel(b, claim.job.id) is CancelResult.FINISHED
    assert b.store.get(claim.job.id) == done
    assert b.queue.request_cancel(claim.job.id, T0) is False


def bulk_cancel_takes_only_the_queue_and_type_named(b: Backend) -> None:
    mails = [make_job("mail") for _ in range(3)]
    other_type = make_job("report")
    other_queue = make_job("mail", queue="urgent")
    b.queue.enqueue_many([*mails, other_type, other_queue])
    running = b.queue.dequeue("default", T0)
    assert isinstance(running, Claim) and running.job.id == mails[0].id
    counts = lambda **kw: cancel_many(  # noqa: E731
        b.queue, b.store, _executor(b), T0, queue_name="default", job_type="mail", **kw
    )
    assert counts(dry_run=True) == CancelCounts(cancelled=2, requested=1)
    assert b.store.get(mails[1].id) is None, "a dry run writes nothing"
    assert counts() == CancelCounts(cancelled=2, requested=1)
    assert [b.store.get(j.id).status for j in mails[1:]] == [JobStatus.CANCELLED] * 2
    assert cancel_requested(b.queue, mails[0].id)
    assert b.queue.find(other_type.id) is not None and b.queue.find(other_queue.id) is not None
    assert counts() == CancelCounts(cancelled=0, requested=1), "the request stands"


def cancelled_records_are_pruned_by_the_completed_rules(b: Backend) -> None:
    old, recent = make_job(), make_job()
    b.queue.enqueue_many([old, recent])
    assert _cancel(b, old.id) is CancelResult.CANCELLED
    later = T0 + timedelta(days=10)
    assert cancel_job(b.queue, b.store, _executor(b), recent.id, later) is CancelResult.CANCELLED
    order = PruneOrder(
        completed_before=T0 + timedelta(days=1),
        dead_before=None,
        keep_completed=None,
        keep_dead=None,
        limit=10,
    )
    assert b.store.count_prunable(order) == 1
    assert b.store.prune(order) == 1
    assert b.store.get(old.id) is None
    assert b.store.get(recent.id).status is JobStatus.CANCELLED


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
