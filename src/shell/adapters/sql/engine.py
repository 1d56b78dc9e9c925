"""The SQL backend's engines: how they are built and configured, and the time format.

`make_engine` builds an engine for SQLite (configured by `configure_sqlite`) or
PostgreSQL (psycopg 3). The unit of work that runs on it, and retries its transient
failures, is `database.Database`.

Times are stored as integer microseconds since the Unix epoch, UTC (`to_micros`,
`from_micros`).
"""

from __future__ import annotations

import os
import sqlite3
import threading
import weakref
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote

from sqlalchemy import URL, Connection, Engine, create_engine, event, make_url

from ....core import ValidationError, WriteRetryPolicy
from ...retrying import retrying

__all__ = [
    "SQLITE_BEGIN_OPTION",
    "SUPPORTED",
    "SUPPORTED_NAMES",
    "configure_sqlite",
    "from_micros",
    "make_engine",
    "normalize_url",
    "to_micros",
]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
SUPPORTED = ("postgresql", "sqlite")
SUPPORTED_NAMES = "sqlite or postgresql"
#: The execution option naming how a SQLite transaction begins (IMMEDIATE or DEFERRED).
SQLITE_BEGIN_OPTION = "conveyor_sqlite_begin"


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
#: What a SQLite write-ahead log is cut back to once a checkpoint empties it: while a
#: long read transaction pins a snapshot, no checkpoint can, and the log grows (about
#: 50 KB a job); without a limit it kept that size for good.
WAL_SIZE_LIMIT_BYTES = 32 * 1024 * 1024
#: The first wait between tries to switch a new file to WAL mode (it doubles).
_WAL_RETRY_S = 0.01


def configure_sqlite(
    engine: Engine, *, busy_timeout_ms: int = 5000, synchronous: str = "FULL"
) -> None:
    """Make a SQLite engine safe for several threads and processes on one file.

    Each new connection gets WAL (readers never block the writer),
    `busy_timeout` (wait for the write lock instead of failing at once) and
    `synchronous` (FULL: an acknowledged commit survives an OS crash or power loss,
    as on PostgreSQL). Transactions begin with `BEGIN IMMEDIATE`, which takes the write
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

    opened = threading.Event()  # set once a connection has opened the file

    def on_do_connect(_dialect: Any, _rec: Any, cargs: list[Any], cparams: dict[str, Any]) -> None:
        # Once the file was opened, a later connection (the pool growing, the wake-up
        # watcher starting again) must not create an empty one, with no tables, where
        # it was deleted: `mode=rw` opens only a file that exists (one moved onto the
        # path, a restore, opens as before).
        if opened.is_set() and not cparams.get("uri") and cargs and cargs[0] != ":memory:":
            # `file://` and an empty host: a path that begins `//` is still a path.
            cargs[0] = f"file://{quote(cargs[0])}?mode=rw"
            cparams["uri"] = True

    def on_connect(dbapi_connection: Any, _record: Any) -> None:
        opened.set()
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
            _switch_to_wal(cursor, busy_timeout_ms)
            cursor.execute(f"PRAGMA synchronous = {mode}")
            cursor.execute(f"PRAGMA journal_size_limit = {WAL_SIZE_LIMIT_BYTES}")
        finally:
            cursor.close()

    def on_begin(conn: Connection) -> None:
        how = conn.get_execution_options().get(SQLITE_BEGIN_OPTION, "IMMEDIATE")
        conn.exec_driver_sql("BEGIN DEFERRED" if how == "DEFERRED" else "BEGIN IMMEDIATE")

    event.listen(engine, "do_connect", on_do_connect)
    event.listen(engine, "connect", on_connect)
    event.listen(engine, "begin", on_begin)


def _switch_to_wal(cursor: Any, busy_timeout_ms: int) -> None:
    """WAL mode, unless the file is in it (or in memory). The switch needs the file to
    itself, and SQLite answers "database is locked" at once, not after the busy
    timeout, while another connection holds it (processes starting together on a new
    file): it is tried again, as any transient storage call is, until the busy
    timeout has passed."""

    def switch() -> None:
        current = str(cursor.execute("PRAGMA journal_mode").fetchone()[0]).lower()
        if current not in ("wal", "memory"):
            cursor.execute("PRAGMA journal_mode = WAL")

    budget = WriteRetryPolicy(
        initial_s=_WAL_RETRY_S,
        max_s=_WAL_RETRY_S * 10,
        jitter=True,
        max_attempts=None,
        give_up_after_s=busy_timeout_ms / 1000,
        last_try_at_deadline=True,
    )
    retrying(switch, budget, transient=_locked)


def _locked(exc: Exception) -> bool:
    return isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc)


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
    synchronous: str = "FULL",
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
        if not database and parsed.host:
            # `sqlite://jobs.db`: the name went to the host part, and nothing is a file.
            raise ValidationError.of(
                "url",
                f"names no file: write sqlite:///{parsed.host} (three slashes) for a path "
                "relative to the current directory, four for an absolute one",
            )
        if database in ("", ":memory:") or parsed.query.get("mode") == "memory":
            raise ValidationError.of(
                "url", "an in-memory SQLite database is per connection; give a file path"
            )
        engine = create_engine(parsed, **options)
        configure_sqlite(engine, busy_timeout_ms=busy_timeout_ms, synchronous=synchronous)
        return engine
    # No pre-ping (a round trip per transaction): a dead pooled connection fails its
    # unit of work, which is then rerun on a fresh one (see `database.is_transient`).
    parsed, options = with_connect_timeout(parsed, options)
    return create_engine(parsed, **options)


#: How long a new PostgreSQL connection may take to open, unless the URL, the
#: engine's `connect_args` or `PGCONNECT_TIMEOUT` say (libpq's own default waits as
#: long as TCP does: a server that accepts and never answers held an operator
#: command for two minutes).
CONNECT_TIMEOUT_S = 10


def with_connect_timeout(url: URL, options: dict[str, Any]) -> tuple[URL, dict[str, Any]]:
    """`url` and `options` for a PostgreSQL engine, its connect arguments given
    `CONNECT_TIMEOUT_S` unless the URL's `connect_timeout`, their own or
    `PGCONNECT_TIMEOUT` set one. asyncpg calls it `timeout`, reads no environment
    and is handed the URL's query as arguments: it is given what libpq would read."""
    connect_args = dict(options.get("connect_args") or {})
    asyncpg = url.get_driver_name() == "asyncpg"
    key = "timeout" if asyncpg else "connect_timeout"
    from_url = url.query.get("connect_timeout")
    if asyncpg and from_url is not None:
        url = url.difference_update_query(["connect_timeout"])
    if {"connect_timeout", "timeout"} & (set(url.query) | set(connect_args)):
        return url, {**options, "connect_args": connect_args}
    given = from_url if from_url is not None else os.environ.get("PGCONNECT_TIMEOUT")
    if given is None or given == "":
        connect_args[key] = CONNECT_TIMEOUT_S
    elif asyncpg:
        connect_args[key] = _seconds(given)
    return url, {**options, "connect_args": connect_args}


def _seconds(given: str | tuple[str, ...]) -> float:
    text = given if isinstance(given, str) else given[-1]
    try:
        return float(text)
    except ValueError:
        raise ValidationError.of(
            "url", f"connect_timeout must be a number of seconds, got {text!r}"
        ) from None
