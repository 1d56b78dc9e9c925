"""The SQL `JobStore`: outcome history and dead letters in `<prefix>_job_store`.

One row per job, its latest record: `payload` is the authoritative job and
`recorded_seq` the order of recording (newest first), not a clock that may step back.
The queue writes records here too, in the same transaction as a release, when both
tables share a database (`SqlJobQueue.finish`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

from returns.result import Success
from sqlalchemy import (
    ColumnElement,
    Connection,
    Engine,
    FromClause,
    delete,
    exists,
    false,
    func,
    or_,
    select,
)

from ....core import Job, JobStatus, PruneOrder
from ...codec import decode, encode
from ...ports import FinishedPerMinute, HistoryFilter
from ..finish_signals import FinishWatch
from .database import Database
from .engine import to_micros
from .schema import SCHEMA, STORE_COUNTER, Schema
from .tombstones import pruned_at as tombstones_pruned_at
from .tombstones import remember
from .wakeups import wakeups_for
from .workflow_pruning import let_go_of_records

__all__ = ["SqlJobStore", "record_values", "write_record", "write_records"]

_log = logging.getLogger(__name__)

_MINUTE_US = 60_000_000


def write_record(db: Database, conn: Connection, job: Job) -> None:
    """Upsert `job` into the store table inside `conn`'s transaction."""
    db.put(conn, record_values(job), record=True)


def record_values(job: Job) -> dict[str, Any]:
    """The job_store columns of `job`'s record, `recorded_seq` apart."""
    finished = job.finished_at
    return {
        "id": str(job.id),
        "queue": job.queue,
        "job_type": job.job_type,
        "status": job.status.value,
        "tenant_id": job.tenant_id,
        "finished_at": None if finished is None else to_micros(finished, "finished_at"),
        "payload": encode(job),
    }


def write_records(db: Database, conn: Connection, jobs: Sequence[Job]) -> None:
    """Upsert several records in one statement, newest in list order."""
    if len(jobs) <= 1:
        for job in jobs:
            write_record(db, conn, job)
        return
    rows = [record_values(job) for job in jobs]
    for row, seq in zip(rows, db.next_seqs(conn, STORE_COUNTER, len(rows)), strict=True):
        row["recorded_seq"] = seq
    db.put_many(conn, rows, record=True)


