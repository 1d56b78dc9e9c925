"""The single enqueue's upsert, sent on the driver's own connection.

One `Runtime.enqueue` is one row: the work is the server's, and SQLAlchemy's
execution machinery (a `Connection`, its execution context and result, the
isolation level set and reset around an autocommit statement, the events) cost more
CPU than the statement itself. So this one statement goes straight to the pooled
DBAPI connection, with its SQL text written once from the schema:

* PostgreSQL: one `INSERT ... ON CONFLICT (id) DO UPDATE` in autocommit (the
  statement is its own transaction: one round trip), prepared by psycopg on the
  connection, `seq` from the sequence inside the statement.
* SQLite: `BEGIN IMMEDIATE`, the counter bump (`seq`), the upsert, `COMMIT`, through
  the sqlite3 module's statement cache.

Everything else about a unit of work holds: the transient failures (`database is
locked`, a dropped connection) come out as SQLAlchemy's `DBAPIError`, with a broken
connection invalidated, so `Database.retrier` reruns the upsert exactly as it
reruns any other unit of work; the pool, its `connect` configuration and its
checkout are SQLAlchemy's. The row is the same as `Database.put` writes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy.exc import DBAPIError

from .database import Database
from .schema import JOB_COUNTER, Schema
from .statements import JOB_COLUMNS

__all__ = ["SinglePut"]


def _upsert_text(schema: Schema, *, sqlite: bool) -> str:
    """The upsert of one job_queue row, parameters in `JOB_COLUMNS` order (then `seq`
    on SQLite; PostgreSQL draws it from the sequence in the statement)."""
    table = schema.job_queue.name
    mark = "?" if sqlite else "%s"
    values = [mark] * len(JOB_COLUMNS)
    values.append(mark if sqlite else f"nextval('{schema.job_seq.name}')")
    updated = ", ".join(f"{c} = excluded.{c}" for c in (*JOB_COLUMNS, "seq") if c != "id")
    return (
        f"INSERT INTO {table} ({', '.join(JOB_COLUMNS)}, seq) VALUES ({', '.join(values)}) "
        f"ON CONFLICT (id) DO UPDATE SET {updated}"
    )


def _bump_text(schema: Schema) -> str:
    """SQLite: the job counter's next value (as `Database.bump` by one)."""
    counters = schema.counters.name
    return (
        f"INSERT INTO {counters} (name, value) VALUES ('{JOB_COUNTER}', 1) "
        f"ON CONFLICT (name) DO UPDATE SET value = {counters}.value + 1 RETURNING value"
    )


#: The drivers whose connections `SinglePut` speaks to (psycopg 3, the sqlite3 module);
#: an engine on another one keeps `Database.put`.
DRIVERS = frozenset({"psycopg", "pysqlite"})


class SinglePut:
    """Upserts one job_queue row in its own transaction (see the module docstring)."""

    @classmethod
    def usable(cls, db: Database) -> bool:
        """True when `db`'s engine speaks through a driver this knows."""
        return db.engine.dialect.driver in DRIVERS

    def __init__(self, db: Database) -> None:
        self._db = db
        self._sqlite = db.sqlite
        self._upsert = _upsert_text(db.schema, sqlite=db.sqlite)
        self._bump = _bump_text(db.schema)

    def put(self, row: Sequence[Any]) -> None:
        """Upsert the row whose values are `row`, in `JOB_COLUMNS` order, with a fresh
        `seq`; transient failures rerun within the database's retry budget."""
        self._db.retrier.call(lambda: self._once(row))

    def _once(self, row: Sequence[Any]) -> None:
        pooled = self._db.engine.raw_connection()
        raw: Any = pooled.driver_connection
        dbapi = self._db.engine.dialect.loaded_dbapi
        statement = self._upsert
        try:
            if self._sqlite:
                statement = "BEGIN IMMEDIATE"
                raw.execute(statement)
                try:
                    statement = self._bump
                    (seq,) = raw.execute(statement).fetchone()
                    statement = self._upsert
                    raw.execute(statement, (*row, seq))
                    statement = "COMMIT"
                    raw.execute(statement)
                except BaseException:
                    if raw.in_transaction:
                        raw.execute("ROLLBACK")
                    raise
            else:
                raw.autocommit = True
                raw.execute(statement, row, prepare=True)
                raw.autocommit = False
        except dbapi.Error as exc:
            broken = self._broken(raw, dbapi)
            if broken:
                pooled.invalidate(exc)
            raise DBAPIError.instance(
                statement,
                None,
                exc,
                dbapi.Error,
                hide_parameters=True,
                connection_invalidated=broken,
                dialect=self._db.engine.dialect,
            ) from exc
        finally:
            pooled.close()

    def _broken(self, raw: Any, dbapi: Any) -> bool:
        """Whether the driver connection can no longer be used (it goes, not back to the
        pool); a PostgreSQL connection still in autocommit is put back out of it."""
        if self._sqlite:
            return False
        if raw.closed or raw.broken:
            return True
        try:
            raw.autocommit = False
        except dbapi.Error:
            return True
        return False
