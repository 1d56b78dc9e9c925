"""Adding work to the memory queue: upserts, and first writes that respect a known id
or a held unique key (`core.uniqueness`), all under the queue's lock."""

from __future__ import annotations

from collections.abc import Sequence

from ....core import Job
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

    def _add(self, job: Job) -> Job | None:
        """`enqueue_new` under the lock: the id first, then the unique key."""
        existing = self._stored(job.id)
        if existing is not None:
            return existing
        holder = self._lock_holder(job)
        if holder is not None:
            return holder
        self._take_lock(job)
        self._place(job)
        return None
