"""Decisions: what should happen to a job, as plain frozen data.

`decide` turns a handler's outcome into one `Decision`; `decide_reclaim` does the same for
an abandoned claim, `decide_revive` for an operator's retry of a dead letter, and
`hand_back` for a claim returned before its job began. The shell's executor is the only code
that turns a decision into writes, always writing before it releases the claim. Every
decision carries the new job record to write, already transitioned, and the guard its write
must re-check: "still abandoned before this instant" for the lease keeper, "still a dead
letter" for a revive. The claim token is the guard every holder's write carries.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, TypeAlias, cast

import attrs
from returns.result import Success

from .errors import ValidationError
from .frozen import freeze
from .job import MAX_ATTEMPTS_KEPT, Attempt, AttemptOutcome, ErrorInfo, Job, JobStatus, Metadata
from .policies import LeasePolicy, Policies, backoff_ms, is_poison_pill, should_give_up_unhandled
from .prefetch import StartClaim
from .results import oversized_result
from .transitions import Event, hand_back, replace, transition

# Error types the core itself assigns.
NO_HANDLER = "no-handler"
LEASE_EXPIRED = "lease-expired"
DECODE_ERROR = "decode-error"
TENANT_NOT_FOUND = "tenant-not-found"
MISSING_TENANT = "missing-tenant"
INVALID_RESULT = "invalid-result"


# ---- outcomes: what the shell observed ------------------------------------


@attrs.frozen(slots=True)
class Succeeded:
    """The handler returned `result` (a JSON value)."""

    result: Any = None


@attrs.frozen(slots=True)
class Failed:
    """The handler failed; `error.retryable` says whether another attempt may help."""

    error: ErrorInfo


@attrs.frozen(slots=True)
class NoHandler:
    """This process has no handler registered for the job's type."""


@attrs.frozen(slots=True)
class TenantNotFound:
    """The job names a tenant that does not exist (any more), or whose scope (its
    schema) does not: `why` says which, when the shell knows."""

    why: str | None = None


@attrs.frozen(slots=True)
class MissingTenant:
    """A tenant-scoped handler was given a job without a tenant."""


Outcome: TypeAlias = Succeeded | Failed | NoHandler | TenantNotFound | MissingTenant


# ---- decisions: what the shell must do ------------------------------------


@attrs.frozen(slots=True)
class Complete:
    """Record the completed job in history, then release the claim."""

    job: Job


@attrs.frozen(slots=True)
class Retry:
    """Park the job until `run_at` (its backoff), then release the claim."""

    job: Job
    run_at: datetime


@attrs.frozen(slots=True)
class DeadLetter:
    """Record the failed job in the dead letters, then release the claim.

    From the lease keeper, `abandoned_before` is set: the write happens only while
    the claim is still locked (or last renewed) before that instant, so a holder
    that renewed its lease since the keeper looked keeps its job.
    """

    job: Job
    error: ErrorInfo
    abandoned_before: datetime | None = None


@attrs.frozen(slots=True)
class Requeue:
    """No handler here: park the job until `run_at` for another node, then release."""

    job: Job
    run_at: datetime


@attrs.frozen(slots=True)
class Reclaim:
    """Return an abandoned claim to ready (at-least-once), counted in its metadata,
    only while it is still locked before `abandoned_before`."""

    job: Job
    abandoned_before: datetime


@attrs.frozen(slots=True)
class HandBack:
    """Return a claim to ready: one whose job never started, unchanged but for its
    status, or a running one a forced stop interrupted (`decide_interrupt`), its
    attempt recorded as interrupted."""

    job: Job


@attrs.frozen(slots=True)
class Revive:
    """An operator's retry: while `dead` is still a dead letter, queue `job` (pending,
    retries reset) and record it, in one atomic step."""

    dead: Job
    job: Job


@attrs.frozen(slots=True)
class Cancel:
    """Cancel a job no claim holds: while it is still ready or parked, take it out of
    the queue and record `job` (cancelled), in one atomic step (`core.cancellation`)."""

    job: Job


@attrs.frozen(slots=True)
class RequestCancel:
    """Ask the worker running `job` to stop: mark the claim, while it is still in
    flight, so its outcome is recorded cancelled (`core.cancellation`)."""

    job: Job
    at: datetime


@attrs.frozen(slots=True)
class CancelClaim:
    """A claimed job whose cancel was requested: record `job` (cancelled), clear the
    request and release the claim, in one step fenced by the claim's token (and, from
    the lease keeper, by `abandoned_before` as for `DeadLetter`)."""

    job: Job
    abandoned_before: datetime | None = None


Decision: TypeAlias = (
    Complete
    | Retry
    | DeadLetter
    | Requeue
    | Reclaim
    | HandBack
    | Revive
    | Cancel
    | RequestCancel
    | CancelClaim
    | StartClaim
)


