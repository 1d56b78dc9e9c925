"""The SQL queue's placements: enqueue (one, many, inside the caller's transaction),
`enqueue_new` (unless the id or the unique key is taken, see `unique`), and revive.

Every placement upserts the job's row by id, unlocked, with a fresh `seq`: a parked job
waits as `scheduled`, any other goes to the tail of ready.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection

from ....core import Job, JobStatus
from ...ports import UniqueKeyHeld
from .awaited import mark_awaited
from .base import SqlQueueBase
from .schema import JOB_COUNTER
from .store import write_record
from .unique import Found, rerun_on_contention

__all__ = ["Enqueueing"]


class Enqueueing(SqlQueueBase):
    """The placement role of `SqlJobQueue`."""

    def enqueue(self, job: Job) -> None:
        """Upsert by id, unlocked: parked jobs wait as `scheduled`, others go to the tail
        of ready; either takes a fresh `seq` (for a parked job, its place among those
        due at the same instant). Re-enqueueing a claimed job takes it from its holder,
        whose ack then finds nothing."""
        self._db.refuse_lost_file()
        # One upsert on PostgreSQL (seq from the sequence); SQLite bumps a counter first.
        if self._single is not None:
            self._single.put(self._placement_row(job))
            return
        self._db.run(lambda conn: self._enqueue(conn, job), single=not self._db.sqlite)

    def enqueue_many(self, jobs: Sequence[Job]) -> None:
        """Upsert several jobs in one transaction, in list order: by COPY on PostgreSQL
        (see `bulk_copy`), in one statement elsewhere."""
        if jobs:
            self._db.refuse_lost_file()
            self._db.run(lambda conn: self._enqueue_many(conn, jobs))

    def _enqueue_many(self, conn: Connection, jobs: Sequence[Job]) -> None:
        by_id = {job.id: job for job in jobs}  # one row per id: the last one wins
        batch = list(by_id.values())
        rows = self._placement_dicts(batch)
        if self._copier.usable(conn):
            self._copier.put_many(conn, rows)
            return
        seqs = self._db.next_seqs(conn, JOB_COUNTER, len(batch))
        for row, seq in zip(rows, seqs, strict=True):
            row["seq"] = seq
        self._db.put_many(conn, rows, record=False)

    def enqueue_new(self, job: Job) -> Job | None:
        """Write `job` unless its id is queued or recorded, or its unique key is held;
        the job already there, or None when written (see `unique`)."""
        self._db.refuse_lost_file()
        try:
            return rerun_on_contention(lambda: self._db.run(lambda c: self._adder.add(c, job)))
        except Found as found:
            return found.job

    def enqueue_new_many(self, jobs: Sequence[Job]) -> list[Job | None]:
        """`enqueue_new` for each job in one transaction, each in its own savepoint."""
        if not jobs:
            return []
        self._db.refuse_lost_file()
        return rerun_on_contention(lambda: self._db.run(lambda c: [self._add(c, j) for j in jobs]))

    def _add(self, conn: Connection, job: Job) -> Job | None:
        """`enqueue_new` of one job in a savepoint of `conn`'s transaction, which a job
        found after a write rolls back."""
        try:
            with conn.begin_nested():
                return self._adder.add(conn, job)
        except Found as found:
            return found.job

    def enqueue_new_in_tx(self, conn: Any, job: Job) -> Job | None:
        """`enqueue_new` inside the caller's open transaction on `conn` (checked as by
        `enqueue_in_tx`); a job already there leaves the caller's writes as they were."""
        with self._in_callers_tx(conn):
            return rerun_on_contention(lambda: self._add(conn, job))

    def enqueue_in_tx(self, conn: Any, job: Job) -> None:
        """Enqueue inside the caller's open transaction on `conn` (the outbox row): it
        commits or rolls back with the caller's own writes. `conn` must be a SQLAlchemy
        `Connection` to this queue's database with a transaction begun (a connection
        to another database is refused, see `same_database`)."""
        with self._in_callers_tx(conn):
            self._enqueue(conn, job)

    def revive(self, dead: Job, fresh: Job) -> bool:
        """An operator's retry of a dead letter, in one transaction: only while the store
        still records `dead.id` as failed (the row is locked while this looks), put
        `fresh` in the queue, ready or parked by its status, and record it. False,
        with nothing written, once it is no longer a dead letter."""
        sql = self._db.sql

        def work(conn: Connection) -> bool:
            status = conn.execute(sql.store_status, {"job_id": str(dead.id)}).scalar()
            if status != JobStatus.FAILED.value:
                return False
            if fresh.unique is not None:
                holder = self._adder.lock(conn, fresh.unique, str(fresh.id), fresh.run_at)
                if holder is not None and holder.id != fresh.id:
                    raise UniqueKeyHeld(fresh.unique.key, holder)  # rolls back
            self._enqueue(conn, fresh)
            write_record(self._db, conn, fresh)
            mark_awaited(self._db, conn, fresh.id)  # jobs may still wait for it
            return True

        self._db.refuse_lost_file()
        return rerun_on_contention(lambda: self._db.run(work))