class SqlJobStore:
    """A `JobStore` (history and dead letters) in a SQLite or PostgreSQL database."""

    def __init__(
        self, engine: Engine, *, schema: Schema = SCHEMA, lock_retry_s: float = 30.0
    ) -> None:
        self._db = Database(engine, schema, lock_retry_s)
        self._t = schema.job_store
        self._q = schema.job_queue

    def record(self, job: Job) -> None:
        """Upsert the job's latest record; it becomes the newest in the listings."""
        self._db.run(lambda conn: write_record(self._db, conn, job))

    def pruned_at(self, job_id: UUID) -> datetime | None:
        """When retention pruned `job_id`'s record, while its tombstone is kept
        (`PruneRememberingStore`); None otherwise."""
        table = self._db.schema.pruned
        return self._db.run(
            lambda conn: tombstones_pruned_at(conn, table, str(job_id)), write=False
        )

    def watch_finished(self, job_id: UUID) -> FinishWatch:
        """A watch woken when `job_id`'s record may have been written
        (`FinishWatchingStore`): this process's one wake-up listener of the database
        hears it (see `wakeups`)."""
        engine = self._db.engine
        return wakeups_for(engine).watch_finished(self, engine, job_id, self._t.name)

    def get(self, job_id: UUID) -> Job | None:
        """The recorded job, or None (also when its record no longer decodes)."""
        stmt = select(self._t.c.payload).where(self._t.c.id == str(job_id))
        payload = self._db.run(lambda conn: conn.execute(stmt).scalar_one_or_none(), write=False)
        return None if payload is None else _decoded_record(str(job_id), str(payload))

    def get_many(self, job_ids: Sequence[UUID]) -> Mapping[UUID, Job]:
        """The records held among `job_ids` (`ManyReadingStore`): one query per
        `_MANY_CHUNK` ids, in one transaction."""
        ids = list(dict.fromkeys(str(job_id) for job_id in job_ids))

        def read(conn: Connection) -> list[Any]:
            rows: list[Any] = []
            for at in range(0, len(ids), _MANY_CHUNK):
                chunk = ids[at : at + _MANY_CHUNK]
                stmt = select(self._t.c.id, self._t.c.payload).where(self._t.c.id.in_(chunk))
                rows.extend(conn.execute(stmt).all())
            return rows

        found = (
            (
                (str(r.id), _decoded_record(str(r.id), str(r.payload)))
                for r in self._db.run(read, write=False)
            )
            if ids
            else ()
        )
        return {UUID(job_id): job for job_id, job in found if job is not None}

    def list_history(
        self,
        *,
        status: JobStatus | None = None,
        tenant_id: str | None = None,
        limit: int = 100,
    ) -> Sequence[Job]:
        """Recorded jobs, most recently recorded first, filtered by status and tenant."""
        t = self._t
        stmt = select(t.c.id, t.c.payload).order_by(t.c.recorded_seq.desc()).limit(limit)
        if status is not None:
            stmt = stmt.where(t.c.status == status.value)
        if tenant_id is not None:
            stmt = stmt.where(t.c.tenant_id == tenant_id)
        rows = self._db.run(lambda conn: conn.execute(stmt).all(), write=False)
        jobs = (_decoded_record(str(r.id), str(r.payload)) for r in rows)
        return [job for job in jobs if job is not None]

    def list_dead(self, *, tenant_id: str | None = None, limit: int = 100) -> Sequence[Job]:
        """Dead letters, newest first; only `tenant_id`'s when given."""
        return self.list_history(status=JobStatus.FAILED, tenant_id=tenant_id, limit=limit)

    def count_dead(self, *, tenant_id: str | None = None) -> Mapping[str, int]:
        """Dead letters per queue name."""
        t = self._t
        stmt = (
            select(t.c.queue, func.count())
            .where(t.c.status == JobStatus.FAILED.value)
            .group_by(t.c.queue)
            .order_by(t.c.queue)
        )
        if tenant_id is not None:
            stmt = stmt.where(t.c.tenant_id == tenant_id)
        rows = self._db.run(lambda conn: conn.execute(stmt).all(), write=False)
        return {str(queue): int(n) for queue, n in rows}

    def _filters(self, where: HistoryFilter) -> list[ColumnElement[bool]]:
        """The conditions of `where` but its status."""
        t = self._t
        out: list[ColumnElement[bool]] = []
        if where.queue is not None:
            out.append(t.c.queue == where.queue)
        if where.job_type is not None:
            out.append(t.c.job_type == where.job_type)
        if where.tenant_id is not None:
            out.append(t.c.tenant_id == where.tenant_id)
        return out

    def find_history(
        self, where: HistoryFilter, *, offset: int = 0, limit: int = 100
    ) -> Sequence[Job]:
        """Records matching `where`, newest first, from the `offset`-th: each status
        is read along its (status, queue | job_type | tenant, recorded_seq) index."""
        if limit <= 0:
            return []
        offset = max(offset, 0)
        rows = self._db.run(lambda conn: self._find(conn, where, offset, limit), write=False)
        jobs = (_decoded_record(str(r.id), str(r.payload)) for r in rows)
        return [job for job in jobs if job is not None]

    def _find(
        self, conn: Connection, where: HistoryFilter, offset: int, limit: int
    ) -> Sequence[Any]:
        t = self._t
        conds = self._filters(where)
        newest = t.c.recorded_seq.desc()
        if where.status is not None or not conds:
            if where.status is not None:
                conds.append(t.c.status == where.status.value)
            stmt = select(t.c.id, t.c.payload).where(*conds).order_by(newest)
            return conn.execute(stmt.offset(offset).limit(limit)).all()
        # No one index orders every status by a queue, type or tenant: take each
        # status's newest along its own index, and merge them.
        need = offset + limit
        keys: list[tuple[int, str]] = []
        for status in JobStatus:
            pick = select(t.c.recorded_seq, t.c.id).where(t.c.status == status.value, *conds)
            found = conn.execute(pick.order_by(newest).limit(need))
            keys.extend((int(seq), str(i)) for seq, i in found)
        keys.sort(reverse=True)
        ids = [i for _, i in keys[offset:need]]
        if not ids:
            return []
        rows = conn.execute(select(t.c.id, t.c.payload).where(t.c.id.in_(ids))).all()
        place = {i: n for n, i in enumerate(ids)}
        return sorted(rows, key=lambda r: place[str(r.id)])

    def count_history(self, where: HistoryFilter) -> int:
        """How many records match `where` (one indexed count per status)."""
        t = self._t
        conds = self._filters(where)
        statuses = list(JobStatus) if where.status is None else [where.status]
        if where.status is None and not conds:
            stmt = select(func.count()).select_from(t)
        else:
            stmt = (
                select(func.count())
                .select_from(t)
                .where(t.c.status.in_([s.value for s in statuses]), *conds)
            )
        return int(self._db.run(lambda conn: conn.execute(stmt).scalar_one(), write=False))

    def finished_per_minute(self, start: datetime, minutes: int) -> FinishedPerMinute:
        """Completed and failed records per minute of `finished_at`, in one statement of
        a range count per minute and status along the (status, finished_at) index (a
        GROUP BY on the minute would sort every record of the hour first)."""
        start = start.replace(second=0, microsecond=0)
        minutes = max(minutes, 0)
        t = self._t
        lo = to_micros(start, "start")
        kinds = (JobStatus.COMPLETED.value, JobStatus.FAILED.value)
        cells = [
            select(func.count())
            .where(
                t.c.status == kind,
                t.c.finished_at >= lo + minute * _MINUTE_US,
                t.c.finished_at < lo + (minute + 1) * _MINUTE_US,
            )
            .scalar_subquery()
            for kind in kinds
            for minute in range(minutes)
        ]
        if not cells:
            return FinishedPerMinute(start, (), ())
        row = self._db.run(lambda conn: conn.execute(select(*cells)).one(), write=False)
        counts = tuple(int(n) for n in row)
        return FinishedPerMinute(start, counts[:minutes], counts[minutes:])

    def purge_dead(self, job_id: UUID | None = None) -> int:
        """Delete one dead letter, or all of them, but those a job still queued depends
        on. Returns how many went."""
        stmt = delete(self._t).where(
            self._t.c.status == JobStatus.FAILED.value, self._idle(self._t)
        )
        if job_id is not None:
            stmt = stmt.where(self._t.c.id == str(job_id))

        def purge(conn: Connection) -> int:
            gone = [str(i) for i in conn.execute(stmt.returning(self._t.c.id)).scalars()]
            let_go_of_records(conn, self._db.schema, gone)
            return len(gone)

        return self._db.run(purge)

    def prune(self, order: PruneOrder) -> int:
        """Delete up to `order.limit` records the order lets go, in one transaction of
        a few index-driven DELETEs; each re-checks its guards (still terminal, still
        past the cutoff or count, its job not in the queue table) in the statement."""
        if order.is_empty or order.limit <= 0:
            return 0
        return self._db.run(lambda conn: self._prune(conn, order))

    def _prune(self, conn: Connection, order: PruneOrder) -> int:
        left = order.limit
        pruned: list[str] = []
        for status, before, keep in _rules(order):
            # (column, bound): a record with column < bound goes, oldest first along the
            # (status, column) index.
            rules: list[tuple[str, int]] = []
            if before is not None:
                rules.append(("finished_at", to_micros(before, "before")))
            threshold = self._keep_threshold(conn, status, keep)
            if threshold is not None:
                rules.append(("recorded_seq", threshold))
            for column, bound in rules:
                if left <= 0:
                    break
                inner = self._t.alias("doomed")
                pick = (
                    select(inner.c.id)
                    .where(
                        inner.c.status == status.value,
                        inner.c[column] < bound,
                        self._idle(inner),
                    )
                    .order_by(inner.c[column])
                    .limit(left)
                )
                # The guards again, on the row being deleted: a record revived or re-queued
                # since the pick stays.
                t = self._t
                stmt = delete(t).where(
                    t.c.id.in_(pick.scalar_subquery()),
                    t.c.status == status.value,
                    t.c[column] < bound,
                    self._idle(t),
                )
                gone = [str(i) for i in conn.execute(stmt.returning(t.c.id)).scalars()]
                pruned.extend(gone)
                left -= len(gone)
        remember(conn, self._db.schema.pruned, order, pruned)
        let_go_of_records(conn, self._db.schema, pruned)
        return order.limit - left

    def _idle(self, t: FromClause) -> ColumnElement[bool]:
        """The record's job is neither queued nor in flight (a probe of the queue's key),
        nor does a job still queued depend on it (its release reads the record's status,
        its handler the result; a probe of the edges' key, then the queue's)."""
        edges, q = self._db.schema.edges, self._q
        needed = exists().where(edges.c.dependency_id == t.c.id, q.c.id == edges.c.dependent_id)
        return ~exists().where(q.c.id == t.c.id) & ~needed

    def _keep_threshold(self, conn: Connection, status: JobStatus, keep: int | None) -> int | None:
        """The `recorded_seq` of the `keep`-th newest record of `status`: records below
        it are beyond the count. None when there are no more than `keep`."""
        if keep is None:
            return None
        t = self._t
        stmt = (
            select(t.c.recorded_seq)
            .where(t.c.status == status.value)
            .order_by(t.c.recorded_seq.desc())
            .offset(keep - 1)
            .limit(1)
        )
        found = conn.execute(stmt).scalar_one_or_none()
        return None if found is None else int(found)

    def count_prunable(self, order: PruneOrder) -> int:
        """How many records `prune` would delete, all batches together (read-only)."""
        if order.is_empty:
            return 0
        return self._db.run(lambda conn: self._count_prunable(conn, order), write=False)

    def _count_prunable(self, conn: Connection, order: PruneOrder) -> int:
        t = self._t
        total = 0
        for status, before, keep in _rules(order):
            threshold = self._keep_threshold(conn, status, keep)
            old = false() if before is None else t.c.finished_at < to_micros(before, "before")
            beyond = false() if threshold is None else t.c.recorded_seq < threshold
            if before is None and threshold is None:
                continue
            stmt = select(func.count()).where(
                t.c.status == status.value, or_(old, beyond), self._idle(t)
            )
            total += int(conn.execute(stmt).scalar_one())
        return total

    def close(self) -> None:
        """Close pooled connections (the engine reconnects if used again) and stop
        keeping this database's wake-up listener alive."""
        wakeups_for(self._db.engine).leave(self)
        self._db.engine.dispose()


def _rules(order: PruneOrder) -> list[tuple[JobStatus, datetime | None, int | None]]:
    return list(order.rules)


#: Ids per query of `get_many`: well under SQLite's bound on a statement's parameters.
_MANY_CHUNK = 500


def _decoded_record(job_id: str, payload: str) -> Job | None:
    decoded = decode(payload)
    if isinstance(decoded, Success):
        job: Job = decoded.unwrap()
        return job
    # Only this adapter writes the store, so this is corruption: say so, without the payload.
    _log.warning("job_store row %s does not decode: %s", job_id, decoded.failure())
    return None
