"""The SQL claim of a queue with limits: fair shares, caps and rates (`core.limits`).

One transaction per claim. First the claimers of the queue are serialised: on
PostgreSQL by a transaction-scoped advisory lock on the queue's name (so claimers of
other queues never wait), on SQLite by its single writer (`BEGIN IMMEDIATE`). Then,
as the unlimited claim does, the queue's due parked jobs are promoted. Then three
reads: the running counts (`processing` rows, prefetched ones included, grouped by
job type and partition), the candidates (the first few ready rows of each partition,
most urgent first: a loose index scan finds the partitions, one probe each, and each
partition's rows come from the index in order, so the read does not grow with the
backlog), and the queue's stored buckets and passes. `plan_claim` decides; the
chosen rows are taken with the same fenced statement as `dequeue_many`, and the new
state is written, before the commit.

In-use counts are read from the rows, never kept as counters: a finish, a cancel or
the lease keeper's reclaim changes them by changing the rows, so slots cannot leak.

`LimitedClaiming` is the role of `SqlJobQueue` that runs these claims (and the read of
what a queue holds for its limits) as units of work.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Executable, Select, bindparam, delete, func, select, text
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from ....core.limits import (
    Bucket,
    Candidate,
    ClaimPlan,
    QueueLimits,
    candidates_per_partition,
    plan_claim,
)
from ...ports import LimitedClaims, LimitUsage, prefetch_token
from .base import SqlQueueBase, as_claim
from .database import Database
from .engine import from_micros, to_micros
from .schema import PROCESSING, READY
from .statements import PROMOTE_PER_CLAIM

#: Partitions whose first rows one SQLite statement reads (its compound-select limit
#: is 500).
_PARTS_PER_READ = 100

BUCKET = "bucket"
PASS = "pass"


class SqlLimitedClaim:
    """Claims of limited queues for one `SqlJobQueue` (its database and promotion)."""

    def __init__(self, db: Database, promote: Callable[[Connection, list[str]], int]) -> None:
        self._db, self._promote = db, promote
        t, state = db.schema.job_queue, db.schema.limit_state
        self._postgres = not db.sqlite
        in_queue = t.c.queue == bindparam("in_queue")
        self.running: Select[Any] = (
            select(t.c.job_type, t.c.partition_key, func.count())
            .where(in_queue, t.c.status == PROCESSING)
            .group_by(t.c.job_type, t.c.partition_key)
        )
        self.ready: Select[Any] = (
            select(t.c.partition_key, func.count())
            .where(in_queue, t.c.status == READY)
            .group_by(t.c.partition_key)
        )
        # The queue's partitions with ready rows, one index probe each (a loose index
        # scan over (queue, status, partition_key, ...)): the claim reads the first
        # rows of each partition, never every ready row.
        table = t.name
        ready = f"queue = :in_queue AND status = '{READY}'"
        self.partitions = text(
            f"WITH RECURSIVE parts(p) AS (\n"
            f"    SELECT MIN(partition_key) FROM {table} WHERE {ready}\n"
            f"    UNION ALL\n"
            f"    SELECT (SELECT MIN(partition_key) FROM {table} WHERE {ready}"
            f" AND partition_key > parts.p)\n"
            f"    FROM parts WHERE parts.p IS NOT NULL)\n"
            f"SELECT p FROM parts WHERE p IS NOT NULL"
        )
        first = (
            f"SELECT id, priority, seq, job_type, partition_key FROM {table}"
            f" WHERE {ready} AND partition_key = {{p}} ORDER BY priority, seq LIMIT :per"
        )
        #: SQLite (no LATERAL): a UNION ALL of each partition's first rows, by count.
        self._first = first
        self._union: dict[int, Executable] = {}
        #: PostgreSQL: every partition's first rows in one statement (LATERAL).
        self.candidates: Executable = text(
            f"WITH RECURSIVE parts(p) AS (\n"
            f"    SELECT MIN(partition_key) FROM {table} WHERE {ready}\n"
            f"    UNION ALL\n"
            f"    SELECT (SELECT MIN(partition_key) FROM {table} WHERE {ready}"
            f" AND partition_key > parts.p)\n"
            f"    FROM parts WHERE parts.p IS NOT NULL)\n"
            f"SELECT c.* FROM parts CROSS JOIN LATERAL ({first.format(p='parts.p')}) c\n"
            f"WHERE parts.p IS NOT NULL"
        )
        of_queue = state.c.queue == bindparam("in_queue")
        self.state: Select[Any] = select(
            state.c.kind, state.c.key, state.c.value, state.c.at_us
        ).where(of_queue)
        insert = pg_insert(state) if self._postgres else sqlite_insert(state)
        self.put_state: Executable = insert.on_conflict_do_update(
            index_elements=[state.c.queue, state.c.kind, state.c.key],
            set_={"value": insert.excluded.value, "at_us": insert.excluded.at_us},
        )
        self.drop_state: Executable = delete(state).where(
            of_queue, state.c.kind == bindparam("kind"), state.c.key == bindparam("key")
        )
        self.drop_passes: Executable = delete(state).where(of_queue, state.c.kind == PASS)
        self.lock: Executable = text("SELECT pg_advisory_xact_lock(hashtext(:name))")
        self._table = t.name

    def claim(
        self, conn: Connection, queue: str, at: int, want: int, limits: QueueLimits, base: str
    ) -> tuple[list[Any], ClaimPlan]:
        """In `conn`'s transaction: plan and take up to `want` rows of `queue` under
        tokens `base` + id, locked at `at`; the rows in plan order, and the plan."""
        sql = self._db.sql
        if self._postgres:
            conn.execute(self.lock, {"name": f"{self._table}:{queue}"})
        due = {"in_queue": queue, "at": at, "limit": PROMOTE_PER_CLAIM}
        self._promote(conn, list(conn.execute(sql.due_in_queue, due).scalars()))
        running = self._running(conn, queue)
        candidates = self._candidates(conn, queue, candidates_per_partition(want))
        buckets, passes = self._stored(conn, queue)
        plan = plan_claim(limits, candidates, running, buckets, passes, at, want)
        rows: list[Any] = []
        if plan.take:
            taken = conn.execute(sql.take_many, {"ids": list(plan.take), "base": base, "at": at})
            order = {job_id: n for n, job_id in enumerate(plan.take)}
            rows = sorted(taken.all(), key=lambda r: order[str(r.id)])
        self._store(conn, queue, plan, limits.fair)
        return rows, plan

    def usage(self, conn: Connection, queue: str) -> LimitUsage:
        """What `queue` holds for its limits, read in `conn`'s transaction."""
        ready = {
            str(partition or ""): int(count)
            for partition, count in conn.execute(self.ready, {"in_queue": queue})
        }
        candidates = self._candidates(conn, queue, candidates_per_partition(1))
        buckets, passes = self._stored(conn, queue)
        return LimitUsage(self._running(conn, queue), ready, candidates, buckets, passes)

    def _running(self, conn: Connection, queue: str) -> dict[tuple[str, str], int]:
        """The queue's running rows counted by (job type, partition)."""
        return {
            (str(job_type or ""), str(partition or "")): int(count)
            for job_type, partition, count in conn.execute(self.running, {"in_queue": queue})
        }

    def _candidates(self, conn: Connection, queue: str, per: int) -> list[Candidate]:
        """The first `per` ready rows of each partition, as claim candidates."""
        return [
            Candidate(
                str(r.id),
                int(r.priority),
                int(r.seq),
                str(r.job_type or ""),
                str(r.partition_key or ""),
            )
            for r in self._first_rows(conn, queue, per)
        ]

    def _stored(self, conn: Connection, queue: str) -> tuple[dict[str, Bucket], dict[str, float]]:
        """The queue's stored buckets and passes."""
        buckets: dict[str, Bucket] = {}
        passes: dict[str, float] = {}
        for kind, key, value, at_us in conn.execute(self.state, {"in_queue": queue}):
            if kind == BUCKET:
                buckets[str(key)] = Bucket(float(value), int(at_us or 0))
            elif kind == PASS:
                passes[str(key)] = float(value)
        return buckets, passes

    def _first_rows(self, conn: Connection, queue: str, per: int) -> list[Any]:
        """The first `per` ready rows of each partition of `queue`."""
        if self._postgres:
            return list(conn.execute(self.candidates, {"in_queue": queue, "per": per}))
        parts = list(conn.execute(self.partitions, {"in_queue": queue}).scalars())
        rows: list[Any] = []
        for at in range(0, len(parts), _PARTS_PER_READ):
            chunk = parts[at : at + _PARTS_PER_READ]
            params: dict[str, Any] = {"in_queue": queue, "per": per}
            params |= {f"p{n}": part for n, part in enumerate(chunk)}
            rows.extend(conn.execute(self._firsts(len(chunk)), params))
        return rows

    def _firsts(self, count: int) -> Executable:
        """SQLite: the first rows of `count` partitions (`:p0`...) in one statement."""
        found = self._union.get(count)
        if found is None:
            parts = [f"SELECT * FROM ({self._first.format(p=f':p{n}')})" for n in range(count)]
            found = self._union[count] = text("\nUNION ALL\n".join(parts))
        return found

    def _store(self, conn: Connection, queue: str, plan: ClaimPlan, fair: bool) -> None:
        drops = [{"in_queue": queue, "kind": BUCKET, "key": key} for key in plan.drop_buckets]
        if drops:
            conn.execute(self.drop_state, drops)
        puts = _rows(queue, BUCKET, {k: (b.tokens, b.at_us) for k, b in plan.buckets.items()})
        if fair:
            conn.execute(self.drop_passes, {"in_queue": queue})
            puts += _rows(queue, PASS, {k: (v, None) for k, v in plan.passes.items()})
        if puts:
            conn.execute(self.put_state, puts)


