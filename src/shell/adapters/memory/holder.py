"""The writes of a claim's holder, and of the lease keeper on its behalf: ack, renew,
hand back, start a prefetched claim, finish into the store, and reclaim.

Each is fenced by the claim's token under the queue's lock: a write by a claim that
no longer holds its job changes nothing and answers False (or None). A job whose
cancel was requested refuses every outcome but its cancelled record (`cancel`).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import attrs

from ....core import Job
from ...ports import BadClaim, Claim
from ...tokens import fresh_token
from .state import QueueState


class HolderWrites(QueueState):
    """`ack`, `extend`, `replace`, `start_claim`, `finish`, `finish_many`, `abandoned`
    and `reclaim`."""

    def ack(self, claim: Claim | BadClaim) -> bool:
        if isinstance(claim, BadClaim):
            return False  # this backend stores Job values; nothing here fails to decode
        with self._lock:
            if self._held(claim) is None:
                return False
            del self._in_flight[claim.job.id]
            return True

    def extend(self, claim: Claim | BadClaim, now: datetime) -> bool:
        if isinstance(claim, BadClaim):
            return False
        with self._lock:
            entry = self._held(claim)
            if entry is None:
                return False
            entry.locked_at = now
            return True

    def replace(self, claim: Claim, job: Job) -> bool:
        with self._lock:
            if self._held(claim) is None or claim.job.id in self._cancel_requests:
                return False
            del self._in_flight[claim.job.id]
            self._place(job)
            return True

    def start_claim(self, claim: Claim, now: datetime) -> Claim | None:
        with self._lock:
            entry = self._held(claim)
            if entry is None:
                return None
            entry.token, entry.locked_at = fresh_token(), now
            return attrs.evolve(claim, token=entry.token, locked_at=now)

    def finishes_with(self, store: object) -> bool:
        """True for the store this queue was built with: in one process, holding the
        queue's lock makes record-and-release one step."""
        return store is not None and store is self._store

    def finish(
        self, claim: Claim | BadClaim, record: Job, abandoned_before: datetime | None = None
    ) -> bool:
        if isinstance(claim, BadClaim):
            return False  # this backend stores Job values; nothing here fails to decode
        store = self._store_for("finish into")
        with self._lock:
            entry = self._held(claim)
            if entry is None or claim.job.id in self._cancel_requests:
                return False
            if abandoned_before is not None and not entry.locked_at < abandoned_before:
                return False  # renewed since the lease keeper looked: still live
            store.record(record)
            del self._in_flight[claim.job.id]
            self._after_end(record)
            return True

    def finish_many(self, items: Sequence[tuple[Claim, Job]]) -> list[bool]:
        store = self._store_for("finish into")
        done = []
        with self._lock:
            for claim, record in items:
                held = self._held(claim) is not None and claim.job.id not in self._cancel_requests
                if held:
                    store.record(record)
                    del self._in_flight[claim.job.id]
                    self._after_end(record)
                done.append(held)
        return done

    def abandoned(self, cutoff: datetime, limit: int = 100) -> Sequence[Claim]:
        with self._lock:
            stale = [e for e in self._in_flight.values() if e.locked_at < cutoff]
            return [Claim(e.job, e.token, e.job.queue, e.locked_at) for e in stale[:limit]]

    def reclaim(self, claim: Claim, job: Job, cutoff: datetime) -> bool:
        with self._lock:
            entry = self._held(claim)
            if entry is None or not entry.locked_at < cutoff:
                return False
            if claim.job.id in self._cancel_requests:
                return False
            del self._in_flight[claim.job.id]
            self._place(job)
            return True
