"""The SQL `enqueue_new`: write a job unless its id or its unique key is taken.

One transaction does it all (the caller's own, for `enqueue_new_in_tx`):

1. the queue row with the job's id, if any: the job is there, nothing is written;
2. with a unique key, its `<prefix>_unique` row: inserted if absent (`ON CONFLICT DO
   NOTHING`); if present, read `FOR UPDATE` (PostgreSQL; SQLite's `BEGIN
   IMMEDIATE` already serialises writers), its holder's state read from the queue
   or the store, and `core.uniqueness.lock_holds` applied: held, the holder is the
   answer; stale, the row is moved to the new job, guarded by its old holder;
3. the queue row, `INSERT ... ON CONFLICT (id) DO NOTHING`: a concurrent enqueuer
   of the same id that committed first makes it a no-op, and that job is the answer;
4. the store, for a record with the id (read after the insert, so a job that
   finished meanwhile is seen): the recorded job is the answer.

A found job after a write (steps 3 and 4) raises `Found` so the transaction, or
the savepoint around one job, rolls the lock change back.

On PostgreSQL, concurrent inserts of one key (or id) wait for the first
transaction and then see its row: of any number of concurrent enqueuers exactly
one writes, and the others return its job.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

from sqlalchemy import Connection, Executable, Select, bindparam, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from ....core import Job, JobStatus, WriteRetryPolicy
from ....core.job import UniqueLock
from ....core.uniqueness import lock_holds, state_names
from ...ports import Place
from ...retrying import Retrier
from ...unique import PLACE_NAMES, found_in_queue, stored_job
from .database import Database
from .engine import from_micros, to_micros
from .schema import JOB_COUNTER

T = TypeVar("T")


class Found(Exception):
    """Raised inside the transaction when the job is already there after a write was
    made: the write rolls back and `job` is the answer."""

    def __init__(self, job: Job) -> None:
        super().__init__(str(job.id))
        self.job = job


class SqlAdder:
    """`enqueue_new` for one schema: statements built once, run inside a transaction.

    `placement(job)` gives every job_queue column but `seq`, as the queue writes them.
    """

    def __init__(self, db: Database, placement: Callable[[Job], dict[str, Any]]) -> None:
        self._db, self._placement = db, placement
        schema = db.schema
        q, store, u = schema.job_queue, schema.job_store, schema.unique_keys
        dialect_insert = sqlite_insert if db.sqlite else pg_insert
        self._queued: Select[tuple[str, str]] = select(q.c.status, q.c.payload).where(
            q.c.id == bindparam("id")
        )
        self._recorded: Select[tuple[str, str]] = select(store.c.status, store.c.payload).where(
            store.c.id == bindparam("id")
        )
        job_row = dialect_insert(q)
        if not db.sqlite:
            job_row = job_row.values(seq=schema.job_seq.next_value())
        # RETURNING says whether a row went in (the driver's rowcount may not).
        self._insert_job: Executable = job_row.on_conflict_do_nothing(
            index_elements=[q.c.id]
        ).returning(q.c.id)
        self._take_lock: Executable = (
            dialect_insert(u).on_conflict_do_nothing(index_elements=[u.c.key]).returning(u.c.key)
        )
        self._read_lock: Select[tuple[str, str, int | None]] = (
            select(u.c.job_id, u.c.states, u.c.expires_at)
            .where(u.c.key == bindparam("key"))
            .with_for_update()
        )
        self._move_lock: Executable = (
            update(u)
            .where(u.c.key == bindparam("lock_key"), u.c.job_id == bindparam("holder"))
            .values(
                job_id=bindparam("new_id"),
                states=bindparam("new_states"),
                expires_at=bindparam("new_expires_at"),
            )
            .returning(u.c.key)
        )

    def add(self, conn: Connection, job: Job) -> Job | None:
        """The job already there, or None once `job` is written (may raise `Found`)."""
        job_id = str(job.id)
        queued = self._in_queue(conn, job_id)
        if queued is not None:
            return queued
        if job.unique is not None:
            holder = self.lock(conn, job.unique, job_id, job.created_at)
            if holder is not None:
                return holder
        row = {"id": job_id, **self._placement(job)}
        if self._db.sqlite:
            row["seq"] = self._db.bump(conn, JOB_COUNTER)
        if conn.execute(self._insert_job, row).first() is None:
            raise Found(self._in_queue(conn, job_id) or self._in_store(conn, job_id) or job)
        recorded = self._in_store(conn, job_id)
        if recorded is not None:
            raise Found(recorded)
        return None

    def lock(self, conn: Connection, lock: UniqueLock, job_id: str, now: datetime) -> Job | None:
        """Take `lock` for `job_id`, or return the job that holds it; may raise the
        contention that `rerun_on_contention` reruns the transaction for."""
        expires = None if lock.expires_at is None else to_micros(lock.expires_at, "unique_for")
        mine = {"job_id": job_id, "states": state_names(lock), "expires_at": expires}
        if conn.execute(self._take_lock, {"key": lock.key, **mine}).first() is not None:
            return None
        found = conn.execute(self._read_lock, {"key": lock.key}).one_or_none()
        if found is not None:
            holder_id = str(found.job_id)
            held = _stored_lock(lock.key, found.states, found.expires_at)
            holder = self._in_queue(conn, holder_id) or self._in_store(conn, holder_id)
            if holder is not None and lock_holds(held, holder.status, now):
                return holder
            moved = conn.execute(
                self._move_lock,
                {
                    "lock_key": lock.key,
                    "holder": holder_id,
                    "new_id": job_id,
                    "new_states": mine["states"],
                    "new_expires_at": expires,
                },
            )
            if moved.first() is not None:
                return None
        # The row changed under a reader that does not lock it: let the caller rerun.
        raise _Contended()

    def _in_queue(self, conn: Connection, job_id: str) -> Job | None:
        row = conn.execute(self._queued, {"id": job_id}).one_or_none()
        if row is None:
            return None
        job = stored_job(row.payload, job_id)
        return found_in_queue(PLACE_NAMES.get(row.status, Place.SCHEDULED), job)

    def _in_store(self, conn: Connection, job_id: str) -> Job | None:
        row = conn.execute(self._recorded, {"id": job_id}).one_or_none()
        return None if row is None else stored_job(row.payload, job_id)


class _Contended(Exception):
    """The lock row moved between our read and our guarded update (only where reads
    take no row lock); the whole unit of work is run again."""


def _stored_lock(key: str, states: str, expires_at: int | None) -> UniqueLock:
    chosen = [JobStatus(name) for name in states.split(",") if name in _STATE_NAMES]
    return UniqueLock(key, chosen, None if expires_at is None else from_micros(expires_at))


_STATE_NAMES = frozenset(s.value for s in JobStatus)


#: A unit of work that met a lock row moving under it runs again, up to eight times.
_RERUN = Retrier(
    WriteRetryPolicy(initial_s=0.0005, max_s=0.004, jitter=True, max_attempts=8),
    transient=lambda exc: isinstance(exc, _Contended),
)


def rerun_on_contention(work: Callable[[], T]) -> T:
    """`work()`, again while it meets a lock row that moved under it."""
    return _RERUN.call(work)
