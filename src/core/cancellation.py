"""Cancellation: what to do with a job someone no longer wants run.

Theory of operation
-------------------
A queued job (`scheduled`, `pending`, `retrying`) has no holder, so its cancel
is one atomic write: take it out of the queue and record it `cancelled`
(`Cancel`), only while no claim has taken it meanwhile. A claimed job cannot be
stopped from outside the process running it (a thread cannot be killed), so its
cancel is a *request* kept beside the claim (`RequestCancel`): the handler may
see it and return early, and every outcome write of the claim holder (finish,
retry, requeue, hand back, reclaim) is refused by the adapter while the request
stands. The holder then records the job `cancelled` instead (`CancelClaim`,
from `cancel_claimed`), whatever the handler returned. So a cancelled running
job is never recorded completed and never retried: the refusal and the request
are checked in the same atomic write as the outcome.

A finished job (completed, failed, cancelled) has nothing left to cancel;
`decide_cancel` answers None for it.
"""

from __future__ import annotations

import contextlib
import enum
from datetime import datetime

import attrs
from returns.result import Success

from .decisions import Cancel, CancelClaim, Failed, Outcome, RequestCancel, Succeeded, ended
from .frozen import freeze
from .job import AttemptOutcome, ErrorInfo, Job, JobStatus
from .results import ResultPolicy, oversized_result
from .transitions import Event, transition


class CancelResult(enum.Enum):
    """What a cancel did (`Runtime.cancel`)."""

    CANCELLED = "cancelled"  # it was queued: it is now recorded cancelled
    REQUESTED = "requested"  # it is running: its worker records it cancelled when it returns
    FINISHED = "finished"  # it had already finished (completed, failed or cancelled)
    NOT_FOUND = "not_found"  # no job with that id is queued or recorded


@attrs.frozen(slots=True)
class CancelCounts:
    """What a bulk cancel did: queued jobs cancelled, running ones asked to stop."""

    cancelled: int = 0
    requested: int = 0

    @property
    def total(self) -> int:
        return self.cancelled + self.requested


def decide_cancel(job: Job, now: datetime, *, in_flight: bool) -> Cancel | RequestCancel | None:
    """Cancel `job` as found in the queue at `now`: `RequestCancel` when a claim holds
    it (`in_flight`), `Cancel` with its cancelled record when it is queued, None when it
    is already finished (there is nothing to cancel)."""
    if in_flight:
        return RequestCancel(job, now)
    if job.status.is_terminal:
        return None
    match transition(job, Event.CANCEL, now):
        case Success(cancelled):
            return Cancel(cancelled)
        case _:
            return None


def cancel_claimed(
    job: Job,
    now: datetime,
    outcome: Outcome | None = None,
    *,
    abandoned_before: datetime | None = None,
    result_policy: ResultPolicy = ResultPolicy(),
) -> CancelClaim:
    """A claimed job whose cancel was requested, recorded cancelled at `now`.

    `job` is the running job (its handler returned `outcome`, which is kept in the
    attempt: a failure's error, a success's result when it is JSON and within
    `result_policy`'s cap) or the job as claimed, never started (a hand-back). From
    the lease keeper, `abandoned_before` guards the write as for a reclaim, and the
    attempt is appended as abandoned.
    """
    changes: dict[str, object] = {}
    if job.status is JobStatus.RUNNING:
        error: ErrorInfo | None = None
        match outcome:
            case Failed(error=failed):
                error = failed
                changes["last_error"] = failed
            case Succeeded(result=result):
                # A result that is not JSON, or over the cap, is dropped: the cancel is
                # what is recorded.
                with contextlib.suppress(ValueError):
                    frozen = freeze(result)
                    if oversized_result(job.id, frozen, result_policy) is None:
                        changes["result"] = frozen
            case _:
                pass
        changes["attempts"] = ended(
            job, now, AttemptOutcome.CANCELLED, error, abandoned=abandoned_before is not None
        )
        record = transition(job, Event.CANCEL, now, **changes).unwrap()
    else:
        # Claimed but never started: a due parked job is claimed without being rewritten.
        record = transition(job, Event.CANCEL, now).unwrap()
    return CancelClaim(record, abandoned_before)
