"""Is the caller's connection to the queue's own database? Asked before an outbox write.

`enqueue_in_tx(conn, ...)` writes the job with the caller's connection, so the job
commits with the caller's change. A connection to another database (the
application's own, or another environment's queue) would put the job where no
worker of this queue looks: with no tables there, a driver error; with tables
there, a job silently lost to this queue. So the queue refuses it, naming `conn`,
the database it reaches and the one expected, before it writes anything.

"The same database" is decided once per engine (by its URL) and remembered, so the
hot path costs an attribute read and a dictionary lookup, never a round trip:

* the queue's own engine is the same database, with nothing to ask;
* another dialect (a SQLite connection to a PostgreSQL queue) is another database;
* SQLite: the same file, by its real path (`PRAGMA database_list`, in-process);
* PostgreSQL: an engine whose URL names the same host, port (or socket folder) and
  database is the same, whoever logs in; otherwise both servers are asked once for
  their database name and start time (`current_database()`,
  `pg_postmaster_start_time()`), so `localhost` and `127.0.0.1`, or a socket and a
  TCP port, to one server agree, and two servers never do. Then, once, both are asked
  in which schema their search_path finds the queue's table: the statements name it
  unqualified, so a connection that finds another schema's (or none) is refused.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from typing import Any

from sqlalchemy import Connection, Engine, text
from sqlalchemy.engine import URL

from ....core import ValidationError

_PG_IDENTITY = text("SELECT current_database(), pg_postmaster_start_time()")
#: The schema where a connection's search_path finds a table (none: not found).
_PG_TABLE_SCHEMA = text(
    "SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
    " WHERE c.oid = to_regclass(:name)"
)


class SameDatabase:
    """Checks that connections reach `engine`'s database, and on PostgreSQL its
    `table` in the same schema; verdicts kept per URL."""

    def __init__(self, engine: Engine, table: str) -> None:
        self._engine, self._table = engine, table
        #: Engine URL -> None (same database) or why not.
        self._verdicts: dict[URL, str | None] = {}
        self._lock = threading.Lock()

    def check(self, conn: Connection) -> None:
        """Raise `ValidationError` naming `conn` unless it reaches the queue's database."""
        engine = conn.engine
        if engine is self._engine:
            return
        url = engine.url
        try:
            verdict = self._verdicts[url]
        except KeyError:
            verdict = self._decide(conn)
            with self._lock:
                self._verdicts[url] = verdict
        if verdict is not None:
            raise ValidationError.of("conn", verdict)

    def _decide(self, conn: Connection) -> str | None:
        mine, theirs = self._engine, conn.engine
        if theirs.dialect.name != mine.dialect.name:
            return _refusal(_named(theirs), _named(mine))
        if mine.dialect.name == "sqlite":
            # A raw connection begins no transaction: a BEGIN IMMEDIATE here would wait
            # for the write lock the caller's own transaction may hold on this file.
            own = mine.raw_connection()
            try:
                expected = _sqlite_file(own.cursor().execute("PRAGMA database_list"))
            finally:
                own.close()
            found = _sqlite_file(conn.exec_driver_sql("PRAGMA database_list"))
            if found and found == expected:
                return None
            return _refusal(f"SQLite file {found or '(in memory)'}", f"SQLite file {expected}")
        if _address(theirs.url) != _address(mine.url):
            found_id = conn.execute(_PG_IDENTITY).one()
            with mine.connect() as probe:
                expected_id = probe.execute(_PG_IDENTITY).one()
            if tuple(found_id) != tuple(expected_id):
                return _refusal(
                    f"{_named(theirs)} (database {found_id[0]!r})",
                    f"{_named(mine)} (database {expected_id[0]!r})",
                )
        # One database, but the statements name the tables unqualified: the caller's
        # search_path must find the queue's own, not another schema's (or none).
        where = {"name": self._table}
        found_in = conn.execute(_PG_TABLE_SCHEMA, where).scalar()
        with mine.connect() as probe:
            expected_in = probe.execute(_PG_TABLE_SCHEMA, where).scalar()
        if found_in == expected_in:
            return None
        return (
            f"finds the queue's table {self._table} "
            f"{'nowhere' if found_in is None else f'in schema {found_in!r}'} on its "
            f"search_path, where the queue's is in schema {expected_in!r}: a job written "
            "there would never reach this queue's workers; enqueue with a connection "
            "whose search_path is the queue's (the config's `url`, its "
            "`options=-csearch_path=...` included)"
        )


def _refusal(found: str, expected: str) -> str:
    return (
        f"is a connection to {found}, not to the queue's database {expected}: a job "
        "written there would never reach this queue's workers; enqueue with a "
        "connection to the queue's database (the config's `url`)"
    )


def _named(engine: Engine) -> str:
    """The engine's URL without its password."""
    return engine.url.render_as_string(hide_password=True)


def _sqlite_file(rows: Iterable[Any]) -> str:
    """The real path of the main database file in `PRAGMA database_list`'s rows
    ('' for a database in memory)."""
    for row in rows:
        if row[1] == "main":
            return os.path.realpath(row[2]) if row[2] else ""
    return ""


def _address(url: URL) -> tuple[Any, ...]:
    """Where a server URL leads, whoever logs in and through whichever driver."""
    return (url.host, url.port or 5432, url.database, url.query.get("host"))
