"""Unique jobs: `enqueue_new` writes a job only when its id is free and its unique key
is not held, deciding both in the one script that writes (see `enqueue_new.lua` and
docs/unique.md), so of any number of concurrent writers exactly one wins."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from ....core import Job
from ....core.uniqueness import state_names
from .arguments import ms, ms_ceil, placement, us_digits
from .base import RedisQueueBase
from .replies import found


class UniqueEnqueueing(RedisQueueBase):
    """`enqueue_new` and its batch."""

    def enqueue_new(self, job: Job) -> Job | None:
        """Write `job` unless its id is queued or recorded (in the store under this
        prefix), or its unique key is held: one script, so one writer of any number.
        The job already there, or None when written."""
        return found(
            self._write("enqueue", self._enqueue_new, *self._new_args(job, uuid.uuid4().hex))
        )

    def enqueue_new_many(self, jobs: Sequence[Job]) -> list[Job | None]:
        """`enqueue_new` for each job in one pipelined round trip (each its own script,
        run in list order)."""
        if not jobs:
            return []
        nonce = uuid.uuid4().hex
        argvs = [
            [self.keys.base, *self._new_args(job, f"{nonce}:{n}")] for n, job in enumerate(jobs)
        ]

        def send() -> list[Any]:
            if self.replicas.wait.on:
                return self._waited("enqueue", argvs, self._enqueue_new)
            with self._client.pipeline(transaction=False) as pipe:
                for argv in argvs:
                    self._enqueue_new(keys=self._anchor, args=argv, client=pipe)
                return list(pipe.execute())

        return [found(reply) for reply in self._retrying(send)]

    @staticmethod
    def _new_args(job: Job, nonce: str) -> list[object]:
        """The `enqueue_new` script's arguments after the key base: the placement, the
        nonce, then the unique key, its states, its window's end, now (the job's
        creation) and the key's time to live."""
        lock = job.unique
        key = states = expires = ttl = ""
        if lock is not None:
            key, states = lock.key, state_names(lock)
            if lock.expires_at is not None:
                expires = us_digits(lock.expires_at)
                # Only for Redis to forget the key: the verdict reads `expires`.
                ttl = str(max(1, ms_ceil(lock.expires_at) - ms(job.created_at)) + 1000)
        return [*placement(job), nonce, key, states, expires, us_digits(job.created_at), ttl]
