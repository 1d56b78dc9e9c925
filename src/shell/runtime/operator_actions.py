"""An operator's repairs: cancel, retry a dead letter, purge, prune.

`OperatorMethods` are `Runtime`'s methods for them (the class is mixed into it);
each hands the call to an `OperatorActions` over the runtime's parts.

Each is a decision carried out by the executor, the one place writes happen:
a cancel is the core's `decide_cancel` (`conveyor.shell.cancellation`), a retry
of a dead letter is `decide_revive`, a purge or a prune is a store write the
executor makes (a prune by the core's `PruneOrder`). None writes to an adapter
itself. Every write is guarded, so two operators, or an operator and a worker,
never both act on one job.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING
from uuid import UUID

import attrs

from ...core import (
    CancelCounts,
    CancelResult,
    Job,
    JobStatus,
    RetentionPolicy,
    ValidationError,
    check_name,
    decide_revive,
    prune_order,
)
from ...core.field_checks import MAX_DURATION_MS
from ..cancellation import cancel_job, cancel_many
from ..executor import Executor
from ..ports import Clock, JobQueue, JobStore, UniqueKeyHeld
from ..retention import prune_all
from .reads import as_job_id

if TYPE_CHECKING:
    from ..config import Config
    from ..hooks import Hooks


@attrs.frozen(slots=True)
class OperatorActions:
    """The repairs, over one queue and store through `executor`; `on_cancelled` hears
    of each cancelled record once it is written (the `cancelled` hook)."""

    queue: JobQueue
    store: JobStore
    executor: Executor
    clock: Clock
    on_cancelled: Callable[[Job], object] | None = None

    def cancel(self, job_id: UUID | str) -> CancelResult:
        """Cancel one job: at once when queued, by a request when a claim holds it."""
        return cancel_job(
            self.queue,
            self.store,
            self.executor,
            as_job_id(job_id),
            self.clock.now(),
            self.on_cancelled,
        )

    def cancel_many(
        self, *, queue: str | None, job_type: str | None, dry_run: bool = False
    ) -> CancelCounts:
        """Cancel every queued and running job of `queue` and/or `job_type` (at least one
        must be given); with `dry_run`, count what would be done."""
        if queue is None and job_type is None:
            raise ValidationError.of("queue", "give a queue, a job type or both")
        named = (("queue", queue), ("job_type", job_type))
        problems = [check_name(field, value) for field, value in named if value is not None]
        if any(problems):
            raise ValidationError([p for p in problems if p is not None])
        return cancel_many(
            self.queue,
            self.store,
            self.executor,
            self.clock.now(),
            queue_name=queue,
            job_type=job_type,
            dry_run=dry_run,
            on_cancelled=self.on_cancelled,
        )

    def retry_dead(self, job_id: UUID | str) -> Job:
        """Queue a dead letter afresh, only while it is still a dead letter."""
        job = self.store.get(as_job_id(job_id))
        decision = None if job is None else decide_revive(job, self.clock.now())
        try:
            revived = decision is not None and self.executor.carry_out(None, decision)
        except UniqueKeyHeld as held:
            # Two live jobs under one key is what a unique key rules out.
            holder = f"job {held.holder.id} ({held.holder.status.value})"
            raise ValidationError.of(
                "job_id",
                f"{job_id} was not retried: its unique key {held.key!r} is held by {holder}; "
                "retry it once that job has ended, or cancel that job first",
            ) from held
        if decision is not None and revived:
            return decision.job
        now = self.store.get(as_job_id(job_id))
        if decision is not None and now is not None and now.status is JobStatus.FAILED:
            raise RuntimeError(f"could not revive {job_id}: the store failed (see the log)")
        raise ValidationError.of("job_id", f"{job_id} is not a dead letter")

    def purge_dead(self, job_id: UUID | str | None = None) -> int:
        """Delete one dead letter, or every one when `job_id` is None; how many went."""
        return self.executor.purge_dead(None if job_id is None else as_job_id(job_id))

    def prune(
        self,
        retention: RetentionPolicy,
        *,
        older_than_ms: int | None = None,
        dry_run: bool = False,
    ) -> int:
        """Delete every finished record past `retention` (or `older_than_ms`, which
        replaces both of its ages), batch by batch; with `dry_run`, only count them."""
        if older_than_ms is not None:
            _check_age(older_than_ms)
        order = prune_order(retention, self.clock.now(), older_than_ms=older_than_ms)
        return self.store.count_prunable(order) if dry_run else prune_all(self.executor, order)


def _check_age(older_than_ms: object) -> None:
    field = "older_than_ms"
    if isinstance(older_than_ms, bool) or not isinstance(older_than_ms, int):
        reason = f"must be a whole number of milliseconds, got {older_than_ms!r}"
        raise ValidationError.of(field, reason)
    if older_than_ms < 0:
        raise ValidationError.of(field, f"must be >= 0, got {older_than_ms}")
    if older_than_ms > MAX_DURATION_MS:
        longest = f"{MAX_DURATION_MS} (100 years)"
        raise ValidationError.of(field, f"must be at most {longest}, got {older_than_ms}")


class OperatorMethods:
    """`Runtime`'s operator actions (mixed into it): each builds `OperatorActions`
    over the runtime's parts as they are at the call."""

    config: Config
    queue: JobQueue
    store: JobStore
    executor: Executor
    clock: Clock
    hooks: Hooks

    def _operator(self) -> OperatorActions:
        return OperatorActions(
            self.queue, self.store, self.executor, self.clock, self.hooks.cancelled
        )

    def cancel(self, job_id: UUID | str) -> CancelResult:
        """Cancel a job. Queued (`pending`, `scheduled`, `retrying`): it leaves the queue
        and is recorded `cancelled` in one atomic step (`CancelResult.CANCELLED`).
        Running: a cancel request is left for its worker (`REQUESTED`); the handler
        can see it through its context, and whatever it returns the job is recorded
        `cancelled`, never completed and never retried. A job already finished is left
        as it is (`FINISHED`); an id nobody knows gives `NOT_FOUND`.

        >>> runtime.cancel(job.id)  # doctest: +SKIP
        <CancelResult.CANCELLED: 'cancelled'>
        """
        return self._operator().cancel(job_id)

    def cancel_many(
        self, *, queue: str | None = None, job_type: str | None = None, dry_run: bool = False
    ) -> CancelCounts:
        """Cancel every queued and running job of `queue` and/or `job_type` (at least one
        must be given), each as `cancel` does. Returns how many were cancelled and how
        many running ones were asked to stop; with `dry_run`, how many would be."""
        return self._operator().cancel_many(queue=queue, job_type=job_type, dry_run=dry_run)

    def retry_dead(self, job_id: UUID | str) -> Job:
        """Give a dead letter a fresh start: queued and recorded as pending in one atomic
        step, only while it is still a dead letter (two operators, or an operator and a
        worker, cannot both act on it)."""
        return self._operator().retry_dead(job_id)

    def purge_dead(self, job_id: UUID | str | None = None) -> int:
        """Delete one dead letter, or every dead letter when `job_id` is None; returns
        how many were deleted. To delete by age instead, see `prune`."""
        return self._operator().purge_dead(job_id)

    def prune(self, *, older_than_ms: int | None = None, dry_run: bool = False) -> int:
        """Delete every finished record past the configured retention (batch by batch,
        each one cheap), or with `dry_run` only count them. `older_than_ms` replaces
        both configured ages. Returns how many records went (or would go)."""
        retention = self.config.retention
        return self._operator().prune(retention, older_than_ms=older_than_ms, dry_run=dry_run)
