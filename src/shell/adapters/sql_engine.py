"""The SQL backend's engines and its unit of work.

`make_engine` builds an engine for SQLite (configured by `configure_sqlite`) or
PostgreSQL (psycopg 3). `Database` runs each unit of work in its own transaction
and is the one place where transient failures — SQLite's `database is locked`, a
PostgreSQL deadlock or serialization failure, a dropped connection — are retried,
within the budget it is given (`lock_retry_s`). Nothing above it retries again, so
the budget is the whole wait an operation may take before it gives up.

Times are stored as integer microseconds since the Unix epoch, UTC (`to_micros`,
`from_micros`).
"""

from __future__ import annotations

import json
import sqlite3
import threading
import weakref
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from sqlalchemy import (
    URL,
    BigInteger,
    ColumnElement,
    Connection,
    Engine,
    create_engine,
    event,
    func,
    literal,
    make_url,
    select,
)
from sqlalchemy.exc import DBAPIError

from ...core import ValidationError, WriteRetryPolicy
from ..retrying import Retrier
from .sql_schema import JOB_COUNTER, STORE_COUNTER, Schema
from .sql_statements import Statements

__all__ = [
    "SQLITE_BEGIN_OPTION",
    "Database",
    "configure_sqlite",
    "from_micros",
    "is_transient",
    "make_engine",
    "normalize_url",
    "to_micros",
]

T = TypeVar("T")

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
SUPPORTED = ("postgresql", "sqlite")
SUPPORTED_NAMES = "sqlite or postgresql"
#: The execution option naming how a SQLite transaction begins (IMMEDIATE or DEFERRED).
SQLITE_BEGIN_OPTION = "conveyor_sqlite_begin"
#: SQLSTATEs after which PostgreSQL rolled the whole transaction back: safe to rerun.
_RETRYABLE_SQLSTATES = frozenset({"40001", "40P01"})


def to_micros(when: datetime, field: str = "now") -> int:
    """`when` as integer microseconds since the Unix epoch (exact; no float rounding)."""
    if when.tzinfo is None or when.utcoffset() is None:
        raise ValidationError.of(field, "must be timezone-aware (UTC); got a naive datetime")
    return (when - _EPOCH) // _MICROSECOND


def from_micros(value: int) -> datetime:
    """An aware UTC datetime from microseconds since the Unix epoch."""
    return _EPOCH + timedelta(microseconds=value)


_CONFIGURED: weakref.WeakSet[Engine] = weakref.WeakSet()
_CONFIGURE_LOCK = threading.Lock()
_SYNCHRONOUS = frozenset({"OFF", "NORMAL", "FULL", "EXTRA"})


