"""The queue port: work still to do, and the ways a queue finishes and claims in bulk.

`JobQueue` is what every backend offers. `TransactionalJobQueue` enqueues in the
caller's own transaction (SQL); `FinishingJobQueue` writes a final record and
releases the claim in one atomic step; `BatchingJobQueue` claims and finishes
several jobs per round trip.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol, runtime_checkable
from uuid import UUID

from ...core import Job
from .claims import BadClaim, Claim
from .reads import Place, QueueCounts, QueuedJob
from .store import JobStore


class UniqueKeyHeld(Exception):
    """A write refused, with nothing written, because it would give a unique key a
    second live job: `holder` holds `key` (an operator's retry of a dead letter whose
    key another job took meanwhile)."""

    def __init__(self, key: str, holder: Job) -> None:
        super().__init__(f"unique key {key!r} is held by job {holder.id} ({holder.status.value})")
        self.key, self.holder = key, holder


@runtime_checkable
class JobQueue(Protocol):
    """Work still to do: ready queues, the scheduled set and the in-flight claims."""

    def enqueue(self, job: Job) -> None:
        """Upsert by id, unlocked. A parked job (`scheduled`/`retrying`) waits for its
        `run_at` in the scheduled set; any other goes to its ready queue."""

    def enqueue_many(self, jobs: Sequence[Job]) -> None:
        """`enqueue` for several jobs in one round trip, ready ones in list order."""

    def enqueue_new(self, job: Job) -> Job | None:
        """Write `job` as new work unless its job is already there, in one atomic step.

        Nothing is written, and the job already there comes back, when a job with
        `job.id` is queued or recorded in the store in any state (its args are never
        replaced), or when `job.unique` names a key another job holds
        (`core.uniqueness.lock_holds`, read in the same step). The job returned shows
        its state as it stands (`running` while claimed). None when `job` was written;
        it then holds its unique key. Of concurrent calls, exactly one writes. Unlike
        `enqueue`, this never replaces a job.
        """

    def enqueue_new_many(self, jobs: Sequence[Job]) -> list[Job | None]:
        """`enqueue_new` for each job, in list order, in one round trip where the
        backend allows: each answer sees the jobs of the list written before it."""

    def dequeue(self, queue: str, now: datetime) -> Claim | BadClaim | None:
        """Claim the best ready job of `queue` (priority, then FIFO), or None.

        In the same atomic step, parked jobs of `queue` whose `run_at <= now` become
        ready first, in the core's promotion order (`run_at`, then enqueue sequence),
        behind the jobs already ready: no promotion pass stands between `run_at` and the
        claim. The claim is started (a plain token). A re-sent claim (after a dropped
        connection) returns what its token already holds, never a second job.
        """

    def ack(self, claim: Claim | BadClaim) -> bool:
        """Release the claim: remove the in-flight entry only if `claim.token` still
        holds it. True when something was removed."""

    def extend(self, claim: Claim | BadClaim, now: datetime) -> bool:
        """Heartbeat: renew the lease to `now` if the claim is still held."""

    def replace(self, claim: Claim, job: Job) -> bool:
        """Fenced upsert of a claimed job's successor (ready or parked, unlocked),
        only if `claim.token` still holds it. The claim is no longer held afterwards."""

    def promote_due(self, now: datetime, limit: int = 1000) -> int:
        """Move parked jobs whose `run_at <= now` to their ready queues, atomically per
        job, in the promotion order: of concurrent callers, only one moves each.
        Returns how many moved. (Claims promote their own queue's due jobs; this is
        for operators and tests.)"""

    def next_due(self, queue: str) -> datetime | None:
        """The earliest `run_at` among `queue`'s parked jobs, or None: how long an idle
        worker may sleep before a job comes due."""

    def abandoned(self, cutoff: datetime, limit: int = 100) -> Sequence[Claim | BadClaim]:
        """In-flight claims locked (or last extended) before `cutoff`. Read-only: a
        payload that does not decode comes back as a `BadClaim` for the caller to decide."""

    def reclaim(self, claim: Claim, job: Job, cutoff: datetime) -> bool:
        """Return an abandoned claim to ready as `job`, re-checking inside the write that
        it is still held by `claim.token` and still locked before `cutoff`."""

    def counts(self, now: datetime) -> Mapping[str, QueueCounts]:
        """Figures per queue name."""

    def find(self, job_id: UUID) -> QueuedJob | None:
        """Read-only: where `job_id` is in the queue, or None when the queue does not
        hold it (finished, or never enqueued). Takes no write lock."""

    def scan(
        self, queue: str | None = None, place: Place | None = None, *, batch: int = 500
    ) -> Iterator[QueuedJob]:
        """Read-only, lazily, `batch` at a time: the queued jobs (of `queue`, in
        `place`), in flight first (oldest claim first), then ready (per queue name,
        in claim order), then scheduled (in promotion order). Pages are separate
        reads, not one snapshot: a job that moves meanwhile may be missed or seen
        twice (callers drop repeats by id)."""

    def server_time(self) -> datetime | None:
        """The clock of the server that holds the leases, or None when this process's
        own clock is the one (memory, SQLite). Workers refuse to start when theirs is
        off by more than a quarter lease."""

    def close(self) -> None:
        """Release connections."""


@runtime_checkable
class TransactionalJobQueue(JobQueue, Protocol):
    """A queue in the caller's own database: enqueue commits with the business change."""

    def enqueue_in_tx(self, conn: Any, job: Job) -> None:
        """Enqueue inside the caller's open transaction on `conn` (the queue row is the
        outbox row). Anything but a connection with a transaction begun is a
        `ValidationError`: it would autocommit and reopen the dual-write window."""

    def enqueue_new_in_tx(self, conn: Any, job: Job) -> Job | None:
        """`enqueue_new` inside the caller's open transaction on `conn`, with the same
        checks of `conn` as `enqueue_in_tx`. A job found already there leaves the
        caller's transaction as it was (its own writes roll back to a savepoint)."""


