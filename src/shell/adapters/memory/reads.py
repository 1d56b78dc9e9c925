"""Reads of the memory queue for status, lookup and listings: counts per queue and
priority, one job by id, and a scan of a place in the order `JobQueue.scan` promises.
Each is one snapshot under the queue's lock."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from uuid import UUID

from ....core import PRIORITY_ORDER, promotion_key
from ...ports import Place, PriorityCounts, QueueCounts, QueuedJob
from .state import QueueState, claimed, us


class Reads(QueueState):
    """`counts`, `find` and `scan`."""

    def counts(self, now: datetime) -> Mapping[str, QueueCounts]:
        with self._lock:
            parked = [job for _, job in self._scheduled.values()]
            names = set(self._ready) | {j.queue for j in parked}
            names |= {e.job.queue for e in self._in_flight.values()}
            names |= {j.queue for j in self._waiting.values()}
            running = [e.job for e in self._in_flight.values()]
            out: dict[str, QueueCounts] = {}
            for name in sorted(names):
                ready = [job for lane in self._ready.get(name, {}).values() for _, job in lane]
                mine = [j for j in parked if j.queue == name]
                held = [j for j in running if j.queue == name]
                by_priority = {
                    p: PriorityCounts(
                        sum(1 for j in ready if j.priority is p),
                        sum(1 for j in mine if j.priority is p),
                        sum(1 for j in held if j.priority is p),
                    )
                    for p in PRIORITY_ORDER
                    if any(j.priority is p for j in (*ready, *mine, *held))
                }
                out[name] = QueueCounts(
                    ready=len(ready),
                    scheduled=len(mine),
                    in_flight=len(held),
                    oldest_ready_at=min((j.run_at for j in ready), default=None),
                    by_priority=by_priority,
                    waiting=sum(1 for j in self._waiting.values() if j.queue == name),
                )
            return out

    def find(self, job_id: UUID) -> QueuedJob | None:
        with self._lock:
            return self._find(job_id)

    def find_many(self, job_ids: Sequence[UUID]) -> dict[UUID, QueuedJob]:
        """`find` of each id, under one hold of the lock."""
        with self._lock:
            found = {job_id: self._find(job_id) for job_id in job_ids}
        return {job_id: entry for job_id, entry in found.items() if entry is not None}

    def scan(
        self, queue: str | None = None, place: Place | None = None, *, batch: int = 500
    ) -> Iterator[QueuedJob]:
        """One snapshot under the lock (`batch` is moot in memory), then yielded."""
        with self._lock:
            found: list[QueuedJob] = []
            for where in [place] if place is not None else list(Place):
                found += self._snapshot(queue, where)
        yield from found

    def _snapshot(self, queue: str | None, place: Place) -> list[QueuedJob]:
        """`place`'s jobs (of `queue`) in the order `scan` promises (caller holds the lock)."""
        if place is Place.IN_FLIGHT:
            held = sorted(self._in_flight.values(), key=lambda e: e.locked_at)
            return [
                QueuedJob(str(e.job.id), e.job.queue, place, e.job, None, *claimed(e))
                for e in held
                if queue is None or e.job.queue == queue
            ]
        if place is Place.READY:
            names = sorted(self._ready) if queue is None else [queue]
            return [
                QueuedJob(str(job.id), name, place, job)
                for name in names
                for priority in PRIORITY_ORDER
                for _, job in self._ready.get(name, {}).get(priority, ())
            ]
        if place is Place.WAITING:
            return [
                QueuedJob(str(job.id), job.queue, place, job)
                for job in self._waiting.values()
                if queue is None or job.queue == queue
            ]
        parked = sorted(
            (
                (promotion_key(us(job.run_at), seq), job)
                for seq, job in self._scheduled.values()
                if queue is None or job.queue == queue
            ),
            key=lambda entry: entry[0],
        )
        return [QueuedJob(str(job.id), job.queue, place, job) for _, job in parked]
