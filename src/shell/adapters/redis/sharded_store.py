"""The store of a sharded deployment: one `RedisJobStore` per shard, each beside its
shard's queue (a finish writes the record and releases the claim in one script, so a
job's record lives in its queue's shard).

A record is written to its queue's shard; a read by id asks each shard in turn; a
listing reads each shard's newest and merges them newest first (by when the job
finished, else started, else was made: each shard keeps its own recording order,
and no clock is shared between shards); counts and prunes add up each shard's.
"""

from __future__ import annotations

import heapq
import itertools
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar
from uuid import UUID

import attrs

from ....core import Job, JobStatus, PruneOrder
from ....core.shards import ShardMap
from ...ports import FinishedPerMinute, HistoryFilter
from ..finish_signals import FinishWatch
from .finishes import FinishListener
from .store import RedisJobStore

#: Before every time a record or a queued job holds (the key of one with none).
EARLIEST = datetime.min.replace(tzinfo=UTC)

S = TypeVar("S")
T = TypeVar("T")


def found_across(
    shards: Sequence[S], job_ids: Sequence[UUID], read: Callable[[S, list[UUID]], Mapping[UUID, T]]
) -> dict[UUID, T]:
    """What `read` finds of `job_ids` in each shard in turn, each shard asked only for
    the ids the ones before it did not hold (a job lives in one shard)."""
    found: dict[UUID, T] = {}
    for shard in shards:
        left = [job_id for job_id in job_ids if job_id not in found]
        if not left:
            break
        found.update(read(shard, left))
    return found


def _recency(job: Job) -> datetime:
    return job.finished_at or job.started_at or job.created_at or EARLIEST


def _newest_first(listings: Sequence[Sequence[Job]], limit: int) -> list[Job]:
    """Each shard's newest-first listing merged into one, cut at `limit`."""
    merged = heapq.merge(*listings, key=_recency, reverse=True)
    return list(itertools.islice(merged, max(limit, 0)))


class ShardedJobStore:
    """A `JobStore` over several `RedisJobStore`s, one per shard (index = shard)."""

    def __init__(self, shards: Sequence[RedisJobStore], shard_map: ShardMap) -> None:
        if len(shards) != max(shard_map.count, 1):
            raise ValueError(f"{len(shards)} shard stores for {shard_map.count} shards")
        self.shards = tuple(shards)
        self.shard_map = shard_map
        self._client = shards[0]._client
        #: Made on the first `watch_finished`: one inbox, a listener per shard.
        self._finishes: FinishListener | None = None
        self._watch_lock = threading.Lock()

    def of(self, queue: str) -> RedisJobStore:
        """The store of `queue`'s shard."""
        return self.shards[self.shard_map.shard_of(queue)]

    def _first(self, read: Any) -> Any:
        for shard in self.shards:
            found = read(shard)
            if found is not None:
                return found
        return None

    def record(self, job: Job) -> None:
        self.of(job.queue).record(job)

    def get(self, job_id: UUID) -> Job | None:
        return self._first(lambda shard: shard.get(job_id))  # type: ignore[no-any-return]

    def get_many(self, job_ids: Sequence[UUID]) -> Mapping[UUID, Job]:
        """Each shard's records among `job_ids`: one pipelined read per shard."""
        return found_across(self.shards, job_ids, RedisJobStore.get_many)

    def list_history(
        self,
        *,
        status: JobStatus | None = None,
        tenant_id: str | None = None,
        limit: int = 100,
    ) -> Sequence[Job]:
        listings = [
            shard.list_history(status=status, tenant_id=tenant_id, limit=limit)
            for shard in self.shards
        ]
        return _newest_first(listings, limit)

    def list_dead(self, *, tenant_id: str | None = None, limit: int = 100) -> Sequence[Job]:
        return self.list_history(status=JobStatus.FAILED, tenant_id=tenant_id, limit=limit)

    def count_dead(self, *, tenant_id: str | None = None) -> Mapping[str, int]:
        counts: dict[str, int] = {}
        for shard in self.shards:
            for queue, n in shard.count_dead(tenant_id=tenant_id).items():
                counts[queue] = counts.get(queue, 0) + n
        return dict(sorted(counts.items()))

    def find_history(
        self, where: HistoryFilter, *, offset: int = 0, limit: int = 100
    ) -> Sequence[Job]:
        """As `RedisJobStore.find_history`: from the queue's shard when `where` names a
        queue, else the first `offset + limit` of each shard, merged."""
        if where.queue is not None:
            return self.of(where.queue).find_history(where, offset=offset, limit=limit)
        if limit <= 0:
            return []
        offset = max(offset, 0)
        listings = [
            shard.find_history(where, offset=0, limit=offset + limit) for shard in self.shards
        ]
        return _newest_first(listings, offset + limit)[offset:]

    def count_history(self, where: HistoryFilter) -> int:
        if where.queue is not None:
            return self.of(where.queue).count_history(where)
        return sum(shard.count_history(where) for shard in self.shards)

    def finished_per_minute(self, start: datetime, minutes: int) -> FinishedPerMinute:
        found = [shard.finished_per_minute(start, minutes) for shard in self.shards]
        completed = tuple(map(sum, zip(*(f.completed for f in found), strict=True)))
        failed = tuple(map(sum, zip(*(f.failed for f in found), strict=True)))
        return FinishedPerMinute(found[0].start, completed, failed)

    def purge_dead(self, job_id: UUID | None = None) -> int:
        return sum(shard.purge_dead(job_id) for shard in self.shards)

    def prune(self, order: PruneOrder) -> int:
        """Each shard's prune in turn, with what the shards before it left of the limit
        (a `keep_*` rule keeps that many per shard)."""
        gone = 0
        for shard in self.shards:
            if gone >= order.limit:
                break
            gone += shard.prune(attrs.evolve(order, limit=order.limit - gone))
        return gone

    def count_prunable(self, order: PruneOrder) -> int:
        return sum(shard.count_prunable(order) for shard in self.shards)

    def pruned_at(self, job_id: UUID) -> datetime | None:
        return self._first(lambda shard: shard.pruned_at(job_id))  # type: ignore[no-any-return]

    def watch_finished(self, job_id: UUID) -> FinishWatch:
        """A watch woken when any shard records `job_id` (its shard is not known from
        the id): the wait is registered with every shard, one listener pops each
        shard's inbox."""
        with self._watch_lock:
            if self._finishes is None or self._finishes.pid != os.getpid():
                keys = [shard.keys for shard in self.shards]
                self._finishes = FinishListener(self._client, *keys)
        return self._finishes.watch(job_id)

    def close(self) -> None:
        if self._finishes is not None:
            self._finishes.close()
        for shard in self.shards:
            shard.close()