@runtime_checkable
class FinishingJobQueue(JobQueue, Protocol):
    """A queue that can write a job's final record and release its claim in one
    atomic step, when the store lives in the same database or server."""

    def finishes_with(self, store: JobStore) -> bool:
        """True when `finish` can write to `store` atomically with the release."""

    def finish(
        self, claim: Claim | BadClaim, record: Job, abandoned_before: datetime | None = None
    ) -> bool:
        """Fenced by `claim.token`: record `record` (completed or failed) in the store and
        release the claim, both or neither. With `abandoned_before`, the claim must also
        still be locked (or last renewed) before that instant, checked in the same
        atomic write: a holder that renewed since cannot be dead-lettered under its
        feet. False (nothing written) if the claim is lost or no longer abandoned."""

    def revive(self, dead: Job, fresh: Job) -> bool:
        """An operator's retry of a dead letter, as one atomic step: only while the store
        still records `dead.id` as a dead letter (status failed), put `fresh` in the
        queue (ready, or parked by its status) and record `fresh` in the store. False,
        with nothing written, when it is no longer a dead letter. A unique key of
        `fresh` is taken for it in the same step; while another job holds it, nothing
        is written and `UniqueKeyHeld` names that job."""


@runtime_checkable
class BatchingJobQueue(FinishingJobQueue, Protocol):
    """A queue that claims and finishes several jobs per round trip."""

    def dequeue_many(self, queue: str, now: datetime, limit: int) -> Sequence[Claim | BadClaim]:
        """Claim up to `limit` of the best ready jobs, in claim order, each with its own
        fresh prefetched token (`prefetch_token`) and lease; due parked jobs are
        promoted first as in `dequeue`. A re-sent call returns what its tokens hold."""

    def finish_many(self, items: Sequence[tuple[Claim, Job]]) -> Sequence[bool]:
        """`finish` for each (claim, record), each one atomic and fenced on its own."""

    def start_claim(self, claim: Claim, now: datetime) -> Claim | None:
        """Mark a prefetched claim started: swap its token for a plain one and renew its
        lease to `now`, fenced by the old token. The started claim, or None if lost."""
