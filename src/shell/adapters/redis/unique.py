"""Unique jobs: `enqueue_new` writes a job only when its id is free and its unique key
is not held, deciding both in the one script that writes (see `enqueue_new.lua` and
docs/unique.md), so of any number of concurrent writers exactly one wins."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from ....core import Job
from .arguments import placement, unique_args
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
            return self._pipelined(self._enqueue_new, argvs)

        return [found(reply) for reply in self._retrying(send)]

    @staticmethod
    def _new_args(job: Job, nonce: str) -> list[object]:
        """The `enqueue_new` script's arguments after the key base: the placement, the
        nonce, then the unique key's (`unique_args`)."""
        return [*placement(job), nonce, *unique_args(job)]
