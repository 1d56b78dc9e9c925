"""The SQL backend's schema changes, made on purpose: `migrate`, and the check every
other process makes before it starts (`schema_problem`).

Schema changes never happen as a side effect of starting a process: `migrate(engine)`
creates or upgrades the tables and records this version's schema mark; every other
process reads the mark once (`schema_problem`) and refuses to start on a missing or
different schema, so an application role with DML rights only can run workers.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Connection, Engine, text
from sqlalchemy.schema import CreateIndex

from .ddl import mark_label, mark_statement, schema_mark, sqlite_mark
from .engine import SQLITE_BEGIN_OPTION
from .postgres_ddl import claim_ddl, notify_ddl, partial_index_ddl, storage_ddl
from .schema import SCHEMA, Schema
from .upgrade import add_limit_columns


def _read_mark(conn: Connection, schema: Schema) -> tuple[bool, str | int | None]:
    """(whether the queue table exists, the mark it carries), in one catalog read that
    takes no lock. On SQLite the table's existence is read only when no mark is found."""
    if conn.dialect.name == "postgresql":
        row = conn.execute(
            text(
                "SELECT to_regclass(:t) IS NOT NULL, obj_description(to_regclass(:t), 'pg_class')"
            ),
            {"t": schema.job_queue.fullname},
        ).one()
        comment = row[1] if isinstance(row[1], str) else None
        # A comment someone else wrote on the table is no mark.
        return bool(row[0]), comment if comment and comment.startswith("conveyor schema ") else None
    version = conn.exec_driver_sql("PRAGMA user_version").scalar()
    if version:
        return True, int(version)
    exists = conn.execute(
        text("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = :t"),
        {"t": schema.job_queue.name},
    ).first()
    return exists is not None, None


def _wanted(conn: Connection, schema: Schema) -> str | int:
    mark = schema_mark(conn.dialect.name, schema)
    return mark if conn.dialect.name == "postgresql" else sqlite_mark(mark)


def schema_is_current(conn: Connection, schema: Schema = SCHEMA) -> bool:
    """True when the tables carry this version's schema mark (one catalog read, no lock)."""
    return _read_mark(conn, schema)[1] == _wanted(conn, schema)


def _reader(engine: Engine) -> Connection:
    # A read: on SQLite it must not take the write lock (BEGIN IMMEDIATE).
    return engine.connect().execution_options(**{SQLITE_BEGIN_OPTION: "DEFERRED"})


def schema_problem(engine: Engine, schema: Schema = SCHEMA) -> str | None:
    """None when the database carries this version's schema; else one line saying what is
    found and what to run. One catalog read, no lock and no DDL: any role may call it."""
    with _reader(engine) as conn:
        exists, found = _read_mark(conn, schema)
        wanted = _wanted(conn, schema)
    if found == wanted:
        return None
    fix = 'run "conveyor migrate" (or apply the SQL of "conveyor migrate --sql")'
    if not exists:
        return f"the database schema is missing: {fix}"
    at = "an unmarked earlier version" if found is None else f"version {mark_label(found)}"
    need = mark_label(wanted)
    # A newer Conveyor leaves its mark: an unmarked schema is an earlier version's.
    newer = "" if found is None else "; if a newer Conveyor migrated it, run that one instead"
    return f"the database schema is at {at}, this Conveyor needs version {need}: {fix}{newer}"


def migrate(engine: Engine, schema: Schema = SCHEMA) -> bool:
    """Create whatever of the schema is missing and record this version's schema mark;
    True when it ran DDL, False when the schema was already current.

    Safe to call again and from many processes started one after another; existing
    tables keep their columns and rows, and get the indexes and functions this version
    added. It needs the right to create tables (the owner's role); the processes that
    then enqueue and work need only DML rights. When the tables already carry the mark
    it runs no DDL: DDL takes table locks that would queue behind running workers.
    """
    with _reader(engine) as conn:
        if schema_is_current(conn, schema):
            return False
    with engine.connect() as conn, _one_migrator(conn):
        return _migrate(conn, schema)


@contextmanager
def _one_migrator(conn: Connection) -> Iterator[None]:
    """One migrator at a time, from the first CREATE on: two processes creating one
    table or trigger at once fail. On PostgreSQL a session lock, taken before the
    migration's transaction begins, so that its reads see what the one before it
    committed (a lookup by name in a transaction begun earlier may not); SQLite's
    `BEGIN IMMEDIATE` serialises migrators already."""
    if conn.dialect.name != "postgresql":
        yield
        return
    conn.execute(text("SELECT pg_advisory_lock(4242001)"))
    conn.commit()
    try:
        yield
    finally:
        try:
            conn.rollback()
            conn.execute(text("SELECT pg_advisory_unlock(4242001)"))
            conn.commit()
        except Exception:
            conn.invalidate()  # the session goes, and its lock with it


def _migrate(conn: Connection, schema: Schema) -> bool:
    tables = schema.tables_for(conn.dialect)
    postgres = conn.dialect.name == "postgresql"
    with conn.begin():
        if schema_is_current(conn, schema):
            return False  # another process migrated it while this one waited
        schema.metadata.create_all(conn, tables=tables, checkfirst=True)
        # create_all adds no column to a table that exists: add the ones limits need
        # (before the indexes on them), and fill them in from the payloads.
        add_limit_columns(conn, schema)
        # create_all skips the indexes of a table that already exists (one made by an
        # earlier version): add the ones it lacks.
        if postgres:
            for statement in partial_index_ddl(schema):
                conn.exec_driver_sql(statement)
        for table in tables:
            for index in sorted(table.indexes, key=lambda i: str(i.name)):
                conn.execute(CreateIndex(index, if_not_exists=True))
        if postgres:
            for statement in (*notify_ddl(schema), *claim_ddl(schema), *storage_ddl(schema)):
                conn.exec_driver_sql(statement)
        conn.exec_driver_sql(mark_statement(conn.dialect, schema))
    return True


def create_tables(engine: Engine, schema: Schema = SCHEMA) -> None:
    """`migrate(engine, schema)`, under the name earlier versions gave it."""
    migrate(engine, schema)
