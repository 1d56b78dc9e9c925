"""Optional capabilities of a queue beyond claiming: cancelling jobs, waking an idle
worker instead of being polled (and ending its wait early), keeping a running job's
progress, and finding many jobs in one read. Callers ask with `isinstance`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Protocol, runtime_checkable
from uuid import UUID

from ...core import Job
from .claims import BadClaim, Claim
from .queue import FinishingJobQueue, JobQueue
from .reads import QueuedJob


@runtime_checkable
class CancellingJobQueue(FinishingJobQueue, Protocol):
    """A queue that cancels jobs: at once while queued, by a request while claimed.

    While a cancel request stands for a job, every outcome write of its claim holder
    (`finish`, `finish_many`, `replace`, `reclaim`) is refused, checked in the same
    atomic write, so the holder records the job cancelled (`finish_cancelled`)
    instead of completed, retried or requeued. `ack` and `extend` are not refused.
    """

    def cancel(self, record: Job) -> bool:
        """Only while `record.id` is still ready or parked (no claim holds it), take it
        out of the queue and record `record` (cancelled) in the store, both or neither.
        False, with nothing written, when it was claimed or finished meanwhile."""

    def request_cancel(self, job_id: UUID, now: datetime) -> bool:
        """Only while a claim holds `job_id`, mark it cancel-requested (at `now`). False
        when no claim holds it (it is queued, finished or unknown)."""

    def cancel_requested(self, job_id: UUID) -> bool:
        """True while a cancel request stands for `job_id`: one cheap read, for a
        handler that checks between steps whether to stop."""

    def finish_cancelled(
        self, claim: Claim | BadClaim, record: Job, abandoned_before: datetime | None = None
    ) -> bool:
        """`finish` for a cancel-requested claim: fenced by the token (and with
        `abandoned_before` by "still locked before it"), record `record` (cancelled),
        clear the request and release the claim, all or nothing."""


@runtime_checkable
class WakingJobQueue(JobQueue, Protocol):
    """A queue that can tell an idle worker when work may be ready, instead of being
    polled (a wake-up list on Redis, LISTEN/NOTIFY or a watch on SQL, a condition in
    memory)."""

    def wait_for_work(self, queue: str, timeout_s: float) -> bool:
        """Block until work may be ready on `queue` (True: try a claim) or `timeout_s`
        passes (False)."""
        ...


@runtime_checkable
class InterruptibleWaitsJobQueue(WakingJobQueue, Protocol):
    """A waking queue whose idle waits in this process can be ended early, so that a
    worker told to stop leaves its wait at once instead of when it times out (an
    in-process condition on SQL and in memory; on Redis, a token on a list of the
    process's own that each blocking pop also waits on)."""

    def end_waits(self) -> None:
        """End every `wait_for_work` on this queue's backend now waiting in this
        process: each returns True ("try a claim"), which a stopping worker skips and
        any other worker takes as a spare look."""
        ...


@runtime_checkable
class ClaimOnWakeJobQueue(WakingJobQueue, Protocol):
    """A queue whose wake-up claims in the same round trip, so an idle worker picks a
    job up in one round trip."""

    def wait_and_dequeue(
        self, queue: str, now: datetime, limit: int, timeout_s: float
    ) -> Sequence[Claim | BadClaim]:
        """Wait up to `timeout_s` for work on `queue`, then claim up to `limit` jobs due
        at `now` (none when nothing came)."""
        ...


@runtime_checkable
class ProgressJobQueue(JobQueue, Protocol):
    """A queue that keeps the newest progress report of each running job beside its
    claim (`conveyor.shell.progress_notes` makes and reads the text)."""

    def extend_with_progress(self, claim: Claim | BadClaim, now: datetime, note: str) -> bool:
        """`extend`, storing `note` with the renewal in the same fenced write: both
        only while `claim.token` still holds the job. False, with nothing written,
        when it does not."""
        ...

    def progress_note(self, job_id: UUID) -> str | None:
        """The note last stored for `job_id` while a claim held it (None when none is
        stored); the reader checks that its token is the current claim's."""
        ...


@runtime_checkable
class FileBackedJobQueue(JobQueue, Protocol):
    """A queue in a file that can be taken from under it (SQLite): a process left on a
    deleted or replaced file goes on using it, unseen by every other process."""

    def lost_database(self) -> str | None:
        """Why the file this queue uses is no longer the one at its path, or None."""
        ...


#: How many ids a built-in `find_many` reads at once (a query's IN list, a pipeline).
FIND_MANY_BATCH = 500


@runtime_checkable
class FindingManyJobQueue(JobQueue, Protocol):
    """A queue that finds many jobs in one read (or one per batch): a large
    workflow's members, shown while it runs."""

    def find_many(self, job_ids: Sequence[UUID]) -> Mapping[UUID, QueuedJob]:
        """Read-only: `find` of each of `job_ids`, holding only those the queue holds."""
        ...
