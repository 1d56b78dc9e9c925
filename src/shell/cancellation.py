"""Cancelling jobs: the shell side of `conveyor.core.cancellation`.

Every cancel is a decision carried out by the executor. `cancel_job` reads where
the job is, asks the core (`decide_cancel`) and hands the answer over; when the
job moved in between (claimed, finished), the guarded write refuses and the read
is taken again. `cancel_many` does the same for every queued job of a queue
and/or job type. `settle_refused` is the claim holder's side: an outcome write
refused because a cancel request stands becomes a `CancelClaim`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from datetime import datetime
from uuid import UUID

from ..core import (
    CancelClaim,
    CancelCounts,
    CancelResult,
    Job,
    Outcome,
    RequestCancel,
    ResultPolicy,
    cancel_claimed,
    decide_cancel,
)
from .executor import Executor
from .ports import CancellingJobQueue, Claim, JobQueue, JobStore, Place, QueuedJob

log = logging.getLogger("conveyor.cancel")

#: How often a cancel reads again after its guarded write found the job moved. Each
#: refusal means the job changed place meanwhile (claimed, finished); few jobs move
#: that often, and one that does is reported, not chased forever.
READS = 5


class CancelError(RuntimeError):
    """A cancel that could not be carried out (the job kept moving, or the store failed)."""


def can_cancel(queue: object) -> bool:
    """True when `queue` offers cancellation (every bundled backend does)."""
    return isinstance(queue, CancellingJobQueue)


def cancel_requested(queue: JobQueue, job_id: UUID) -> bool:
    """True while a cancel request stands for `job_id`: what a handler's context calls
    between steps. False on a queue without cancellation, and when the read fails (the
    handler carries on; its outcome write still checks the request)."""
    if not isinstance(queue, CancellingJobQueue):
        return False
    try:
        return queue.cancel_requested(job_id)
    except Exception:
        log.debug("could not read the cancel request of job %s", job_id, exc_info=True)
        return False


def cancel_job(
    queue: JobQueue,
    store: JobStore,
    executor: Executor,
    job_id: UUID,
    now: datetime,
    on_cancelled: Callable[[Job], object] | None = None,
) -> CancelResult:
    """Cancel one job: at once when queued, by a request when a claim holds it.
    `on_cancelled` hears of the record once it is written (not of a request)."""
    if not executor.cancels:
        raise CancelError(
            f"{type(queue).__name__} with {type(store).__name__} cannot cancel jobs: "
            "cancelling needs the queue's own store"
        )
    for _ in range(READS):
        found = queue.find(job_id)
        if found is None:
            record = store.get(job_id)
            if record is None:
                return CancelResult.NOT_FOUND
            if record.status.is_terminal:
                return CancelResult.FINISHED
            continue  # recorded but not terminal: a revive is placing it; read again
        if found.job is None:
            raise CancelError(f"job {job_id} cannot be cancelled: {found.problem}")
        decision = decide_cancel(found.job, now, in_flight=found.place is Place.IN_FLIGHT)
        if decision is None:
            return CancelResult.FINISHED
        if executor.carry_out(None, decision):
            if isinstance(decision, RequestCancel):
                return CancelResult.REQUESTED
            if on_cancelled is not None:
                on_cancelled(decision.job)
            return CancelResult.CANCELLED
        again = queue.find(job_id)
        if again is not None and (again.place, again.token) == (found.place, found.token):
            # Still where it was: the guard held, so the write itself failed.
            raise CancelError(f"could not cancel job {job_id}: the backend failed (see the log)")
    raise CancelError(f"job {job_id} kept moving while it was being cancelled; try again")


def _matching(queue: JobQueue, queue_name: str | None, job_type: str | None) -> Iterator[QueuedJob]:
    """The queued jobs (in flight, ready, parked) of `queue_name` and `job_type`."""
    seen: set[UUID] = set()
    for entry in queue.scan(queue_name):
        job = entry.job
        if job is None or job.id in seen:
            continue  # a payload that is not a job names no type; scan may repeat a job
        seen.add(job.id)
        if job_type is None or job.job_type == job_type:
            yield entry


#: Passes `cancel_many` makes at most: each one cancels at least every other page of
#: what is left, so a few suffice for any queue; the bound keeps a backend that kept
#: showing a cancelled job from holding the call for ever.
MAX_PASSES = 64


def cancel_many(
    queue: JobQueue,
    store: JobStore,
    executor: Executor,
    now: datetime,
    *,
    queue_name: str | None = None,
    job_type: str | None = None,
    dry_run: bool = False,
    on_cancelled: Callable[[Job], object] | None = None,
) -> CancelCounts:
    """Cancel every queued or running job of `queue_name` and/or `job_type` (at least
    one must be given), each in its own atomic write. With `dry_run` nothing is
    written: the counts say what would be done. A job that finishes meanwhile is
    not counted."""
    if queue_name is None and job_type is None:
        raise ValueError("give a queue, a job type or both")
    cancelled = requested = 0
    # A scan reads page after page while each cancel takes a job out of the queue, so
    # one pass skips some jobs (and a job moving on, scheduled to ready to in flight,
    # may pass a place before the scan reaches it): scan again until a pass finds
    # nothing left to do. Jobs asked to stop, or refused, stay queued: asked once.
    asked: set[str] = set()
    for _ in range(MAX_PASSES):
        acted = False
        for entry in _matching(queue, queue_name, job_type):
            if entry.job_id in asked:
                continue
            if dry_run:
                requested += entry.place is Place.IN_FLIGHT
                cancelled += entry.place is not Place.IN_FLIGHT
                continue
            try:
                result = cancel_job(queue, store, executor, UUID(entry.job_id), now, on_cancelled)
            except CancelError as exc:
                log.warning("%s", exc)
                asked.add(entry.job_id)
                continue
            if result is not CancelResult.CANCELLED:
                asked.add(entry.job_id)
            acted = acted or result in (CancelResult.CANCELLED, CancelResult.REQUESTED)
            cancelled += result is CancelResult.CANCELLED
            requested += result is CancelResult.REQUESTED
        if dry_run or not acted:
            break
    return CancelCounts(cancelled, requested)


def settle_refused(
    queue: JobQueue,
    executor: Executor,
    claim: Claim,
    job: Job,
    outcome: Outcome | None,
    now: datetime,
    result_policy: ResultPolicy,
) -> CancelClaim | None:
    """After an outcome write of `claim` was refused: when a cancel request stands,
    record the job cancelled instead (fenced by the token). `job` is the running job
    and `outcome` its handler's (for a claim that never started: the job as claimed,
    and None); a result is kept within `result_policy`'s cap. The decision written,
    or None when there was no request or the claim is lost too."""
    if not cancel_requested(queue, claim.job.id):
        return None
    decision = cancel_claimed(job, now, outcome, result_policy=result_policy)
    return decision if executor.carry_out(claim, decision) else None
