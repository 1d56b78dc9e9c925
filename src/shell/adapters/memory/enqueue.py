"""Adding work to the memory queue: upserts, and first writes that respect a known id
or a held unique key (`core.uniqueness`), all under the queue's lock."""

from __future__ import annotations

from collections.abc import Sequence
from uuid import UUID

from ....core import Job
from ....core.uniqueness import lock_holds
from ...unique import found_in_queue
from .state import QueueState


class Enqueueing(QueueState):
    """`enqueue`, `enqueue_many`, `enqueue_new` and `enqueue_new_many`."""

    def enqueue(self, job: Job) -> None:
        with self._lock:
            self._drop(job.id)
            self._place(job)

    def enqueue_many(self, jobs: Sequence[Job]) -> None:
        with self._lock:
            for job in jobs:
                self._drop(job.id)
                self._place(job)

    def enqueue_new(self, job: Job) -> Job | None:
        with self._lock:
            return self._add(job)

    def enqueue_new_many(self, jobs: Sequence[Job]) -> list[Job | None]:
        with self._lock:
            return [self._add(job) for job in jobs]

    def _stored(self, job_id: UUID) -> Job | None:
        """The job with `job_id` as it stands, queued or recorded (caller holds the lock)."""
        queued = self._find(job_id)
        if queued is not None and queued.job is not None:
            return found_in_queue(queued.place, queued.job)
        return None if self._store is None else self._store.get(job_id)

    def _add(self, job: Job) -> Job | None:
        """`enqueue_new` under the lock: the id first, then the unique key."""
        existing = self._stored(job.id)
        if existing is not None:
            return existing
        lock = job.unique
        if lock is not None:
            held = self._unique.get(lock.key)
            if held is not None:
                holder = self._stored(held[1])
                state = None if holder is None else holder.status
                if holder is not None and lock_holds(held[0], state, job.created_at):
                    return holder
            self._unique[lock.key] = (lock, job.id)
        self._place(job)
        return None
