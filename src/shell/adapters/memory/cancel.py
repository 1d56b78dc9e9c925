"""Operator actions on the memory queue: cancel a queued job, request the cancel of a
held one and record it cancelled, and revive a dead letter. Each queue move and its
record are one step under the queue's lock."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from ....core import Job, JobStatus
from ...ports import BadClaim, Claim, UniqueKeyHeld
from .state import QueueState


class Cancelling(QueueState):
    """`cancel`, `request_cancel`, `cancel_requested`, `finish_cancelled` and `revive`."""

    def cancel(self, record: Job) -> bool:
        store = self._store_for("cancel into")
        with self._lock:
            if record.id in self._in_flight or not (
                record.id in self._ready_ids
                or record.id in self._scheduled
                or record.id in self._waiting
            ):
                return False
            self._drop(record.id)
            store.record(record)
            self._after_end(record)
            return True

    def request_cancel(self, job_id: UUID, now: datetime) -> bool:
        with self._lock:
            if job_id not in self._in_flight:
                return False
            self._cancel_requests.setdefault(job_id, now)
            return True

    def cancel_requested(self, job_id: UUID) -> bool:
        with self._lock:
            return job_id in self._cancel_requests

    def finish_cancelled(
        self, claim: Claim | BadClaim, record: Job, abandoned_before: datetime | None = None
    ) -> bool:
        if isinstance(claim, BadClaim):
            return False  # this backend stores Job values; nothing here fails to decode
        store = self._store_for("finish into")
        with self._lock:
            entry = self._held(claim)
            if entry is None:
                return False
            if abandoned_before is not None and not entry.locked_at < abandoned_before:
                return False
            store.record(record)
            del self._in_flight[claim.job.id]
            self._cancel_requests.pop(claim.job.id, None)
            self._after_end(record)
            return True

    def revive(self, dead: Job, fresh: Job) -> bool:
        store = self._store_for("revive into")
        with self._lock:
            current = store.get(dead.id)
            if current is None or current.status is not JobStatus.FAILED:
                return False
            holder = self._lock_holder(fresh, fresh.run_at)
            if holder is not None and holder.id != fresh.id and fresh.unique is not None:
                raise UniqueKeyHeld(fresh.unique.key, holder)
            self._take_lock(fresh)
            self._drop(fresh.id)
            self._place(fresh)
            store.record(fresh)
            return True