def _moved(job: Job, event: Event, now: datetime, **changes: Any) -> Job:
    moved = transition(job, event, now, **changes)
    if not isinstance(moved, Success):  # a decision is for a running job: a caller's bug
        raise ValueError(f"a decision is for a running job: {moved.failure()}")
    return cast(Job, moved.unwrap())


def _handled(job: Job) -> dict[str, Any]:
    """A handler ran, so the job is no longer 'continuously unhandled': the change to
    make in the decision's record (none for a job that was never unhandled)."""
    if job.metadata.first_missing_at is None:
        return {}
    return {"metadata": attrs.evolve(job.metadata, first_missing_at=None)}


def ended(
    job: Job,
    now: datetime,
    outcome: AttemptOutcome,
    error: ErrorInfo | None = None,
    *,
    abandoned: bool = False,
) -> tuple[Attempt, ...]:
    """`job.attempts` with its running attempt appended, ended at `now` with `outcome`
    (the newest `MAX_ATTEMPTS_KEPT` kept). An `abandoned` attempt (its lease ran out)
    has no known start or worker: nobody wrote them down before the worker vanished."""
    attempt = Attempt(
        number=job.attempt,
        started_at=None if abandoned else job.started_at,
        finished_at=now,
        outcome=outcome,
        worker=None if abandoned else job.worker,
        error=error,
    )
    return (*job.attempts, attempt)[-MAX_ATTEMPTS_KEPT:]


def dead_letter(
    job: Job,
    error: ErrorInfo,
    now: datetime,
    *,
    abandoned_before: datetime | None = None,
    **changes: Any,
) -> DeadLetter:
    """Give up on a running job with `error` as its reason (guarded by `abandoned_before`
    when the lease keeper gives up on an abandoned claim), its attempt recorded as
    dead-lettered; `changes` are other fields to set in the same record."""
    abandoned = abandoned_before is not None
    history = ended(job, now, AttemptOutcome.DEAD_LETTERED, error, abandoned=abandoned)
    moved = _moved(job, Event.DEAD_LETTER, now, last_error=error, attempts=history, **changes)
    return DeadLetter(moved, error, abandoned_before)


def decide(
    job: Job,
    outcome: Outcome,
    now: datetime,
    policies: Policies,
    jitter_sample: float,
) -> Decision:
    """What to do with a running `job` after `outcome`, at `now`. The record in the
    decision has the attempt appended to `job.attempts`, with how it ended.

    * success -> `Complete` with the result; a result that is not JSON
      (`invalid-result`) or is larger than `policies.result` (`result-too-large`) ->
      `DeadLetter`, never retried;
    * retryable failure with retries left -> `Retry` after the backoff;
    * retries exhausted or non-retryable -> `DeadLetter` with the last error;
    * no handler -> `Requeue` parked `requeue_delay_ms` ahead, or `DeadLetter`
      (`no-handler`) once unhandled for `max_requeue_age_ms`;
    * tenant not found / missing tenant -> `DeadLetter`, never retried.
    """
    match outcome:
        case Succeeded(result=result):
            try:
                frozen = freeze(result)
            except ValueError as exc:
                error = ErrorInfo(INVALID_RESULT, f"handler result is not JSON: {exc}", False)
                return dead_letter(job, error, now, **_handled(job))
            too_large = oversized_result(job.id, frozen, policies.result)
            if too_large is not None:
                return dead_letter(job, too_large, now, **_handled(job))
            history = ended(job, now, AttemptOutcome.COMPLETED)
            done = _moved(
                job, Event.COMPLETE, now, result=frozen, attempts=history, **_handled(job)
            )
            return Complete(done)
        case Failed(error=error):
            if not error.retryable or job.retry_count >= job.max_retries:
                return dead_letter(job, error, now, **_handled(job))
            delay = backoff_ms(policies.retry, job.retry_count, jitter_sample)
            run_at = now + timedelta(milliseconds=delay)
            retrying = _moved(
                job,
                Event.RETRY,
                now,
                retry_count=job.retry_count + 1,
                last_error=error,
                run_at=run_at,
                attempts=ended(job, now, AttemptOutcome.RETRIED, error),
                **_handled(job),
            )
            return Retry(retrying, run_at)
        case NoHandler():
            first = job.metadata.first_missing_at or now
            seen = replace(job, metadata=attrs.evolve(job.metadata, first_missing_at=first))
            if should_give_up_unhandled(policies.requeue, seen, now):
                window = policies.requeue.max_requeue_age_ms
                error = ErrorInfo(
                    NO_HANDLER,
                    f"no handler for job type {job.job_type!r} on any worker for "
                    f"{window} ms (or {policies.requeue.max_requeues} requeues)",
                    False,
                )
                return dead_letter(seen, error, now)
            run_at = now + timedelta(milliseconds=policies.requeue.requeue_delay_ms)
            meta = attrs.evolve(seen.metadata, requeue_count=seen.metadata.requeue_count + 1)
            history = ended(seen, now, AttemptOutcome.REQUEUED)
            parked = _moved(
                seen, Event.REQUEUE, now, attempts=history, metadata=meta, run_at=run_at
            )
            return Requeue(parked, run_at)
        case TenantNotFound(why=why):
            said = why or f"tenant {job.tenant_id!r} does not exist"
            return dead_letter(job, ErrorInfo(TENANT_NOT_FOUND, said, False), now)
        case MissingTenant():
            error = ErrorInfo(
                MISSING_TENANT,
                f"job type {job.job_type!r} is tenant-scoped but the job has no tenant_id",
                False,
            )
            return dead_letter(job, error, now)
        case _:
            kinds = "Succeeded(...), Failed(...), NoHandler(), TenantNotFound(), MissingTenant()"
            raise ValidationError.of("outcome", f"must be an outcome ({kinds}), got {outcome!r}")


