"""What is known about one job, wherever it is: `JobView`, built from a queued entry
or a stored record, and its JSON-ready form.

The claim's token is not a worker's name: a claim is identified by a fresh token
(see `ports.Claim`), so a view shows the token, when it was claimed or last
renewed, and when its lease runs out, but not which worker process holds it.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import attrs

from ..core import Attempt, ErrorInfo, Job, JobStatus, Progress, thaw
from .ports import Place, QueuedJob, is_prefetched
from .progress_notes import progress_dict


@attrs.frozen(slots=True)
class JobView:
    """What is known about one job, wherever it is.

    `state` is one of the `JobStatus` values: `scheduled` and `retrying` (parked
    until `next_run_at`), `pending` (ready), `running` (claimed: `token`,
    `claimed_at`, `lease_expires_at`), `completed` (`job.result`) and `failed`
    (the dead letter: `job.last_error`). `job` is None only for a queued payload
    that does not decode; `problem` then says why. `attempts` are the job's
    finished attempts, oldest first (a running attempt is not among them yet).
    """

    job_id: str
    state: JobStatus
    queue: str
    job: Job | None
    problem: str | None = None
    token: str | None = None
    #: When the claim was taken or last renewed (a heartbeat moves it).
    claimed_at: datetime | None = None
    lease_expires_at: datetime | None = None
    #: A running job whose cancel was requested: its worker records it cancelled.
    cancel_requested: bool = False
    #: A running job's newest progress report as last written (`JobContext.progress`),
    #: read by `Runtime.get`; None when it made none (and for listings).
    progress: Progress | None = None

    @property
    def dead(self) -> bool:
        """True for a dead letter (state `failed`)."""
        return self.state is JobStatus.FAILED

    @property
    def prefetched(self) -> bool:
        """True for a claim taken in a worker's prefetched batch, under the batch's
        token: the batch's first job runs under it; the others wait their turn, each
        started under a token of its own when it comes (`Claim.started`)."""
        return self.token is not None and is_prefetched(self.token)

    @property
    def attempt(self) -> int:
        """The number of the attempt running, else of the last one started; 0 before
        the first. A running job's stored record may be the one written before its
        start (a store writes the start with the attempt's end): the running attempt
        is then the one after the record's count."""
        if self.job is None:
            return 0
        started = self.state is JobStatus.RUNNING and not self.prefetched  # a batch's waits
        before_start = started and self.job.status is not JobStatus.RUNNING
        return self.job.attempt + 1 if before_start else self.job.attempt

    @property
    def attempts(self) -> tuple[Attempt, ...]:
        """The newest finished attempts (see `conveyor.core.MAX_ATTEMPTS_KEPT`), oldest
        first: when each started and ended, on which worker, how, and its error."""
        return () if self.job is None else self.job.attempts

    @property
    def next_run_at(self) -> datetime | None:
        """When a parked job (`scheduled`, `retrying`) comes due; None otherwise."""
        return self.job.run_at if self.job is not None and self.state.is_parked else None

    def to_dict(self, *, show_args: bool = False, show_result: bool = False) -> dict[str, Any]:
        """A mapping of plain JSON values (`json.dumps` takes it as it is), tracebacks
        in full. Args and result (they often hold secrets) only when asked; both come
        as plain `dict`/`list` JSON, never frozen."""
        job = self.job
        out: dict[str, Any] = {"id": self.job_id, "state": self.state.value, "dead": self.dead}
        out["queue"] = self.queue
        if job is not None:
            out |= {
                "job_type": job.job_type,
                "priority": job.priority.value,
                "tenant_id": job.tenant_id,
                "attempt": self.attempt,
                "retry_count": job.retry_count,
                "max_retries": job.max_retries,
                # The job's own; None when its type's (registration or config) applies.
                "timeout_ms": job.timeout_ms,
                "created_at": _iso(job.created_at),
                "run_at": _iso(job.run_at),
                "next_run_at": _iso(self.next_run_at),
                "started_at": _iso(job.started_at),
                "finished_at": _iso(job.finished_at),
                "last_error": _error_dict(job.last_error),
                "attempts": [attempt_dict(attempt) for attempt in job.attempts],
            }
            if show_args:
                out["args"] = thaw(job.args)
            if show_result:
                out["result"] = thaw(job.result)
        out["claim"] = (
            None
            if self.token is None
            else {
                "token": self.token,
                "prefetched": self.prefetched,
                "claimed_at": _iso(self.claimed_at),
                "lease_expires_at": _iso(self.lease_expires_at),
                "cancel_requested": self.cancel_requested,
            }
        )
        out["progress"] = progress_dict(self.progress)
        out["problem"] = self.problem
        return out


def _iso(when: datetime | None) -> str | None:
    return None if when is None else when.isoformat()


def _error_dict(error: ErrorInfo | None) -> dict[str, Any] | None:
    if error is None:
        return None
    return {
        "type": error.type,
        "message": error.message,
        "retryable": error.retryable,
        "traceback": error.traceback,
    }


def attempt_dict(attempt: Attempt) -> dict[str, Any]:
    """One attempt as a JSON-ready mapping, its traceback in full."""
    return {
        "number": attempt.number,
        "outcome": attempt.outcome.value,
        "started_at": _iso(attempt.started_at),
        "finished_at": _iso(attempt.finished_at),
        "worker": attempt.worker,
        "error": _error_dict(attempt.error),
    }


def view_of_entry(entry: QueuedJob, lease: timedelta) -> JobView:
    """The view of a queued job; `lease` turns its claim time into the lease's end."""
    if entry.place is Place.IN_FLIGHT:
        state = JobStatus.RUNNING
    elif entry.place is Place.READY:
        state = JobStatus.PENDING
    elif entry.place is Place.WAITING:
        state = JobStatus.WAITING
    elif entry.job is not None and entry.job.status.is_parked:
        state = entry.job.status
    else:
        state = JobStatus.SCHEDULED
    expires = None if entry.locked_at is None else entry.locked_at + lease
    return JobView(
        entry.job_id,
        state,
        entry.queue,
        entry.job,
        entry.problem,
        entry.token,
        entry.locked_at,
        expires,
    )


def view_of_record(record: Job) -> JobView:
    """The view of a recorded job (completed, failed, or a revived record)."""
    return JobView(str(record.id), record.status, record.queue, record)
