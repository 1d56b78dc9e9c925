"""Placing jobs: enqueue (an upsert by id), its batch, an operator's revive of a dead
letter, and the promotion of due parked jobs."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime

from ....core import Job
from ...codec import encode_many
from ...ports import UniqueKeyHeld
from .arguments import now_args, placement, record_facts, unique_args
from .base import RedisQueueBase
from .replies import found


class Enqueueing(RedisQueueBase):
    """Writes that place a job ready or parked, unlocked."""

    def enqueue(self, job: Job) -> None:
        """Upsert by id, unlocked: ready list, or the scheduled set when parked."""
        self._write("enqueue", self._enqueue, *placement(job), uuid.uuid4().hex)

    def enqueue_many(self, jobs: Sequence[Job]) -> None:
        """Upsert several jobs in one pipelined round trip (each its own atomic script)."""
        if not jobs:
            return
        # One nonce per item: a batch may name one id twice, and the later must win.
        nonce = uuid.uuid4().hex
        bodies = encode_many(jobs)
        argvs = [
            [self.keys.base, *placement(job, body), f"{nonce}:{n}"]
            for n, (job, body) in enumerate(zip(jobs, bodies, strict=True))
        ]

        def send() -> None:
            if self.replicas.wait.on:
                self._waited("enqueue", argvs, self._enqueue)
                return
            self._pipelined(self._enqueue, argvs)

        self._retrying(send)

    def revive(self, dead: Job, fresh: Job) -> bool:
        """Put `fresh` in the queue and record it, in one script, only while the store
        still records `dead.id` as a dead letter, taking its unique key (see
        `JobQueue.revive`)."""
        answer = self._write(
            "revive",
            self._revive,
            str(dead.id),
            *placement(fresh),
            fresh.status.value,
            fresh.tenant_id or "",
            *record_facts(fresh),
            uuid.uuid4().hex,
            *unique_args(fresh, fresh.run_at),
        )
        if isinstance(answer, list):
            holder = found(answer)
            assert holder is not None and fresh.unique is not None
            raise UniqueKeyHeld(fresh.unique.key, holder)
        return bool(answer)

    def promote_due(self, now: datetime, limit: int = 1000) -> int:
        """Move up to `limit` parked jobs due by `now` to their ready lists (one script),
        in promotion order: `run_at`, then enqueue sequence."""
        if limit <= 0:
            return 0  # ZRANGEBYSCORE reads a negative count as "no limit"
        return int(self._run(self._promote, *now_args(now), limit))
