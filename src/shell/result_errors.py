"""What `Runtime.result` raises when a job has no result to give: it died, it was
cancelled, the wait ran out, or no store knows the id. Each is a `ResultError` that
names the job and carries what a caller needs to act on it."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from ..core import ErrorInfo, JobStatus


class ResultError(Exception):
    """A job's outcome is not a result; `job_id` names the job."""

    def __init__(self, job_id: UUID, message: str) -> None:
        super().__init__(message)
        self.job_id = job_id


class JobFailed(ResultError):
    """The job is a dead letter: its retries ran out or its error was permanent.
    `error` is its last error (type, message, traceback)."""

    def __init__(self, job_id: UUID, error: ErrorInfo | None) -> None:
        said = "no error recorded" if error is None else f"{error.type}: {error.message}"
        super().__init__(job_id, f"job {job_id} failed: {said}")
        self.error = error


class JobCancelled(ResultError):
    """The job was cancelled before it finished."""

    def __init__(self, job_id: UUID) -> None:
        super().__init__(job_id, f"job {job_id} was cancelled")


class ResultTimeout(ResultError, TimeoutError):
    """The wait ran out first; `state` is the job's state when it did (None when no
    store knew the id by then)."""

    def __init__(self, job_id: UUID, state: JobStatus | None, timeout_s: float) -> None:
        where = "unknown" if state is None else state.value
        super().__init__(
            job_id, f"job {job_id} has no outcome after {timeout_s:g} s; it is {where}"
        )
        self.state = state
        self.timeout_s = timeout_s


class JobNotFound(ResultError, LookupError):
    """No queue or store holds the job. `pruned` says whether retention pruned its
    record: True (then `pruned_at` says when), False (not within the store's
    `retention.remember_pruned_ms`: never enqueued here, purged by an operator, or
    pruned longer ago), or None for a store that keeps no tombstones and cannot tell
    (see docs/results.md)."""

    def __init__(
        self, job_id: UUID, pruned: bool | None = None, pruned_at: datetime | None = None
    ) -> None:
        if pruned:
            when = "" if pruned_at is None else f" at {pruned_at.isoformat()}"
            why = f"its record was pruned by retention{when}"
        elif pruned is None:
            why = "it was never enqueued here, or its record is gone (pruned or purged)"
        else:
            why = (
                "it was never enqueued here (or was purged, or pruned longer ago than "
                "retention.remember_pruned_ms)"
            )
        super().__init__(job_id, f"no job {job_id}: {why}")
        self.pruned = pruned
        self.pruned_at = pruned_at
