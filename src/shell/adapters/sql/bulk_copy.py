"""PostgreSQL: many job rows upserted by `COPY`, in the caller's transaction.

`COPY ... FROM STDIN` is PostgreSQL's fastest way in: rows stream in its text
format, escaped by psycopg in C, with no statement to parse per row and no JSON
document for the server to take apart. COPY cannot upsert, so the rows land in a
temporary staging table first (one per connection, emptied by every commit), and
one `INSERT ... SELECT ... ORDER BY ord ON CONFLICT (id) DO UPDATE` moves them into
the queue. That statement draws each row's `seq` from the sequence: PostgreSQL
evaluates a volatile select-list expression such as `nextval` after the sort, so the
rows take their `seq` in list order and FIFO is the order of the list.

The staging table's columns are the ones the caller gives (the job's placement
columns, whatever they are in this version), typed as in the queue table; its name
carries a digest of them, so a process that outlives a schema upgrade stages into
a table of the new shape.

Only psycopg 3 connections have `cursor.copy()`, and only a role with the
TEMPORARY privilege on the database (every role has it unless it was revoked) can
stage; `RowCopier.usable(conn)` says whether this connection can, and the queue
otherwise upserts in one statement as before.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import Connection, Table
from sqlalchemy.engine.interfaces import Dialect
from sqlalchemy.exc import DBAPIError

from .schema import Schema

__all__ = ["RowCopier"]

_MAY_STAGE = "SELECT has_database_privilege(current_database(), 'TEMPORARY')"


class _Plan:
    """The three statements of one bulk upsert for one list of columns."""

    def __init__(self, table: Table, sequence: str, columns: tuple[str, ...], dialect: Dialect):
        digest = hashlib.sha256(",".join(columns).encode()).hexdigest()[:8]
        staging = f"{table.name}_staging_{digest}"
        typed = ", ".join(f"{c} {table.c[c].type.compile(dialect=dialect)}" for c in columns)
        listed = ", ".join(columns)
        self.create = (
            f"CREATE TEMPORARY TABLE IF NOT EXISTS {staging} ({typed}, ord bigint) "
            "ON COMMIT DELETE ROWS"
        )
        self.copy = f"COPY {staging} ({listed}, ord) FROM STDIN"
        updated = ", ".join(f"{c} = EXCLUDED.{c}" for c in (*columns, "seq") if c != "id")
        self.move = (
            f"INSERT INTO {table.name} ({listed}, seq) "
            f"SELECT {listed}, nextval('{sequence}') FROM {staging} ORDER BY ord "
            f"ON CONFLICT (id) DO UPDATE SET {updated}"
        )


class RowCopier:
    """Upserts many `job_queue` rows by COPY (see the module docstring)."""

    def __init__(self, schema: Schema) -> None:
        self._table = schema.job_queue
        self._sequence = schema.job_seq.name
        self._plans: dict[tuple[str, ...], _Plan] = {}
        self._may_stage: bool | None = None  # asked once, on first use

    def usable(self, conn: Connection) -> bool:
        """True when `conn` can COPY (PostgreSQL through psycopg 3) and its role may
        create the temporary staging table."""
        if conn.dialect.name != "postgresql" or conn.dialect.driver != "psycopg":
            return False
        if self._may_stage is None:
            self._may_stage = bool(conn.exec_driver_sql(_MAY_STAGE).scalar())
        return self._may_stage

    def put_many(self, conn: Connection, rows: Sequence[dict[str, Any]]) -> None:
        """Upsert `rows` (distinct ids; the same columns in each, `seq` apart) inside
        `conn`'s open transaction, each with a fresh `seq` in list order."""
        if not rows:
            return
        columns = tuple(rows[0])
        plan = self._plans.get(columns)
        if plan is None:
            plan = self._plans[columns] = _Plan(self._table, self._sequence, columns, conn.dialect)
        conn.exec_driver_sql(plan.create)
        _copy_in(conn, plan.copy, ((*(row[c] for c in columns), n) for n, row in enumerate(rows)))
        conn.exec_driver_sql(plan.move)


def _copy_in(conn: Connection, statement: str, rows: Iterable[tuple[Any, ...]]) -> None:
    """Stream `rows` through `COPY ... FROM STDIN` on `conn`'s driver connection, in its
    transaction. A driver error comes out as SQLAlchemy's would (a `DBAPIError`, the
    connection invalidated when it broke), so the unit of work around it retries or
    fails exactly as for any other statement."""
    raw: Any = conn.connection.dbapi_connection  # a psycopg 3 Connection (see `copies`)
    dbapi = conn.dialect.loaded_dbapi
    try:
        with raw.cursor() as cursor, cursor.copy(statement) as copy:
            for row in rows:
                copy.write_row(row)
    except dbapi.Error as exc:
        broken = bool(getattr(raw, "broken", False) or raw.closed)
        if broken:
            conn.invalidate(exc)
        raise DBAPIError.instance(
            statement, None, exc, dbapi.Error, hide_parameters=True, connection_invalidated=broken
        ) from exc