def _rows(
    queue: str, kind: str, values: Mapping[str, tuple[float, int | None]]
) -> list[dict[str, Any]]:
    return [
        {"queue": queue, "kind": kind, "key": key, "value": value, "at_us": at_us}
        for key, (value, at_us) in sorted(values.items())
    ]


def held_rows(rows: Sequence[Any]) -> list[Any]:
    """A re-sent claim's rows (found by its token), in claim order."""
    return sorted(rows, key=lambda r: (r.priority, r.seq))


class LimitedClaiming(SqlQueueBase):
    """The role of `SqlJobQueue` that claims under limits and reports what they hold."""

    #: Claims of queues with limits, made on first use.
    _limited: SqlLimitedClaim | None = None

    def dequeue_limited(
        self, queue: str, now: datetime, want: int, limits: QueueLimits
    ) -> LimitedClaims:
        """Claim up to `want` jobs of `queue` as `core.limits.plan_claim` chooses, in one
        transaction serialised with the queue's other limited claims (see
        `SqlLimitedClaim`); tokens as `dequeue_many` gives them."""
        if self._limited is None:
            self._limited = SqlLimitedClaim(self._db, self._promote)
        limited = self._limited
        at = to_micros(now)
        base = prefetch_token(uuid.uuid4().hex[:16] + ":")
        tries = 0

        def work(conn: Connection) -> tuple[list[Any], ClaimPlan | None]:
            nonlocal tries
            tries += 1
            if tries > 1:
                # A re-send: its first try may have committed before the answer was lost.
                held = list(conn.execute(self._db.sql.held_many, {"at": at, "token": base}))
                if held:
                    return held_rows(held), None
            return limited.claim(conn, queue, at, max(1, want), limits, base)

        rows, plan = self._db.run(work)
        claims = [as_claim(str(r.id), str(r.locked_by), queue, str(r.payload), now) for r in rows]
        if plan is None or plan.wait_until_us is None:
            return LimitedClaims(claims, None, plan is not None and plan.held_back > 0)
        return LimitedClaims(claims, from_micros(plan.wait_until_us), plan.held_back > 0)

    def limit_usage(self, queue: str, now: datetime) -> LimitUsage:
        """What `queue` holds now for its limits (see `SqlLimitedClaim`), in one read."""
        if self._limited is None:
            self._limited = SqlLimitedClaim(self._db, self._promote)
        limited = self._limited
        return self._db.run(lambda conn: limited.usage(conn, queue))
