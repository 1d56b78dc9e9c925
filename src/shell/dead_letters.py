"""Dead letters in bulk: count, retry or purge every one that matches a filter.

An operator after an outage wants every dead letter of one queue or job type back
in its queue, not one command per id. These walk the matching dead letters page by
page, through the store's own indexes (`JobStore.find_history`), and act on each
as the single-letter actions do: a retry is `Runtime.retry_dead` (queued and
recorded pending in one step, only while it is still dead), a purge is
`Runtime.purge_dead`. A letter retried or purged by someone else meanwhile is
skipped, never acted on twice.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol
from uuid import UUID

from ..core import Job, JobStatus, ValidationError
from .ports import HistoryFilter, JobStore, UniqueKeyHeld

log = logging.getLogger("conveyor.dead")

#: Dead letters read per page of a bulk action.
PAGE = 500


class DeadLetterActions(Protocol):
    """What the bulk actions act through: a `Runtime` (its store, `retry_dead` and
    `purge_dead`)."""

    @property
    def store(self) -> JobStore: ...

    def retry_dead(self, job_id: UUID) -> Job: ...

    def purge_dead(self, job_id: UUID | None = None) -> int: ...


def dead_filter(
    *, queue: str | None = None, job_type: str | None = None, tenant_id: str | None = None
) -> HistoryFilter:
    """The dead letters of `queue`, `job_type` and `tenant_id` (None: any)."""
    return HistoryFilter(JobStatus.FAILED, queue, job_type, tenant_id)


def is_everything(where: HistoryFilter) -> bool:
    """True for the filter that matches every dead letter."""
    return where == dead_filter()


def count_dead(store: JobStore, where: HistoryFilter) -> int:
    """How many dead letters match `where`. Without a job type the per-queue counts
    every backend keeps answer it; with one, the store counts along its index."""
    if where.job_type is None:
        per_queue = store.count_dead(tenant_id=where.tenant_id)
        return sum(per_queue.values()) if where.queue is None else per_queue.get(where.queue, 0)
    return store.count_history(where)


def retry_matching(
    runtime: DeadLetterActions, where: HistoryFilter, refused: list[UUID] | None = None
) -> int:
    """Re-enqueue every dead letter matching `where`, retries reset; returns how many.
    A letter refused because its unique key is held is logged, and added to `refused`."""

    def retry(job_id: UUID) -> int:
        try:
            runtime.retry_dead(job_id)
        except ValidationError as exc:
            if isinstance(exc.__cause__, UniqueKeyHeld):
                log.warning("dead letter %s", exc.errors[0].reason)
                if refused is not None:
                    refused.append(job_id)
            return 0  # else no longer a dead letter: retried or purged by someone else
        return 1

    return _each(runtime.store, where, retry)


def purge_matching(runtime: DeadLetterActions, where: HistoryFilter) -> int:
    """Delete every dead letter matching `where`; returns how many went."""
    if is_everything(where):
        return runtime.purge_dead(None)  # one statement, however many there are
    return _each(runtime.store, where, runtime.purge_dead)


def _each(store: JobStore, where: HistoryFilter, act: Callable[[UUID], int]) -> int:
    """`act` on each dead letter matching `where`, newest first, each once; the sum of
    what it returned (how many it acted on).

    A letter acted on leaves the listing, so each page is read from the top again
    (on Redis a filtered read looks only at the newest entries of an index, so a
    deep offset could miss older letters). Letters left in place (someone else's,
    or an action that did nothing) are skipped by the next reads, and a page with
    no letter not seen yet ends the walk."""
    seen: set[UUID] = set()
    left = 0  # letters that may still be listed: read past them
    done = 0
    while True:
        page = store.find_history(where, limit=PAGE + left)
        fresh = [job.id for job in page if job.id not in seen]
        if not fresh:
            return done
        for job_id in fresh:
            seen.add(job_id)
            acted = act(job_id)
            done += acted
            left += 0 if acted else 1