def configure_sqlite(
    engine: Engine, *, busy_timeout_ms: int = 5000, synchronous: str = "NORMAL"
) -> None:
    """Make a SQLite engine safe for several threads and processes on one file.

    Each new connection gets WAL (readers never block the writer),
    `busy_timeout` (wait for the write lock instead of failing at once) and
    `synchronous`. Transactions begin with `BEGIN IMMEDIATE`, which takes the write
    lock up front: a deferred transaction that reads and then writes can fail with
    `database is locked` no busy timeout can cure, once another writer committed in
    between. Read-only work of the adapters opts out with `BEGIN DEFERRED`.
    Idempotent per engine; `make_engine` calls it for you.
    """
    if engine.dialect.name != "sqlite":
        raise ValidationError.of("engine", f"is {engine.dialect.name}, not sqlite")
    mode = synchronous.upper()
    if mode not in _SYNCHRONOUS:
        raise ValidationError.of("synchronous", f"must be one of {', '.join(sorted(_SYNCHRONOUS))}")
    if isinstance(busy_timeout_ms, bool) or not isinstance(busy_timeout_ms, int):
        raise ValidationError.of("busy_timeout_ms", "must be an integer")
    if busy_timeout_ms < 0:
        raise ValidationError.of("busy_timeout_ms", "must be >= 0")
    with _CONFIGURE_LOCK:
        if engine in _CONFIGURED:
            return
        _CONFIGURED.add(engine)

    def on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Take BEGIN away from the sqlite3 module (it would defer it past our SELECTs)
        # and give it to the "begin" listener below.
        dbapi_connection.isolation_level = None
        # A payload that is not UTF-8 (written by something else) must come back as a
        # BadClaim, not raise inside the driver and wedge the queue behind it.
        dbapi_connection.text_factory = _lenient_text
        cursor = dbapi_connection.cursor()
        try:
            # The busy timeout first, so switching the journal mode waits its turn too.
            cursor.execute(f"PRAGMA busy_timeout = {busy_timeout_ms}")
            current = str(cursor.execute("PRAGMA journal_mode").fetchone()[0]).lower()
            if current not in ("wal", "memory"):
                cursor.execute("PRAGMA journal_mode = WAL")
            cursor.execute(f"PRAGMA synchronous = {mode}")
        finally:
            cursor.close()

    def on_begin(conn: Connection) -> None:
        how = conn.get_execution_options().get(SQLITE_BEGIN_OPTION, "IMMEDIATE")
        conn.exec_driver_sql("BEGIN DEFERRED" if how == "DEFERRED" else "BEGIN IMMEDIATE")

    event.listen(engine, "connect", on_connect)
    event.listen(engine, "begin", on_begin)


def _lenient_text(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")


def normalize_url(url: str | URL) -> URL:
    """Parse `url`; a bare `postgres://` or `postgresql://` gets the psycopg 3 driver."""
    parsed = make_url(url)
    if parsed.drivername in ("postgres", "postgresql"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed


def make_engine(
    url: str | URL,
    *,
    busy_timeout_ms: int = 5000,
    synchronous: str = "NORMAL",
    pool_size: int | None = None,
    **options: Any,
) -> Engine:
    """An engine for the SQL backend.

    `sqlite:///path/to/file.db` gets `configure_sqlite` (WAL, busy timeout,
    `BEGIN IMMEDIATE`); an in-memory SQLite database is refused, since each pooled
    connection would see its own empty database (use the memory backend instead).
    `postgresql://...` (or `postgres://`) uses psycopg 3. Pooled connections are not
    pinged before use; a unit of work that meets a dead one is rerun on a fresh one.

    `pool_size` is how many connections the pool keeps open (SQLAlchemy's default, 5,
    when None); up to `max_overflow` (default 10) more are opened under load. Idle
    workers hold none: their wake-up listener has a connection of its own, one per
    process and database. Other keyword `options` go to `sqlalchemy.create_engine`.
    """
    parsed = normalize_url(url)
    backend = parsed.get_backend_name()
    # Statement parameters hold job payloads (and so their secrets): keep them out of
    # exception messages and logs.
    options.setdefault("hide_parameters", True)
    if backend not in SUPPORTED:
        raise ValidationError.of(
            "url", f"backend {backend!r} is not supported; use {SUPPORTED_NAMES}"
        )
    if pool_size is not None:
        if isinstance(pool_size, bool) or not isinstance(pool_size, int) or pool_size < 1:
            raise ValidationError.of("pool_size", "must be an integer >= 1")
        options["pool_size"] = pool_size
    if backend == "sqlite":
        database = parsed.database or ""
        if database in ("", ":memory:") or parsed.query.get("mode") == "memory":
            raise ValidationError.of(
                "url", "an in-memory SQLite database is per connection; give a file path"
            )
        engine = create_engine(parsed, **options)
        configure_sqlite(engine, busy_timeout_ms=busy_timeout_ms, synchronous=synchronous)
        return engine
    # No pre-ping (a round trip per transaction): a dead pooled connection fails its
    # unit of work, which is then rerun on a fresh one (see is_transient).
    return create_engine(parsed, **options)


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
