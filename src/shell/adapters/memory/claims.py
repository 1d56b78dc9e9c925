"""Claiming from the memory queue: the best ready job, a prefetched batch, promotion
of due parked jobs, and waiting for work, all under the queue's lock."""

from __future__ import annotations

from datetime import datetime

from ....core import PRIORITY_ORDER
from ...ports import BadClaim, Claim, prefetch_token
from ...tokens import fresh_token
from .state import PROMOTE_PER_CLAIM, InFlight, QueueState


class Claiming(QueueState):
    """`dequeue`, `dequeue_many`, `promote_due`, `next_due` and `wait_for_work`."""

    def dequeue(self, queue: str, now: datetime) -> Claim | None:
        with self._lock:
            self._promote(now, queue, PROMOTE_PER_CLAIM)
            return self._take(queue, now, fresh_token())

    def _take(self, queue: str, now: datetime, token: str) -> Claim | None:
        """Claim the best ready job of `queue` under `token` (caller holds the lock)."""
        lanes = self._ready.get(queue)
        if not lanes:
            return None
        for priority in PRIORITY_ORDER:
            lane = lanes[priority]
            if lane:
                _, job = lane.popleft()
                del self._ready_ids[job.id]
                self._in_flight[job.id] = InFlight(job, token, now)
                return Claim(job=job, token=token, queue=queue, locked_at=now)
        return None

    def dequeue_many(self, queue: str, now: datetime, limit: int) -> list[Claim | BadClaim]:
        claims: list[Claim | BadClaim] = []
        with self._lock:
            self._promote(now, queue, PROMOTE_PER_CLAIM)
            for _ in range(limit):
                claim = self._take(queue, now, prefetch_token(fresh_token()))
                if claim is None:
                    break
                claims.append(claim)
        return claims

    def promote_due(self, now: datetime, limit: int = 1000) -> int:
        with self._lock:
            moved = self._promote(now, None, limit)
            if moved:
                self._ready_signal.notify_all()
            return moved

    def next_due(self, queue: str) -> datetime | None:
        with self._lock:
            due = [job.run_at for _, job in self._scheduled.values() if job.queue == queue]
            return min(due, default=None)

    def wait_for_work(self, queue: str, timeout_s: float) -> bool:
        """Block until a job becomes ready on `queue` or `timeout_s` passes."""
        with self._lock:
            lanes = self._ready.get(queue)
            if lanes and any(lanes.values()):
                return True
            return self._ready_signal.wait(timeout_s)

    def end_waits(self) -> None:
        """End every `wait_for_work` now waiting on this queue (each returns True)."""
        with self._lock:
            self._ready_signal.notify_all()

    def server_time(self) -> datetime | None:
        """None: this process's clock is the only one."""
        return None
