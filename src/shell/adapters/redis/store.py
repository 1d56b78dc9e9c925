"""The Redis `JobStore`: record hashes plus newest-first indexes, and the per-minute
finished counts the dashboard charts.

Records live under the same `{prefix}` hash tag as the queue. Indexes: all history,
per status (failed ones are the dead letters, `{prefix}:dead`), and the same per
tenant, queue and job type; dead letters are also counted per queue. A record keeps
its facts beside its body (its job type, the minute its finish counts in, its finish
time in µs), computed in Python when it is written, so no script decodes a body.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, cast
from uuid import UUID

from returns.result import Failure, Success

from ....core import Job, JobStatus, PruneOrder
from ....core.throughput import minute_key
from ...codec import decode
from ...ports import HISTORY_FILTER_SCAN, FinishedPerMinute, HistoryFilter
from ..finish_signals import FinishWatch
from .arguments import finished_us_of_body, record_args, us
from .client import DEFAULT_RETRY_BUDGET_S, RedisKeys, client_for, log, retrying, text
from .cluster import Client
from .finishes import FinishListener
from .replicas import NO_WAIT, ReplicaWait, ReplicaWaiter
from .scripts import STORE, Script, register

_PURGE_BATCH = 500
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

#: Every status a record may hold, for a listing not filtered by status.
_STATUS_NAMES = tuple(status.value for status in JobStatus)


class RedisJobStore:
    """A `JobStore` on Redis: record hashes plus newest-first indexes.

    `client_or_url`, `retry_budget_s` and `replica_wait` as for `RedisJobQueue`; a
    store and a queue under one `prefix` on one server (or cluster) finish a job in
    one script (`finishes_with`).
    """

    def __init__(
        self,
        client_or_url: Client | str,
        prefix: str = "conveyor",
        *,
        retry_budget_s: float = DEFAULT_RETRY_BUDGET_S,
        replica_wait: ReplicaWait = NO_WAIT,
    ) -> None:
        self._client, self._owned = client_for(client_or_url, retry_budget_s)
        self.keys = RedisKeys.for_prefix(prefix)
        self.retry_budget_s = retry_budget_s
        self._anchor = [self.keys.history()]
        self.replicas = ReplicaWaiter(self._client, self._anchor[0], replica_wait)
        script = functools.partial(register, self._client, STORE)
        self._record = script("store_record")
        self._list = script("store_list")
        self._purge = script("store_purge")
        self._prune = script("store_prune")
        self._find = script("store_find")
        #: Started on the first `watch_finished`.
        self._finishes: FinishListener | None = None
        self._watch_lock = threading.Lock()

    def _run(self, script: Script, *args: object) -> Any:
        argv = [self.keys.base, *args]
        return retrying(self.retry_budget_s, lambda: script(keys=self._anchor, args=argv))

    def record(self, job: Job) -> None:
        """Upsert the job's latest record; it becomes the newest."""
        if not self.replicas.wait.on:
            self._run(self._record, *record_args(job))
            return
        argv = [self.keys.base, *record_args(job)]

        def queue(pipe: Any) -> None:
            self._record(keys=self._anchor, args=argv, client=pipe)

        retrying(self.retry_budget_s, lambda: self.replicas.send(queue, "record"))

    def get(self, job_id: UUID) -> Job | None:
        """The recorded job, or None (also when its record does not decode)."""
        key = self.keys.store(str(job_id))
        body = retrying(self.retry_budget_s, lambda: self._client.hget(key, "body"))
        return None if body is None else _decoded(body)

    def get_many(self, job_ids: Sequence[UUID]) -> Mapping[UUID, Job]:
        """The records held among `job_ids` (`ManyReadingStore`), read in one
        pipelined round trip."""
        ids = list(dict.fromkeys(job_ids))
        if not ids:
            return {}

        def read() -> list[Any]:
            with self._client.pipeline(transaction=False) as pipe:
                for job_id in ids:
                    pipe.hget(self.keys.store(str(job_id)), "body")
                return list(pipe.execute())

        bodies = retrying(self.retry_budget_s, read)
        found = (
            (job_id, None if body is None else _decoded(body))
            for job_id, body in zip(ids, bodies, strict=True)
        )
        return {job_id: job for job_id, job in found if job is not None}

    def list_history(
        self,
        *,
        status: JobStatus | None = None,
        tenant_id: str | None = None,
        limit: int = 100,
    ) -> Sequence[Job]:
        """Recorded jobs, newest first, filtered by status and tenant."""
        # The scripts read '' as "any tenant": an empty name, which no job has, matches
        # nothing, as on the other backends.
        if limit <= 0 or tenant_id == "":
            return []
        bodies = self._run(self._list, status.value if status else "", tenant_id or "", limit)
        return [job for job in map(_decoded, bodies) if job is not None]

    def list_dead(self, *, tenant_id: str | None = None, limit: int = 100) -> Sequence[Job]:
        """Dead letters, newest first."""
        return self.list_history(status=JobStatus.FAILED, tenant_id=tenant_id, limit=limit)

    def count_dead(self, *, tenant_id: str | None = None) -> Mapping[str, int]:
        """Dead letters per queue name (kept as counters beside the index)."""
        if tenant_id == "":
            return {}
        key = f"{self.keys.base}:dead_counts" + (f":tenant:{tenant_id}" if tenant_id else "")
        counts = retrying(self.retry_budget_s, lambda: self._client.hgetall(key))
        return {text(queue): int(n) for queue, n in sorted(counts.items())}

    def _find_args(self, where: HistoryFilter) -> list[object]:
        status = "" if where.status is None else where.status.value
        filters = [where.queue or "", where.job_type or "", where.tenant_id or ""]
        return [status, *filters]

    def find_history(
        self, where: HistoryFilter, *, offset: int = 0, limit: int = 100
    ) -> Sequence[Job]:
        """Records matching `where`, newest first, from the `offset`-th, read from the
        per-status queue, type and tenant indexes (see `store_find.lua`)."""
        if limit <= 0 or _names_nothing(where):
            return []
        page = [max(offset, 0), limit, "", HISTORY_FILTER_SCAN, *_STATUS_NAMES]
        bodies = self._run(self._find, *self._find_args(where), *page)
        return [job for job in map(_decoded, bodies) if job is not None]

    def count_history(self, where: HistoryFilter) -> int:
        """How many records match `where` (index sizes; a walk of at most
        `HISTORY_FILTER_SCAN` entries per status for two or more filters)."""
        if _names_nothing(where):
            return 0
        page = [0, 0, "1", HISTORY_FILTER_SCAN, *_STATUS_NAMES]
        return int(self._run(self._find, *self._find_args(where), *page))

    def finished_per_minute(self, start: datetime, minutes: int) -> FinishedPerMinute:
        """Completed and failed records per minute, from the per-minute counters the
        record scripts keep (`{prefix}:finished:<minute>`, each kept for
        `core.throughput.FINISH_COUNT_RETENTION_S` after its last count)."""
        start = start.replace(second=0, microsecond=0)
        pipe = self._client.pipeline(transaction=False)
        for n in range(max(minutes, 0)):
            minute = minute_key(start + timedelta(minutes=n))
            pipe.hmget(f"{self.keys.base}:finished:{minute}", "completed", "failed")
        rows = retrying(self.retry_budget_s, pipe.execute)
        completed = tuple(int(done or 0) for done, _ in rows)
        failed = tuple(int(dead or 0) for _, dead in rows)
        return FinishedPerMinute(start, completed, failed)

    def purge_dead(self, job_id: UUID | None = None) -> int:
        """Delete one dead letter, or all of them (in batches), but those a job still
        queued depends on. Returns how many went."""
        if job_id is not None:
            return int(self._run(self._purge, str(job_id), 1, 0)[0])
        total = left = 0
        while True:
            purged, seen = map(int, self._run(self._purge, "", _PURGE_BATCH, left))
            total, left = total + purged, left + seen - purged
            if seen < _PURGE_BATCH:
                return total

    @staticmethod
    def _prune_rules(order: PruneOrder) -> list[tuple[JobStatus, str, str]]:
        return [
            (status, "" if before is None else str(us(before)), "" if keep is None else str(keep))
            for status, before, keep in order.rules
            if before is not None or keep is not None
        ]

    def _prune_step(self, *args: object) -> tuple[int, int, int]:
        """One `store_prune.lua` call: (how many, done, how many entries it examined). A
        record written before records kept their finish time has it worked out here from
        its body and handed to the script, which keeps it and walks again."""
        facts: list[object] = []
        while True:
            reply = self._run(self._prune, *args, *facts)
            if int(reply[0]) >= 0:
                return int(reply[0]), int(reply[1]), int(reply[2])
            asked = reply[2:]
            facts = []
            for at in range(0, len(asked), 3):
                record_id, seq, body = asked[at : at + 3]
                facts += [text(record_id), text(seq), finished_us_of_body(body)]

    def prune(self, order: PruneOrder) -> int:
        """Delete up to `order.limit` records the order lets go, oldest recorded first,
        one script per status (each atomic; see `store_prune.lua`)."""
        left = order.limit
        remember = order.remember_ms
        at = "" if order.pruned_at is None else str(us(order.pruned_at))
        tombstones = (str(remember) if remember else "", at)
        for status, cutoff, keep in self._prune_rules(order):
            # Past the records a window kept (a queued job's inputs at the front of the
            # index), until `limit` went or the walk stopped.
            skipped = 0
            while left > 0:
                args = (status.value, cutoff, keep, left, "", skipped, *tombstones)
                gone, done, examined = self._prune_step(*args)
                left, skipped = left - gone, skipped + examined - gone
                if done or examined == 0:
                    break
        return order.limit - max(left, 0)

    def count_prunable(self, order: PruneOrder) -> int:
        """How many records `prune` would delete, read in pages of `_PURGE_BATCH`."""
        total = 0
        for status, cutoff, keep in self._prune_rules(order):
            offset, done = 0, 0
            while not done:
                found, done, _ = self._prune_step(
                    status.value, cutoff, keep, _PURGE_BATCH, "1", offset, "", ""
                )
                total += found
                offset += _PURGE_BATCH
        return total

    def pruned_at(self, job_id: UUID) -> datetime | None:
        """When retention pruned `job_id`'s record, while its tombstone lives
        (`PruneRememberingStore`); None otherwise."""
        key = self.keys.pruned(str(job_id))
        found = retrying(self.retry_budget_s, lambda: self._client.get(key))
        return None if found is None else _EPOCH + timedelta(microseconds=int(text(found)))

    def watch_finished(self, job_id: UUID) -> FinishWatch:
        """A watch woken when a record of `job_id` is written (`FinishWatchingStore`):
        the wait is registered with the server, the scripts push each record to the
        inboxes registered for its id, one listener per store pops them (`finishes`)."""
        with self._watch_lock:
            if self._finishes is None or self._finishes.pid != os.getpid():
                self._finishes = FinishListener(self._client, self.keys)
        return self._finishes.watch(job_id)

    def close(self) -> None:
        """Close the client if this store made it from a URL."""
        if self._finishes is not None:
            self._finishes.close()
        if self._owned:
            self._client.close()


def _decoded(body: bytes | str) -> Job | None:
    match decode(body):
        case Success(job):
            return cast(Job, job)
        case Failure(error):
            log.warning("skipping an undecodable job record: %s", error)
    return None


def _names_nothing(where: HistoryFilter) -> bool:
    """A filter on an empty queue, type or tenant name: no record has one, while the
    script reads '' as "any"."""
    return "" in (where.queue, where.job_type, where.tenant_id)
