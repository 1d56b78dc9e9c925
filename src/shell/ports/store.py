"""The store port: outcome history and the dead letters, apart from work still to do."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Protocol, runtime_checkable
from uuid import UUID

from ...core import Job, JobStatus, PruneOrder
from .reads import FinishedPerMinute, HistoryFilter


@runtime_checkable
class JobStore(Protocol):
    """Outcome history and the dead letters, kept apart from work still to do."""

    def record(self, job: Job) -> None:
        """Upsert a job's latest record (completed, failed = dead letter, revived)."""

    def get(self, job_id: UUID) -> Job | None:
        """The recorded job, or None."""

    def list_dead(self, *, tenant_id: str | None = None, limit: int = 100) -> Sequence[Job]:
        """Dead letters, newest first; only `tenant_id`'s when given."""

    def list_history(
        self,
        *,
        status: JobStatus | None = None,
        tenant_id: str | None = None,
        limit: int = 100,
    ) -> Sequence[Job]:
        """Recorded jobs, newest first, filtered by status and tenant."""

    def count_dead(self, *, tenant_id: str | None = None) -> Mapping[str, int]:
        """Dead letters per queue name."""

    def find_history(
        self, where: HistoryFilter, *, offset: int = 0, limit: int = 100
    ) -> Sequence[Job]:
        """Up to `limit` records matching `where`, newest first, skipping the first
        `offset`: read through the store's indexes, not filtered after reading. Redis
        keeps one index per status and queue, type or tenant: two or more of those
        filters together are matched among the newest `HISTORY_FILTER_SCAN` entries
        of the smallest index that applies."""

    def count_history(self, where: HistoryFilter) -> int:
        """How many records match `where` (bounded on Redis as `find_history` is)."""

    def finished_per_minute(self, start: datetime, minutes: int) -> FinishedPerMinute:
        """Completed and failed records per minute of `finished_at`, for the `minutes`
        whole minutes from `start` (which is cut to its minute)."""

    def purge_dead(self, job_id: UUID | None = None) -> int:
        """Delete one dead letter, or all of them. Returns how many went."""

    def prune(self, order: PruneOrder) -> int:
        """Delete up to `order.limit` finished records the order lets go, oldest first,
        each only while (checked in the same atomic write) it is still completed or
        failed, still past its cutoff or count, and its job is not queued or in flight.
        Safe to race: a record two pruners pick is deleted once. Returns how many went."""

    def count_prunable(self, order: PruneOrder) -> int:
        """How many records `prune` would delete if called until it returns 0
        (`order.limit` aside). Read-only: for `conveyor prune --dry-run`."""

    def close(self) -> None:
        """Release connections."""


@runtime_checkable
class ManyReadingStore(JobStore, Protocol):
    """A store that reads many records in one round trip (a fan-in's inputs, a
    workflow's members); `records_of` falls back to one `get` per id without it."""

    def get_many(self, job_ids: Sequence[UUID]) -> Mapping[UUID, Job]:
        """The records held among `job_ids`, by id; an id without one (never recorded,
        pruned, or a record that no longer decodes) is absent."""
        ...


def records_of(store: JobStore, job_ids: Sequence[UUID]) -> dict[UUID, Job]:
    """The records `store` holds among `job_ids`, in one read where it can."""
    if isinstance(store, ManyReadingStore):
        return dict(store.get_many(job_ids))
    found = {job_id: store.get(job_id) for job_id in dict.fromkeys(job_ids)}
    return {job_id: job for job_id, job in found.items() if job is not None}


@runtime_checkable
class PruneRememberingStore(JobStore, Protocol):
    """A store whose `prune` leaves a tombstone per record it deletes, when the order
    asks for them (`PruneOrder.pruned_at`), each kept `PruneOrder.remember_ms`: so
    "pruned" and "never enqueued here" can be told apart for that long."""

    def pruned_at(self, job_id: UUID) -> datetime | None:
        """When retention pruned `job_id`'s record, while its tombstone is kept; None
        when there is none (never pruned, or pruned longer ago)."""
        ...
