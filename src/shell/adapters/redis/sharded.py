"""Shards: one `RedisJobQueue` per hash tag, and the router that sends each call to
the shard `core.shards.ShardMap` names for its queue.

The router holds no policy of its own. A call about a queue (an enqueue, a claim, a
claim holder's write) goes to that queue's shard; a read by job id asks each shard
in turn (a job lives in its queue's shard, which its id does not tell); the
figures of all queues (counts, promotion, abandoned claims, a scan) are read from
every shard and put together. A graph whose jobs, or the jobs it waits on, fall in
two shards is refused (`core.shards.cross_shard`) before anything is written. See
`docs/redis.md`, "Shards".
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar
from uuid import UUID

from ....core import Job, ValidationError
from ....core.dependencies import Edge
from ....core.limits import QueueLimits
from ....core.shards import Placed, ShardMap, cross_shard
from ...ports import LimitedClaims, LimitUsage, Place, QueueCounts, QueuedJob
from ...ports.claims import BadClaim, Claim
from ...ports.workflows import Graph, WorkflowMembers
from .queue import RedisJobQueue
from .sharded_store import EARLIEST, ShardedJobStore, found_across

_T = TypeVar("_T")


def grouped(items: Sequence[_T], shard_of: Any) -> dict[int, list[tuple[int, _T]]]:
    """`items` with their places in the list, per shard, each shard's in list order."""
    groups: dict[int, list[tuple[int, _T]]] = {}
    for at, item in enumerate(items):
        groups.setdefault(shard_of(item), []).append((at, item))
    return groups


