"""The memory backend's `JobStore`: finished records and dead letters, newest first."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime
from uuid import UUID

from ....core import Job, JobStatus, PruneOrder
from ...ports import FinishedPerMinute, HistoryFilter
from ..finish_signals import FinishSignals, FinishWatch


class MemoryJobStore:
    """A `JobStore` in this process's memory."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: dict[UUID, tuple[int, Job]] = {}
        self._seq = 0
        #: The lock of the queue built with this store, if any (it sets this).
        self._queue_lock: threading.Lock | None = None
        #: Whether that queue still needs a job's record (asked under its lock): it holds
        #: the job, or a job it holds depends on it.
        self._queue_holds: Callable[[UUID], bool] | None = None
        #: That queue's bookkeeping of workflows, told of deleted records (under its lock).
        self._let_go: Callable[[Sequence[UUID], Callable[[UUID], bool]], None] | None = None
        #: The callers waiting for a job's outcome (`Runtime.result`).
        self._finishes = FinishSignals()
        #: Tombstones: the ids of pruned records, and when they were pruned.
        self._pruned: dict[UUID, datetime] = {}

    def _attach(
        self,
        lock: threading.Lock,
        holds: Callable[[UUID], bool],
        let_go: Callable[[Sequence[UUID], Callable[[UUID], bool]], None],
    ) -> None:
        """Work with the queue whose lock is `lock`: a prune spares what it `holds`,
        and each deletion tells it which records went (`let_go`)."""
        self._queue_lock, self._queue_holds, self._let_go = lock, holds, let_go

    def _deleted(self, job_ids: Sequence[UUID]) -> None:
        """Tell the queue (caller holds both locks) which records went."""
        if self._let_go is not None and job_ids:
            self._let_go(job_ids, self._jobs.__contains__)

    def record(self, job: Job) -> None:
        with self._lock:
            self._seq += 1
            self._jobs[job.id] = (self._seq, job)
            self._pruned.pop(job.id, None)
        self._finishes.announce(job.id)

    def watch_finished(self, job_id: UUID) -> FinishWatch:
        """A watch woken when a record of `job_id` is written (`FinishWatchingStore`)."""
        return self._finishes.watch(job_id)

    def get(self, job_id: UUID) -> Job | None:
        with self._lock:
            entry = self._jobs.get(job_id)
            return entry[1] if entry else None

    def get_many(self, job_ids: Sequence[UUID]) -> Mapping[UUID, Job]:
        with self._lock:
            found = ((job_id, self._jobs.get(job_id)) for job_id in job_ids)
            return {job_id: entry[1] for job_id, entry in found if entry is not None}

    def list_history(
        self,
        *,
        status: JobStatus | None = None,
        tenant_id: str | None = None,
        limit: int = 100,
    ) -> Sequence[Job]:
        with self._lock:
            rows = sorted(self._jobs.values(), key=lambda e: e[0], reverse=True)
            return [
                job
                for _, job in rows
                if (status is None or job.status is status)
                and (tenant_id is None or job.tenant_id == tenant_id)
            ][:limit]

    def list_dead(self, *, tenant_id: str | None = None, limit: int = 100) -> Sequence[Job]:
        return self.list_history(status=JobStatus.FAILED, tenant_id=tenant_id, limit=limit)

    def _matching(self, where: HistoryFilter) -> list[Job]:
        with self._lock:
            rows = sorted(self._jobs.values(), key=lambda e: e[0], reverse=True)
        return [
            job
            for _, job in rows
            if (where.status is None or job.status is where.status)
            and (where.queue is None or job.queue == where.queue)
            and (where.job_type is None or job.job_type == where.job_type)
            and (where.tenant_id is None or job.tenant_id == where.tenant_id)
        ]

    def find_history(
        self, where: HistoryFilter, *, offset: int = 0, limit: int = 100
    ) -> Sequence[Job]:
        """Records matching `where`, newest first, from the `offset`-th."""
        return self._matching(where)[max(offset, 0) : max(offset, 0) + max(limit, 0)]

    def count_history(self, where: HistoryFilter) -> int:
        """How many records match `where`."""
        return len(self._matching(where))

    def finished_per_minute(self, start: datetime, minutes: int) -> FinishedPerMinute:
        """Completed and failed records per minute of `finished_at` from `start`."""
        start = start.replace(second=0, microsecond=0)
        counts = {JobStatus.COMPLETED: [0] * minutes, JobStatus.FAILED: [0] * minutes}
        with self._lock:
            jobs = [job for _, job in self._jobs.values()]
        for job in jobs:
            bucket = counts.get(job.status)
            if bucket is None or job.finished_at is None or job.finished_at < start:
                continue
            minute = int((job.finished_at - start).total_seconds() // 60)
            if minute < minutes:
                bucket[minute] += 1
        return FinishedPerMinute(
            start, tuple(counts[JobStatus.COMPLETED]), tuple(counts[JobStatus.FAILED])
        )

    def count_dead(self, *, tenant_id: str | None = None) -> Mapping[str, int]:
        out: dict[str, int] = {}
        for job in self.list_dead(tenant_id=tenant_id, limit=len(self._jobs) + 1):
            out[job.queue] = out.get(job.queue, 0) + 1
        return out

    def purge_dead(self, job_id: UUID | None = None) -> int:
        with self._locked():
            keeps = self._queue_holds
            doomed = [
                i
                for i, (_, job) in self._jobs.items()
                if job.status is JobStatus.FAILED
                and (job_id is None or i == job_id)
                and not (keeps is not None and keeps(i))
            ]
            for i in doomed:
                del self._jobs[i]
            self._deleted(doomed)
            return len(doomed)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        # The queue's lock first, as in `MemoryJobQueue.finish`: one order, no deadlock.
        queue_lock = self._queue_lock
        with queue_lock if queue_lock is not None else contextlib.nullcontext(), self._lock:
            yield

    def _prunable(self, order: PruneOrder) -> list[UUID]:
        """The ids `order` lets go, oldest recorded first (caller holds the locks)."""
        rows = sorted(self._jobs.values(), key=lambda e: e[0])
        holds = self._queue_holds
        out: list[UUID] = []
        for status, before, keep in order.rules:
            jobs = [job for _, job in rows if job.status is status]
            excess = 0 if keep is None else max(0, len(jobs) - keep)
            for n, job in enumerate(jobs):
                finished = job.finished_at
                old = before is not None and finished is not None and finished < before
                busy = holds is not None and holds(job.id)
                if (n < excess or old) and not busy:
                    out.append(job.id)
        return out

    def prune(self, order: PruneOrder) -> int:
        if order.is_empty or order.limit <= 0:
            return 0
        with self._locked():
            doomed = self._prunable(order)[: order.limit]
            for i in doomed:
                del self._jobs[i]
            self._deleted(doomed)
            if order.pruned_at is not None and order.forget_before is not None:
                forget = order.forget_before
                for i in [i for i, at in self._pruned.items() if at < forget]:
                    del self._pruned[i]
                self._pruned.update(dict.fromkeys(doomed, order.pruned_at))
            return len(doomed)

    def pruned_at(self, job_id: UUID) -> datetime | None:
        """When retention pruned `job_id`'s record (`PruneRememberingStore`)."""
        with self._lock:
            return self._pruned.get(job_id)

    def count_prunable(self, order: PruneOrder) -> int:
        if order.is_empty:
            return 0
        with self._locked():
            return len(self._prunable(order))

    def close(self) -> None:
        """Nothing to release."""
