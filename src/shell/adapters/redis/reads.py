"""Reads of the queue: counts per queue and priority, one job by id, every job of a
place (scan), the next parked job's due time, a limited queue's usage, and the
server's clock. None of them moves a job."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, cast
from uuid import UUID

from ....core import PRIORITY_ORDER
from ...ports import (
    FIND_MANY_BATCH,
    LimitUsage,
    Place,
    PriorityCounts,
    QueueCounts,
    QueuedJob,
)
from .arguments import EPOCH, MS, US, now_args
from .base import RedisQueueBase
from .client import text
from .replies import LOOKUP_FIELDS, queued

#: The most members a queue's scheduled or in-flight set may hold for `counts` to split
#: it by priority: it reads each member's hash, about 10 ms per 1,000 members, during
#: which Redis serves nobody else.
COUNT_SPLIT_LIMIT = 1_000

_NONE_HELD = PriorityCounts(0, 0, 0)
_SCHEDULED_RUN_US = re.compile(rb"^(\d+):")


class Reading(RedisQueueBase):
    """What the queue holds, read without moving anything."""

    def counts(self, now: datetime) -> Mapping[str, QueueCounts]:
        """Ready, scheduled and in-flight figures per known queue, from one snapshot,
        each split by priority. Ready lists are per priority; the scheduled and in-flight
        sets are per queue, so their split reads every member's hash, and is left out
        (`None` per priority) for a set above `COUNT_SPLIT_LIMIT` members."""
        out: dict[str, QueueCounts] = {}
        rows = self._run(self._counts, COUNT_SPLIT_LIMIT)
        for name, ready, scheduled, in_flight, oldest_us, lanes, parked, held, waiting in rows:
            oldest = None if oldest_us is None else EPOCH + int(float(text(oldest_us))) * US
            split = {
                p: PriorityCounts(
                    int(r),
                    None if parked is None else int(parked[i]),
                    None if held is None else int(held[i]),
                )
                for i, (p, r) in enumerate(zip(PRIORITY_ORDER, lanes, strict=True))
            }
            out[text(name)] = QueueCounts(
                ready=int(ready),
                scheduled=int(scheduled),
                in_flight=int(in_flight),
                oldest_ready_at=oldest,
                waiting=int(waiting),
                by_priority={p: c for p, c in split.items() if c != _NONE_HELD},
            )
        return dict(sorted(out.items()))

    def limit_usage(self, queue: str, now: datetime) -> LimitUsage:
        """What `queue` holds now for its limits, in one read-only script (due parked
        jobs are not promoted; the only writes are the one-time index of a queue whose
        limits were never used, and the facts of jobs placed without them)."""
        read = self._limited.read(queue, now_args(now), 1, claim=False)
        return LimitUsage(
            running=dict(read.running),
            ready=dict(read.ready),
            candidates=read.candidates,
            buckets=dict(read.buckets),
            passes=dict(read.passes),
        )

    def next_due(self, queue: str) -> datetime | None:
        """The earliest `run_at` among `queue`'s parked jobs, or None."""
        key = self.keys.scheduled(queue)
        first = self._retrying(lambda: self._client.zrange(key, 0, 0, withscores=True))
        if not first:
            return None
        member, score = cast(tuple[bytes, float], first[0])
        exact = _SCHEDULED_RUN_US.match(member)
        if exact:
            return EPOCH + int(exact[1]) * US
        return EPOCH + int(score) * MS  # written by an earlier version: ms only

    def server_time(self) -> datetime:
        """The server's clock (TIME), which every worker's clock is checked against."""
        seconds, micros = self._retrying(self._client.time)
        return EPOCH + timedelta(seconds=int(seconds), microseconds=int(micros))

    def find(self, job_id: UUID) -> QueuedJob | None:
        """The job's hash, read in one HMGET: where it is, and its claim if held."""
        key = self.keys.job(str(job_id))
        fields = self._retrying(lambda: self._client.hmget(key, LOOKUP_FIELDS))
        return queued(str(job_id), cast(list[bytes | None], fields))

    def find_many(self, job_ids: Sequence[UUID]) -> dict[UUID, QueuedJob]:
        """`find` of each id, `FIND_MANY_BATCH` hashes per pipelined round trip."""
        found: dict[UUID, QueuedJob] = {}
        ids = [str(job_id) for job_id in dict.fromkeys(job_ids)]
        for start in range(0, len(ids), FIND_MANY_BATCH):
            for entry in self._hashes(ids[start : start + FIND_MANY_BATCH], None):
                found[UUID(entry.job_id)] = entry
        return found

    def scan(
        self, queue: str | None = None, place: Place | None = None, *, batch: int = 500
    ) -> Iterator[QueuedJob]:
        """Ids from the in-flight zset, the ready lists and the scheduled zset, `batch`
        at a time, each page's hashes read in one pipelined round trip. An id whose
        hash has moved elsewhere since its structure was read is left out, and so is a
        second copy of an id in a ready list, or a copy whose job is now in another
        queue (a limited queue's lists may hold ghost copies of jobs placed again: see
        `limits`)."""
        for where in [place] if place is not None else list(Place):
            seen: set[str] = set()
            for ids in self._id_pages(queue, where, max(1, batch)):
                if where is Place.READY:
                    ids = [i for i in dict.fromkeys(ids) if i not in seen]
                    seen.update(ids)
                # A ghost copy left in this queue's list may name a job placed since
                # in another queue: the hash says where the job is.
                yield from (e for e in self._hashes(ids, where) if queue in (None, e.queue))

    def _id_pages(self, queue: str | None, place: Place, batch: int) -> Iterator[list[str]]:
        if place is Place.WAITING:
            for name in self._names(queue):
                yield from self._pages(self.keys.waiting(name), batch, sorted_set=True)
            return
        if place is not Place.READY:
            key = (
                self.keys.inflight(queue)
                if place is Place.IN_FLIGHT
                else self.keys.scheduled(queue)
            )
            yield from self._pages(key, batch, sorted_set=True)
            return
        for name in self._names(queue):
            for priority in PRIORITY_ORDER:
                yield from self._pages(self.keys.ready(name, priority), batch, sorted_set=False)

    def _names(self, queue: str | None) -> list[str]:
        """`queue`, or every known queue's name."""
        if queue is not None:
            return [queue]
        members = self._retrying(lambda: self._client.smembers(self.keys.queues()))
        return sorted(text(n) for n in members)

    def _pages(self, key: str, batch: int, *, sorted_set: bool) -> Iterator[list[str]]:
        """The ids in list or zset `key`, `batch` per read."""
        start = 0
        while True:
            page = self._range(key, start, start + batch - 1, sorted_set)
            # A scheduled member is `<run_us>:<seq>:<id>` (or a bare id, from before).
            yield [text(member).rsplit(":", 1)[-1] for member in page]
            if len(page) < batch:
                return
            start += batch

    def _range(self, key: str, first: int, last: int, sorted_set: bool) -> list[bytes]:
        read = self._client.zrange if sorted_set else self._client.lrange
        return cast(list[bytes], self._retrying(lambda: read(key, first, last)))

    def _hashes(self, ids: list[str], place: Place | None) -> list[QueuedJob]:
        """The queued jobs of `ids` (those in `place`, unless None), in one round trip."""
        if not ids:
            return []

        def read() -> list[Any]:
            with self._client.pipeline(transaction=False) as pipe:
                for job_id in ids:
                    pipe.hmget(self.keys.job(job_id), LOOKUP_FIELDS)
                return list(pipe.execute())

        found = (
            queued(job_id, fields) for job_id, fields in zip(ids, self._retrying(read), strict=True)
        )
        return [e for e in found if e is not None and (place is None or e.place is place)]