class ShardedJobQueue:
    """A `JobQueue` over several `RedisJobQueue`s, one per shard (index = shard)."""

    def __init__(self, shards: Sequence[RedisJobQueue], shard_map: ShardMap) -> None:
        if len(shards) != max(shard_map.count, 1):
            raise ValueError(f"{len(shards)} shard queues for {shard_map.count} shards")
        self.shards = tuple(shards)
        self.shard_map = shard_map
        # The shards share one client; the outage reporter reads it from here.
        self._client = shards[0]._client
        self.retry_budget_s = shards[0].retry_budget_s

    def of(self, queue: str) -> RedisJobQueue:
        """The shard that holds `queue`."""
        return self.shards[self.shard_map.shard_of(queue)]

    def _first(self, read: Any) -> Any:
        for shard in self.shards:
            found = read(shard)
            if found:
                return found
        return None

    # Enqueues: the job's queue decides.

    def enqueue(self, job: Job) -> None:
        self.of(job.queue).enqueue(job)

    def enqueue_many(self, jobs: Sequence[Job]) -> None:
        for shard, items in grouped(jobs, self._shard_of_job).items():
            self.shards[shard].enqueue_many([job for _, job in items])

    def _shard_of_job(self, job: Job) -> int:
        return self.shard_map.shard_of(job.queue)

    def enqueue_new(self, job: Job) -> Job | None:
        return self.of(job.queue).enqueue_new(job)

    def enqueue_new_many(self, jobs: Sequence[Job]) -> list[Job | None]:
        answers: list[Job | None] = [None] * len(jobs)
        for shard, items in grouped(jobs, self._shard_of_job).items():
            found = self.shards[shard].enqueue_new_many([job for _, job in items])
            for (at, _), answer in zip(items, found, strict=True):
                answers[at] = answer
        return answers

    def revive(self, dead: Job, fresh: Job) -> bool:
        if self.shard_map.shard_of(dead.queue) != self.shard_map.shard_of(fresh.queue):
            raise ValidationError.of(
                "queue", f"a retried job stays in its shard: {fresh.queue!r} is in another"
            )
        return self.of(dead.queue).revive(dead, fresh)

    # Claims and the claim holder's writes: the claim's queue decides.

    def dequeue(self, queue: str, now: datetime) -> Claim | BadClaim | None:
        return self.of(queue).dequeue(queue, now)

    def dequeue_many(self, queue: str, now: datetime, limit: int) -> list[Claim | BadClaim]:
        return self.of(queue).dequeue_many(queue, now, limit)

    def dequeue_limited(
        self, queue: str, now: datetime, want: int, limits: QueueLimits
    ) -> LimitedClaims:
        return self.of(queue).dequeue_limited(queue, now, want, limits)

    def wait_and_dequeue(
        self, queue: str, now: datetime, limit: int, timeout_s: float
    ) -> list[Claim | BadClaim]:
        return self.of(queue).wait_and_dequeue(queue, now, limit, timeout_s)

    def wait_for_work(self, queue: str, timeout_s: float) -> bool:
        return self.of(queue).wait_for_work(queue, timeout_s)

    def end_waits(self) -> None:
        for shard in self.shards:
            shard.end_waits()

    def start_claim(self, claim: Claim, now: datetime) -> Claim | None:
        return self.of(claim.queue).start_claim(claim, now)

    def ack(self, claim: Claim | BadClaim) -> bool:
        return self.of(claim.queue).ack(claim)

    def extend(self, claim: Claim | BadClaim, now: datetime) -> bool:
        return self.of(claim.queue).extend(claim, now)

    def extend_with_progress(self, claim: Claim | BadClaim, now: datetime, note: str) -> bool:
        return self.of(claim.queue).extend_with_progress(claim, now, note)

    def replace(self, claim: Claim, job: Job) -> bool:
        return self.of(claim.queue).replace(claim, job)

    def finishes_with(self, store: object) -> bool:
        """True when `store` keeps each shard's records beside that shard's queue."""
        if not isinstance(store, ShardedJobStore) or len(store.shards) != len(self.shards):
            return False
        return all(q.finishes_with(s) for q, s in zip(self.shards, store.shards, strict=True))

    def finish(
        self, claim: Claim | BadClaim, record: Job, abandoned_before: datetime | None = None
    ) -> bool:
        return self.of(claim.queue).finish(claim, record, abandoned_before)

    def finish_many(self, items: Sequence[tuple[Claim, Job]]) -> list[bool]:
        answers = [False] * len(items)
        by_claim = grouped(items, lambda item: self.shard_map.shard_of(item[0].queue))
        for shard, group in by_claim.items():
            done = self.shards[shard].finish_many([item for _, item in group])
            for (at, _), answer in zip(group, done, strict=True):
                answers[at] = answer
        return answers

    def finish_cancelled(
        self, claim: Claim | BadClaim, record: Job, abandoned_before: datetime | None = None
    ) -> bool:
        return self.of(claim.queue).finish_cancelled(claim, record, abandoned_before)

    def reclaim(self, claim: Claim, job: Job, cutoff: datetime) -> bool:
        return self.of(claim.queue).reclaim(claim, job, cutoff)

    def cancel(self, record: Job) -> bool:
        home = self.of(record.queue)
        if home.cancel(record):
            return True
        # A queue whose pin changed: its jobs queued before stay in the shard they were in.
        held = [s for s in self.shards if s is not home and s.find(record.id) is not None]
        return bool(held) and held[0].cancel(record)

    # Reads by job id: each shard in turn.

    def find(self, job_id: UUID) -> QueuedJob | None:
        return self._first(lambda shard: shard.find(job_id))  # type: ignore[no-any-return]

    def find_many(self, job_ids: Sequence[UUID]) -> dict[UUID, QueuedJob]:
        """Each shard's finds among `job_ids`: one pipelined read per shard and batch."""
        return found_across(self.shards, job_ids, RedisJobQueue.find_many)

    def request_cancel(self, job_id: UUID, now: datetime) -> bool:
        return bool(self._first(lambda shard: shard.request_cancel(job_id, now)))

    def cancel_requested(self, job_id: UUID) -> bool:
        return bool(self._first(lambda shard: shard.cancel_requested(job_id)))

    def progress_note(self, job_id: UUID) -> str | None:
        return self._first(lambda shard: shard.progress_note(job_id))  # type: ignore[no-any-return]

    def dependencies_of(self, job_id: UUID) -> Sequence[Edge]:
        return self._first(lambda shard: shard.dependencies_of(job_id)) or ()

    def workflow(self, workflow_id: UUID) -> WorkflowMembers | None:
        return self._first(lambda shard: shard.workflow(workflow_id))  # type: ignore[no-any-return]

    def workflow_of(self, job_id: UUID) -> UUID | None:
        return self._first(lambda shard: shard.workflow_of(job_id))  # type: ignore[no-any-return]

    # Figures of every queue: each shard's, put together.

    def counts(self, now: datetime) -> Mapping[str, QueueCounts]:
        """Each shard's figures; a queue found in two shards (its pin changed while it
        held jobs) is added up, so the jobs left behind still show."""
        merged: dict[str, QueueCounts] = {}
        for shard in self.shards:
            for name, found in shard.counts(now).items():
                seen = merged.get(name)
                merged[name] = found if seen is None else _added(seen, found)
        return dict(sorted(merged.items()))

    def limit_usage(self, queue: str, now: datetime) -> LimitUsage:
        return self.of(queue).limit_usage(queue, now)

    def next_due(self, queue: str) -> datetime | None:
        return self.of(queue).next_due(queue)

    def promote_due(self, now: datetime, limit: int = 1000) -> int:
        moved = 0
        for shard in self.shards:
            moved += shard.promote_due(now, max(limit - moved, 0)) if moved < limit else 0
        return moved

    def abandoned(self, cutoff: datetime, limit: int = 100) -> Sequence[Claim | BadClaim]:
        found = [claim for shard in self.shards for claim in shard.abandoned(cutoff, limit)]
        return sorted(found, key=lambda claim: claim.locked_at)[:limit]

    def scan(
        self, queue: str | None = None, place: Place | None = None, *, batch: int = 500
    ) -> Iterator[QueuedJob]:
        """The shards' scans merged into the order of one: place by place, and within
        a place by what orders it in a shard. Every shard is read for one queue too: a
        queue whose pin changed keeps the jobs queued before in its old shard."""
        return itertools.chain.from_iterable(
            heapq.merge(*(s.scan(queue, w, batch=batch) for s in self.shards), key=_ORDER[w])
            for w in ([place] if place is not None else list(Place))
        )

    def server_time(self) -> datetime:
        return self.shards[0].server_time()

    # Workflows: one shard holds a whole graph.

    def enqueue_graph(self, graph: Graph) -> list[Job]:
        return self.shards[self._graph_shard(graph)].enqueue_graph(graph)

    def _graph_shard(self, graph: Graph) -> int:
        """The one shard of `graph`'s jobs and of the stored jobs they wait on; a
        `ValidationError` naming the member's field when they span two."""
        ids = {member.job.id for member in graph.members}
        placed: list[Placed] = []
        for member in graph.members:
            queue = member.job.queue
            placed.append(Placed(self.shard_map.shard_of(queue), member.field, f"queue {queue!r}"))
        for member in graph.members:
            for edge in member.edges:
                if edge.dependency in ids:
                    continue
                held = self._holder_of(edge.dependency)
                if held is not None:
                    placed.append(Placed(held, member.field, f"job {edge.dependency}"))
        conflict = cross_shard(placed)
        if conflict is not None:
            raise ValidationError.of(*conflict)
        return placed[0].shard if placed else 0

    def _holder_of(self, job_id: UUID) -> int | None:
        """The shard that queues, records or remembers `job_id`, if any does."""
        for at, shard in enumerate(self.shards):
            if shard.find(job_id) is not None or _recorded(shard, job_id):
                return at
        return None

    def close(self) -> None:
        for shard in self.shards:
            shard.close()


