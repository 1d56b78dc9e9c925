"""The SQL backend's unit of work: one transaction per call, transient failures rerun.

`Database` runs each unit of work in its own transaction and is the one place where
transient failures — SQLite's `database is locked`, a PostgreSQL deadlock or
serialization failure, a dropped connection — are retried, through the shell's
`Retrier`, within the budget it is given (`lock_retry_s`). Nothing above it retries
again, so the budget is the whole wait an operation may take before it gives up.

It also hands out the ordering values placements take (`seq`, `recorded_seq`): from
a sequence on PostgreSQL, from a counter row bumped in the same transaction on SQLite.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy import BigInteger, ColumnElement, Connection, Engine, event, func, literal, select
from sqlalchemy.exc import DBAPIError

from ....core import ValidationError, WriteRetryPolicy
from ...retrying import Retrier
from .database_file import DatabaseFile
from .engine import SQLITE_BEGIN_OPTION, SUPPORTED, SUPPORTED_NAMES, configure_sqlite
from .schema import JOB_COUNTER, STORE_COUNTER, Schema
from .statements import Statements

__all__ = ["Database", "is_transient", "rerunnable"]

T = TypeVar("T")

#: SQLSTATEs after which PostgreSQL rolled the whole transaction back: safe to rerun.
_RETRYABLE_SQLSTATES = frozenset({"40001", "40P01"})


def rerunnable(exc: Exception) -> bool:
    """A database error after which the unit of work may simply run again."""
    return isinstance(exc, DBAPIError) and is_transient(exc)


def is_transient(exc: BaseException) -> bool:
    """True for errors after which nothing was committed and the work may simply rerun."""
    if isinstance(exc, DBAPIError) and exc.connection_invalidated:
        # The server went away (restart, terminated session). If it was the commit that
        # failed, rerunning is still safe: every unit of work is fenced or idempotent.
        return True
    orig = exc.orig if isinstance(exc, DBAPIError) else exc
    if isinstance(orig, sqlite3.OperationalError):
        message = str(orig).lower()
        return "locked" in message or "busy" in message
    return getattr(orig, "sqlstate", None) in _RETRYABLE_SQLSTATES


class Database:
    """Runs units of work in their own transaction, rerunning transient failures."""

    def __init__(self, engine: Engine, schema: Schema, lock_retry_s: float) -> None:
        name = engine.dialect.name
        if name not in SUPPORTED:
            raise ValidationError.of(
                "engine", f"dialect {name!r} is not supported; use {SUPPORTED_NAMES}"
            )
        if lock_retry_s < 0:
            raise ValidationError.of("lock_retry_s", "must be >= 0")
        if name == "sqlite":
            configure_sqlite(engine)
        self.engine = engine
        self.schema = schema
        self.sqlite = name == "sqlite"
        #: The file a SQLite database lives in, watched for being deleted or replaced.
        self.file = DatabaseFile.of(engine.url.database) if self.sqlite else None
        if self.file is not None:
            file = self.file
            event.listen(engine, "connect", lambda *_: file.opened())
        self.sql = Statements(schema, name)
        self.lock_retry_s = lock_retry_s
        # Many writers contend for one SQLite lock: short, jittered, capped waits.
        self.retry = WriteRetryPolicy(
            initial_s=0.002, max_s=0.2, jitter=True, max_attempts=None, give_up_after_s=lock_retry_s
        )
        self._retries = 0
        self._retries_lock = threading.Lock()
        #: Reruns a unit of work after a transient failure (`is_transient`).
        self.retrier = Retrier(self.retry, transient=rerunnable, on_retry=self._counted)

    def refuse_lost_file(self) -> None:
        """Before a write that adds work: `DatabaseFileLost` when this SQLite
        database's file was deleted or replaced since this process opened it."""
        if self.file is not None:
            self.file.refuse_if_lost()

    @property
    def retries(self) -> int:
        with self._retries_lock:
            return self._retries

    def run(
        self, work: Callable[[Connection], T], *, write: bool = True, single: bool = False
    ) -> T:
        """`work(conn)` in one transaction, committed when it returns.

        `single` says `work` runs one statement: on PostgreSQL it then runs in
        autocommit, where the statement is its own transaction, saving the BEGIN and
        COMMIT round trips.

        A transient failure (`database is locked`, a PostgreSQL deadlock or
        serialization failure) rolled everything back, so rerunning cannot apply
        anything twice; reruns back off exponentially with jitter and stop after
        `lock_retry_s`, re-raising the last error. A dropped connection may have
        lost the answer to a commit that happened: `work` is then run again, so every
        unit of work is fenced, idempotent, or (a claim) finds what its first run
        took before taking anything else.
        """

        def once() -> T:
            with self.engine.connect() as conn:
                if self.sqlite and not write:
                    conn = conn.execution_options(**{SQLITE_BEGIN_OPTION: "DEFERRED"})
                elif single and not self.sqlite:
                    return work(conn.execution_options(isolation_level="AUTOCOMMIT"))
                with conn.begin():
                    return work(conn)

        return self.retrier.call(once)

    def _counted(self, *_: object) -> None:
        with self._retries_lock:
            self._retries += 1

    def next_seqs(self, conn: Connection, counter: str, n: int) -> list[int]:
        """`n` fresh values in increasing order, in one statement."""
        if n <= 0:
            return []
        if conn.dialect.supports_sequences:
            seq = self.schema.job_seq if counter == JOB_COUNTER else self.schema.store_seq
            series = func.generate_series(1, n).table_valued("n")
            fresh = select(seq.next_value()).select_from(series)
            return sorted(int(v) for v in conn.execute(fresh).scalars())
        last = self.bump(conn, counter, n)
        return list(range(last - n + 1, last + 1))

    def bump(self, conn: Connection, counter: str, by: int = 1) -> int:
        """Add `by` to a SQLite counter row inside `conn`'s transaction; the new value."""
        return int(conn.execute(self.sql.bump, {"name": counter, "by": by}).scalar_one())

    def put(self, conn: Connection, row: dict[str, Any], *, record: bool) -> None:
        """Upsert one job_queue row (or, with `record`, one job_store row) with a fresh
        seq; `row` holds every other column."""
        sql = self.sql
        nextval = sql.upsert_record_nextval if record else sql.upsert_job_nextval
        if nextval is not None:
            conn.execute(nextval, row)
            return
        column, counter = ("recorded_seq", STORE_COUNTER) if record else ("seq", JOB_COUNTER)
        row[column] = self.bump(conn, counter)
        conn.execute(sql.upsert_record if record else sql.upsert_job, row)

    def put_many(self, conn: Connection, rows: list[dict[str, Any]], *, record: bool) -> None:
        """Upsert several rows (distinct ids, every column given, seq included): one
        statement on PostgreSQL, one executemany elsewhere."""
        sql = self.sql
        many = sql.upsert_records_many if record else sql.upsert_jobs_many
        if many is None:
            conn.execute(sql.upsert_record if record else sql.upsert_job, rows)
            return
        conn.execute(many, {"rows": json.dumps(rows, ensure_ascii=False)})

    def next_seq(self, conn: Connection, counter: str) -> ColumnElement[int]:
        """A fresh value, larger than every one handed out before, as a SQL expression.

        On PostgreSQL a sequence's `nextval` (per row, no shared hot row); on SQLite a
        counter row bumped inside `conn`'s transaction, safe because SQLite has one
        writer at a time.
        """
        if conn.dialect.supports_sequences:
            seq = self.schema.job_seq if counter == JOB_COUNTER else self.schema.store_seq
            return seq.next_value()
        return literal(self.bump(conn, counter), BigInteger)
