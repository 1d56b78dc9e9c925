"""Decisions: what should happen to a job, as plain frozen data.

`decide` turns a handler's outcome into one `Decision`; `decide_reclaim` does
the same for an abandoned claim. The shell's executor is the only code that
turns a decision into writes, always writing before it releases the claim.
Every decision carries the new job record to write, already transitioned.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, TypeAlias

import attrs

from .frozen import freeze
from .job import ErrorInfo, Job, Metadata
from .policies import (
    LeasePolicy,
    Policies,
    backoff_ms,
    is_poison_pill,
    should_give_up_unhandled,
)
from .transitions import Event, transition

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
    """The job names a tenant that does not exist (any more)."""


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
    """Record the failed job in the dead letters, then release the claim."""

    job: Job
    error: ErrorInfo


@attrs.frozen(slots=True)
class Requeue:
    """No handler here: park the job until `run_at` for another node, then release."""

    job: Job
    run_at: datetime


@attrs.frozen(slots=True)
class Promote:
    """Make a parked job ready (its `run_at` has passed)."""

    job: Job


@attrs.frozen(slots=True)
class Reclaim:
    """Return an abandoned claim to ready (at-least-once), counted in its metadata."""

    job: Job


Decision: TypeAlias = Complete | Retry | DeadLetter | Requeue | Promote | Reclaim


def _moved(job: Job, event: Event, now: datetime, **changes: Any) -> Job:
    # decide is only called for running jobs; anything else is a bug in the caller.
    return transition(job, event, now, **changes).unwrap()


def _handled(job: Job) -> Job:
    """A handler ran, so the job is no longer 'continuously unhandled'."""
    if job.metadata.first_missing_at is None:
        return job
    return attrs.evolve(job, metadata=attrs.evolve(job.metadata, first_missing_at=None))


def dead_letter(job: Job, error: ErrorInfo, now: datetime) -> DeadLetter:
    """Give up on a running job with `error` as its reason."""
    return DeadLetter(_moved(job, Event.DEAD_LETTER, now, last_error=error), error)


def decide(
    job: Job,
    outcome: Outcome,
    now: datetime,
    policies: Policies,
    jitter_sample: float,
) -> Decision:
    """What to do with a running `job` after `outcome`, at `now`.

    * success -> `Complete` with the result;
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
                return dead_letter(_handled(job), error, now)
            return Complete(_moved(_handled(job), Event.COMPLETE, now, result=frozen))
        case Failed(error=error):
            job = _handled(job)
            if not error.retryable or job.retry_count >= job.max_retries:
                return dead_letter(job, error, now)
            delay = backoff_ms(policies.retry, job.retry_count, jitter_sample)
            run_at = now + timedelta(milliseconds=delay)
            retrying = _moved(
                job,
                Event.RETRY,
                now,
                retry_count=job.retry_count + 1,
                last_error=error,
                run_at=run_at,
            )
            return Retry(retrying, run_at)
        case NoHandler():
            first = job.metadata.first_missing_at or now
            seen = attrs.evolve(job, metadata=attrs.evolve(job.metadata, first_missing_at=first))
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
            parked = attrs.evolve(_moved(seen, Event.REQUEUE, now), metadata=meta, run_at=run_at)
            return Requeue(parked, run_at)
        case TenantNotFound():
            error = ErrorInfo(TENANT_NOT_FOUND, f"tenant {job.tenant_id!r} does not exist", False)
            return dead_letter(job, error, now)
        case MissingTenant():
            error = ErrorInfo(
                MISSING_TENANT,
                f"job type {job.job_type!r} is tenant-scoped but the job has no tenant_id",
                False,
            )
            return dead_letter(job, error, now)


def decide_reclaim(job: Job, now: datetime, policy: LeasePolicy) -> Reclaim | DeadLetter:
    """An abandoned claim: back to ready, or dead-lettered when it is a poison pill."""
    if is_poison_pill(policy, job):
        budget = job.max_retries if policy.max_reclaims is None else policy.max_reclaims
        error = ErrorInfo(
            LEASE_EXPIRED,
            f"lease expired {job.metadata.reclaim_count + 1} times (budget {budget}); "
            "the job may be killing its worker",
            False,
        )
        counted = attrs.evolve(
            job,
            metadata=attrs.evolve(job.metadata, reclaim_count=job.metadata.reclaim_count + 1),
        )
        return dead_letter(counted, error, now)
    meta = attrs.evolve(job.metadata, reclaim_count=job.metadata.reclaim_count + 1)
    return Reclaim(_moved(job, Event.RECLAIM, now, metadata=meta))


def decide_promotion(job: Job, now: datetime) -> Promote | None:
    """A parked job whose `run_at` has passed is promoted; otherwise nothing happens."""
    if not job.status.is_parked or job.run_at > now:
        return None
    return Promote(_moved(job, Event.PROMOTE, now))


def undecodable(job_id: str, reason: str) -> ErrorInfo:
    """The error recorded for a payload that could not be decoded (never retried)."""
    return ErrorInfo(DECODE_ERROR, f"job {job_id}: {reason}", False)


def revive(job: Job, now: datetime) -> Job:
    """A dead letter given a fresh start by an operator: pending, retries reset."""
    revived = transition(job, Event.REVIVE, now).unwrap()
    return attrs.evolve(
        revived,
        retry_count=0,
        run_at=now,
        finished_at=None,
        metadata=Metadata(),
    )