def _added(one: QueueCounts, other: QueueCounts) -> QueueCounts:
    oldest = [at for at in (one.oldest_ready_at, other.oldest_ready_at) if at is not None]
    return QueueCounts(
        ready=one.ready + other.ready,
        scheduled=one.scheduled + other.scheduled,
        in_flight=one.in_flight + other.in_flight,
        oldest_ready_at=min(oldest, default=None),
        waiting=one.waiting + other.waiting,
    )


def _recorded(shard: RedisJobQueue, job_id: UUID) -> bool:
    """Whether `shard`'s store records `job_id`, or retention pruned it there (a
    dependency on a pruned job is settled by the shard that remembers it)."""
    keys = (shard.keys.store(str(job_id)), shard.keys.pruned(str(job_id)))
    return bool(shard._retrying(lambda: shard._client.exists(*keys)))


#: How one shard orders each place of its scan (see `RedisJobQueue.scan`): claims by
#: their lease (the oldest first), ready and waiting jobs by queue name, parked ones
#: by the time they come due.
_ORDER: dict[Place, Callable[[QueuedJob], Any]] = {
    Place.IN_FLIGHT: lambda e: e.locked_at or EARLIEST,
    Place.READY: lambda e: e.queue,
    Place.SCHEDULED: lambda e: (e.job and e.job.run_at) or EARLIEST,
    Place.WAITING: lambda e: e.queue,
}