def decide_reclaim(
    job: Job,
    now: datetime,
    policy: LeasePolicy,
    abandoned_before: datetime,
    *,
    started: bool = True,
) -> Reclaim | DeadLetter:
    """An abandoned claim, still abandoned as of `abandoned_before` (the guard its
    write re-checks): back to ready, or dead-lettered when it is a poison pill.

    A started claim (`job` is running) is charged to the reclaim budget. A claim that
    expired while its job waited in a prefetched batch (`job` as claimed) is not: its
    job never ran, so it goes back unchanged but for `prefetch_reclaims`, and the
    worker starts it explicitly the next time, so a job that kills its worker is
    still counted. A started claim's attempt is appended to the record, as
    reclaimed or dead-lettered, with its start and worker unknown; a prefetched
    claim's job had no attempt, so none is appended.
    """
    if not started:
        meta = attrs.evolve(job.metadata, prefetch_reclaims=job.metadata.prefetch_reclaims + 1)
        returned = hand_back_job(job, now, metadata=meta)
        return Reclaim(returned, abandoned_before)
    meta = attrs.evolve(job.metadata, reclaim_count=job.metadata.reclaim_count + 1)
    if is_poison_pill(policy, job):
        budget = job.max_retries if policy.max_reclaims is None else policy.max_reclaims
        times = "once" if meta.reclaim_count == 1 else f"{meta.reclaim_count} times"
        error = ErrorInfo(
            LEASE_EXPIRED,
            f"lease expired {times} while running (budget {budget}); it may kill its worker",
            False,
        )
        return dead_letter(job, error, now, abandoned_before=abandoned_before, metadata=meta)
    history = ended(job, now, AttemptOutcome.RECLAIMED, abandoned=True)
    reclaimed = _moved(job, Event.RECLAIM, now, metadata=meta, attempts=history)
    return Reclaim(reclaimed, abandoned_before)


def hand_back_job(job: Job, now: datetime, **changes: Any) -> Job:
    """`job` as claimed, made pending again without counting an attempt."""
    return hand_back(job, now, **changes).unwrap()


def decide_hand_back(job: Job, now: datetime) -> HandBack:
    """A claim whose job never started goes back to ready (a stopping worker's
    prefetched claims)."""
    return HandBack(hand_back_job(job, now))


def decide_interrupt(job: Job, now: datetime) -> HandBack:
    """A running job whose worker is stopped by force goes back to ready at once,
    rather than after its lease: its attempt is recorded as interrupted (with its
    start and worker) and nothing is charged to its retries or its reclaim budget,
    since the job did not fail; the operator stopped it."""
    history = ended(job, now, AttemptOutcome.INTERRUPTED)
    return HandBack(_moved(job, Event.INTERRUPT, now, attempts=history))


def decide_revive(dead: Job, now: datetime) -> Revive | None:
    """An operator's retry of a dead letter, or None when `dead` is not one."""
    if dead.status is not JobStatus.FAILED:
        return None
    return Revive(dead, revive(dead, now))


def undecodable(job_id: str, reason: str) -> ErrorInfo:
    """The error recorded for a payload that could not be decoded (never retried)."""
    return ErrorInfo(DECODE_ERROR, f"job {job_id}: {reason}", False)


def revive(job: Job, now: datetime) -> Job:
    """A dead letter given a fresh start by an operator: pending, retries reset. Its
    attempts are kept: the history shows what went wrong before the revive."""
    return transition(
        job, Event.REVIVE, now, retry_count=0, run_at=now, finished_at=None, metadata=Metadata()
    ).unwrap()
