"""SQL backend on SQLAlchemy 2 Core: one code path for SQLite and PostgreSQL.

A job lives in one `job_queue` row while there is work to do (`ready`,
`scheduled` or `processing`) and its outcome in one `job_store` row. The
`payload` column is the authoritative job, `codec.encode(job)`; the other
columns are copies for the indexes.

Claim: select the best ready row (priority, then `seq`), then
`UPDATE ... SET status='processing', locked_by=:token WHERE id=:id AND
status='ready'`, in one transaction. The conditional UPDATE is what makes it
safe everywhere; `FOR UPDATE SKIP LOCKED` on the select (rendered on
PostgreSQL, absent on SQLite, where `BEGIN IMMEDIATE` already serialises
writers) only keeps concurrent claimers from queueing behind one row. Every
write of a claim holder — ack, extend, replace, reclaim — is fenced by
`id`, `locked_by` and `status='processing'`, so a stale holder changes nothing.

Times: every instant written or compared (`locked_at`, `run_at`, cutoffs) is the
`now` or `cutoff` the caller passes in, from the worker's injected clock, never
the database clock. One clock for every backend keeps the lease arithmetic the
same on memory, SQL and Redis, and lets tests move time by hand; the price is
that workers' clocks must agree (keep them NTP-synced). Times are stored as
integer microseconds since the Unix epoch, UTC.

SQLite: build the engine with `make_engine` (WAL, `busy_timeout`,
`synchronous=NORMAL`, `BEGIN IMMEDIATE` for writes). `database is locked` is
retried with bounded, jittered backoff, never surfaced as a lost enqueue or ack.
"""

from __future__ import annotations

import functools
import json
import logging
import random
import sqlite3
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar
from uuid import UUID

from returns.result import Success
from sqlalchemy import (
    URL,
    BigInteger,
    ColumnElement,
    Connection,
    Engine,
    case,
    create_engine,
    delete,
    event,
    func,
    literal,
    make_url,
    null,
    select,
    update,
)
from sqlalchemy.exc import DBAPIError

from ...core import Job, JobStatus, ValidationError, WriteRetryPolicy, write_retry_delay_s
from ..codec import decode, encode
from ..ports import BadClaim, Claim, QueueCounts
from .sql_schema import (
    JOB_COUNTER,
    NOTIFY_CHANNEL,
    PROCESSING,
    READY,
    SCHEDULED,
    SCHEMA,
    STORE_COUNTER,
    Schema,
)
from .sql_statements import Statements

__all__ = [
    "BadClaim",
    "SqlJobQueue",
    "SqlJobStore",
    "configure_sqlite",
    "from_micros",
    "make_engine",
    "to_micros",
]

_log = logging.getLogger(__name__)

T = TypeVar("T")

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
_SUPPORTED = ("postgresql", "sqlite")
_NAMES = "sqlite or postgresql"
#: The execution option naming how a SQLite transaction begins (IMMEDIATE or DEFERRED).
SQLITE_BEGIN_OPTION = "conveyor_sqlite_begin"
#: Claim attempts when the chosen row went to another claimer between select and update.
_CLAIM_ATTEMPTS = 16
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


def _held_by(claim: Claim | BadClaim) -> tuple[str, str]:
    if isinstance(claim, BadClaim):
        return claim.job_id, claim.token
    return str(claim.job.id), claim.token


# --- engines -------------------------------------------------------------------------------

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
    **options: Any,
) -> Engine:
    """An engine for the SQL backend.

    `sqlite:///path/to/file.db` gets `configure_sqlite` (WAL, busy timeout,
    `BEGIN IMMEDIATE`); an in-memory SQLite database is refused, since each pooled
    connection would see its own empty database (use the memory backend instead).
    `postgresql://...` (or `postgres://`) uses psycopg 3. Pooled connections are not
    pinged before use; a unit of work that meets a dead one is rerun on a fresh one.
    Other keyword `options` go to `sqlalchemy.create_engine`.
    """
    parsed = normalize_url(url)
    backend = parsed.get_backend_name()
    # Statement parameters hold job payloads (and so their secrets): keep them out of
    # exception messages and logs.
    options.setdefault("hide_parameters", True)
    if backend not in _SUPPORTED:
        raise ValidationError.of("url", f"backend {backend!r} is not supported; use {_NAMES}")
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
    # unit of work, which is then rerun on a fresh one (see _is_transient).
    return create_engine(parsed, **options)


def _is_transient(exc: BaseException) -> bool:
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


class _Database:
    """Runs units of work in their own transaction, rerunning transient failures."""

    def __init__(self, engine: Engine, schema: Schema, lock_retry_s: float) -> None:
        name = engine.dialect.name
        if name not in _SUPPORTED:
            raise ValidationError.of("engine", f"dialect {name!r} is not supported; use {_NAMES}")
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
        `lock_retry_s`, re-raising the last error.
        """
        began = time.monotonic()
        failures = 0
        while True:
            try:
                with self.engine.connect() as conn:
                    if self.sqlite and not write:
                        conn = conn.execution_options(**{SQLITE_BEGIN_OPTION: "DEFERRED"})
                    elif single and not self.sqlite:
                        return work(conn.execution_options(isolation_level="AUTOCOMMIT"))
                    with conn.begin():
                        return work(conn)
            except DBAPIError as exc:
                failures += 1
                elapsed = time.monotonic() - began
                wait = write_retry_delay_s(self.retry, failures, elapsed, random.random())
                if not _is_transient(exc) or wait is None:
                    raise
            with self._retries_lock:
                self._retries += 1
            time.sleep(wait)

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

    def put(self, conn: Connection, row: dict[str, Any], *, record: bool, ready: bool) -> None:
        """Upsert one job_queue row (or, with `record`, one job_store row) with a fresh
        seq when `ready` (a record always takes one); `row` holds every other column."""
        sql = self.sql
        column, counter = ("recorded_seq", STORE_COUNTER) if record else ("seq", JOB_COUNTER)
        nextval = sql.upsert_record_nextval if record else sql.upsert_job_nextval
        if ready and nextval is not None:
            conn.execute(nextval, row)
            return
        row[column] = self.bump(conn, counter) if ready else None
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


#: How often an idle worker on SQLite looks for another connection's commit.
SQLITE_WATCH_S = 0.002


# --- the queue -----------------------------------------------------------------------------


class SqlJobQueue:
    """A `JobQueue` and `TransactionalJobQueue` in a SQLite or PostgreSQL database.

    Create the tables first with `sql_schema.create_tables(engine)`. A SQLite engine
    not built by `make_engine` is configured the same way on first use. Transient
    lock errors are retried for up to `lock_retry_s` seconds per operation.
    """

    def __init__(
        self, engine: Engine, *, schema: Schema = SCHEMA, lock_retry_s: float = 30.0
    ) -> None:
        self._db = _Database(engine, schema, lock_retry_s)
        self._t = schema.job_queue
        self._listeners = threading.local()

    @property
    def engine(self) -> Engine:
        """The engine this queue writes through."""
        return self._db.engine

    @property
    def lock_retries(self) -> int:
        """How many transactions were rerun after a transient lock error (for metrics)."""
        return self._db.retries

    def _placement(self, conn: Connection, job: Job) -> dict[str, Any]:
        """Column values putting `job` where its status says, unlocked."""
        seq = None if job.status.is_parked else self._db.next_seq(conn, JOB_COUNTER)
        return {**self._placement_values(job), "seq": seq}

    @staticmethod
    def _placement_values(job: Job) -> dict[str, Any]:
        """Every placement column but `seq`."""
        return {
            "status": SCHEDULED if job.status.is_parked else READY,
            "run_at": to_micros(job.run_at, "run_at"),
            "locked_by": None,
            "locked_at": None,
            "priority": job.priority.rank,
            "queue": job.queue,
            "tenant_id": job.tenant_id,
            "payload": encode(job),
        }

    def _enqueue(self, conn: Connection, job: Job) -> None:
        row = {"id": str(job.id), **self._placement_values(job)}
        self._db.put(conn, row, record=False, ready=not job.status.is_parked)

    def enqueue(self, job: Job) -> None:
        """Upsert by id, unlocked: parked jobs wait as `scheduled`, others go to the tail
        of ready. Re-enqueueing a claimed job takes it from its holder, whose ack then
        finds nothing."""
        # One upsert on PostgreSQL (seq from the sequence); SQLite bumps a counter first.
        self._db.run(lambda conn: self._enqueue(conn, job), single=not self._db.sqlite)

    def enqueue_many(self, jobs: Sequence[Job]) -> None:
        """Upsert several jobs in one transaction and one statement; ready ones go to the
        tail of their queues in list order."""
        if not jobs:
            return
        by_id = {job.id: job for job in jobs}  # one row per id: the last one wins
        batch = list(by_id.values())

        def work(conn: Connection) -> None:
            ready = sum(1 for job in batch if not job.status.is_parked)
            seqs = iter(self._db.next_seqs(conn, JOB_COUNTER, ready))
            rows = []
            for job in batch:
                row = {"id": str(job.id), **self._placement_values(job)}
                row["seq"] = None if job.status.is_parked else next(seqs)
                rows.append(row)
            self._db.put_many(conn, rows, record=False)

        self._db.run(work)

    def enqueue_in_tx(self, conn: Any, job: Job) -> None:
        """Enqueue inside the caller's open transaction on `conn` (the outbox row): it
        commits or rolls back with the caller's own writes. `conn` must be a SQLAlchemy
        `Connection` to this queue's database with a transaction begun."""
        if not isinstance(conn, Connection):
            raise ValidationError.of(
                "conn",
                f"must be a sqlalchemy Connection with a transaction begun, got "
                f"{type(conn).__name__}; an Engine would commit the job on its own, apart "
                "from your change",
            )
        if not conn.in_transaction():
            raise ValidationError.of(
                "conn",
                "has no transaction begun; use `with engine.begin() as conn` or "
                "conn.begin(), so the job commits together with your change",
            )
        if conn.get_execution_options().get("isolation_level") == "AUTOCOMMIT":
            raise ValidationError.of(
                "conn", "is in AUTOCOMMIT mode; the job would commit apart from your change"
            )
        self._enqueue(conn, job)

    def dequeue(self, queue: str, now: datetime) -> Claim | BadClaim | None:
        """Claim the best ready job of `queue` (priority, then FIFO) under a fresh token,
        locked at `now`. An undecodable payload comes back as a `BadClaim`."""
        at = to_micros(now)
        sql = self._db.sql
        best = sql.claim_best
        if best is not None:  # PostgreSQL: select and lock in one statement
            token = uuid.uuid4().hex
            take = {"in_queue": queue, "token": token, "at": at}
            row = self._db.run(lambda conn: conn.execute(best, take).first(), single=True)
            if row is None:
                return None
            return _as_claim(str(row.id), token, queue, str(row.payload), now)

        def claim(conn: Connection) -> tuple[str, str, str] | None:
            for _ in range(_CLAIM_ATTEMPTS):
                job_id = conn.execute(sql.best_one, {"in_queue": queue}).scalar_one_or_none()
                if job_id is None:
                    return None
                token = uuid.uuid4().hex
                take = {"job_id": job_id, "token": token, "at": at}
                payload = conn.execute(sql.take_one, take).scalar_one_or_none()
                if payload is not None:
                    return str(job_id), token, str(payload)
            # Every candidate went to another claimer; they made progress, we poll again.
            return None

        got = self._db.run(claim)
        if got is None:
            return None
        job_id, token, payload = got
        return _as_claim(job_id, token, queue, payload, now)

    def dequeue_many(self, queue: str, now: datetime, limit: int) -> list[Claim | BadClaim]:
        """Claim up to `limit` of the best ready jobs in one transaction, each under its
        own fresh token (a fresh base per call, joined with the job id)."""
        if limit <= 0:
            return []
        at = to_micros(now)
        sql = self._db.sql
        base = uuid.uuid4().hex[:16]  # + ":" + the 36-character id fits locked_by

        def claim(conn: Connection) -> list[tuple[str, str, str]]:
            best = {"in_queue": queue, "limit": limit}
            ids = list(conn.execute(sql.best_many, best).scalars())
            if not ids:
                return []
            take = {"ids": ids, "base": f"{base}:", "at": at}
            taken = conn.execute(sql.take_many, take).all()
            rows = sorted(taken, key=lambda r: (r.priority, r.seq))
            return [(str(r.id), str(r.locked_by), str(r.payload)) for r in rows]

        return [
            _as_claim(job_id, token, queue, payload, now)
            for job_id, token, payload in self._db.run(claim)
        ]

    def finish_many(self, items: Sequence[tuple[Claim, Job]]) -> list[bool]:
        """`finish` for several claims in one transaction; one answer per item. Each
        row is deleted only while its own token holds it, and only those are recorded."""
        if not items:
            return []
        for claim, record in items:
            _same_id(claim, record)
        sql = self._db.sql

        def work(conn: Connection) -> list[bool]:
            tokens = {"tokens": [claim.token for claim, _ in items]}
            gone = conn.execute(sql.release_many, tokens)
            released = {(str(r.id), str(r.locked_by)) for r in gone}
            done = [(str(c.job.id), c.token) in released for c, _ in items]
            _record_many(self._db, conn, [r for (_, r), ok in zip(items, done, strict=True) if ok])
            return done

        return self._db.run(work)

    def _fenced(self, claim: Claim | BadClaim) -> list[ColumnElement[bool]]:
        job_id, token = _held_by(claim)
        t = self._t
        return [t.c.id == job_id, t.c.locked_by == token, t.c.status == PROCESSING]

    def ack(self, claim: Claim | BadClaim) -> bool:
        """Delete the row only while `claim.token` still holds it."""
        job_id, token = _held_by(claim)
        held = {"job_id": job_id, "token": token}
        return self._db.run(
            lambda conn: conn.execute(self._db.sql.release, held).rowcount == 1, single=True
        )

    def extend(self, claim: Claim | BadClaim, now: datetime) -> bool:
        """Renew the lease to `now` while `claim.token` still holds the row."""
        job_id, token = _held_by(claim)
        held = {"job_id": job_id, "token": token, "at": to_micros(now)}
        return self._db.run(
            lambda conn: conn.execute(self._db.sql.extend, held).rowcount == 1, single=True
        )

    def replace(self, claim: Claim, job: Job) -> bool:
        """Swap the held row for `job` (ready at the tail, or parked), unlocked, while
        `claim.token` still holds it."""
        _same_id(claim, job)

        def work(conn: Connection) -> bool:
            stmt = update(self._t).where(*self._fenced(claim)).values(self._placement(conn, job))
            return conn.execute(stmt).rowcount == 1

        return self._db.run(work)

    def promote_due(self, now: datetime, limit: int = 1000) -> int:
        """Move up to `limit` scheduled rows with `run_at <= now` to the tail of ready.

        `WHERE status='scheduled'` is re-checked by the UPDATE itself, so of concurrent
        promoters only one moves each row; `SKIP LOCKED` lets them share the work
        instead of waiting on each other. Jobs moved by one call come after everything
        already ready; among themselves their order is unspecified.
        """
        if limit <= 0:
            return 0
        at = to_micros(now)
        t = self._t

        def work(conn: Connection) -> int:
            due = (
                select(t.c.id)
                .where(t.c.status == SCHEDULED, t.c.run_at <= at)
                # run_at alone, so the (status, run_at) index yields rows in order and
                # LIMIT stops the scan; the claim orders by priority anyway.
                .order_by(t.c.run_at)
                .limit(limit)
                .with_for_update(skip_locked=True)
            )
            # Two statements, not `WHERE id IN (subquery)`: PostgreSQL may run such a
            # subquery once per row it updates, and each run finds `limit` fresh rows.
            ids = list(conn.execute(due).scalars())
            if not ids:
                return 0
            stmt = (
                update(t)
                .where(t.c.id.in_(ids), t.c.status == SCHEDULED)
                .values(status=READY, seq=self._db.next_seq(conn, JOB_COUNTER))
            )
            return int(conn.execute(stmt).rowcount)

        return self._db.run(work)

    def abandoned(self, cutoff: datetime, limit: int = 100) -> Sequence[Claim]:
        """Claims whose lease was taken or last extended before `cutoff`, oldest first.

        A row whose payload does not decode has no job for the lease keeper to decide
        about: it goes back to ready as it is (fenced like any reclaim), so the worker
        that claims it next gets a `BadClaim` and dead-letters it, as on Redis.
        """
        t = self._t
        cut = to_micros(cutoff, "cutoff")
        stmt = (
            select(t.c.id, t.c.queue, t.c.locked_by, t.c.locked_at, t.c.payload)
            .where(t.c.status == PROCESSING, t.c.locked_at < cut)
            .order_by(t.c.locked_at)
            .limit(limit)
        )
        rows = self._db.run(lambda conn: conn.execute(stmt).all(), write=False)
        out: list[Claim] = []
        for r in rows:
            found = _as_claim(r.id, r.locked_by or "", r.queue, r.payload, from_micros(r.locked_at))
            if isinstance(found, Claim):
                out.append(found)
                continue
            _log.warning("returning undecodable job %s to ready: %s", found.job_id, found.reason)
            self._db.run(functools.partial(self._requeue_bad, bad=found, cut=cut))
        return out

    def _requeue_bad(self, conn: Connection, bad: BadClaim, cut: int) -> None:
        t = self._t
        conn.execute(
            update(t)
            .where(*self._fenced(bad), t.c.locked_at < cut)
            .values(
                status=READY,
                seq=self._db.next_seq(conn, JOB_COUNTER),
                locked_by=None,
                locked_at=None,
            )
        )

    def reclaim(self, claim: Claim, job: Job, cutoff: datetime) -> bool:
        """Return an abandoned row to ready as `job` (or park it, by its status), only if
        it is still held by `claim.token` and still locked before `cutoff`: the
        predicate is re-checked inside the write, so a job acked or extended since
        `abandoned()` looked is left alone."""
        _same_id(claim, job)
        cut = to_micros(cutoff, "cutoff")

        def work(conn: Connection) -> bool:
            stmt = (
                update(self._t)
                .where(*self._fenced(claim), self._t.c.locked_at < cut)
                .values(self._placement(conn, job))
            )
            return conn.execute(stmt).rowcount == 1

        return self._db.run(work)

    def counts(self, now: datetime) -> Mapping[str, QueueCounts]:
        """Ready, scheduled and in-flight rows per queue, and the oldest ready `run_at`,
        in one GROUP BY. A due job still counts as scheduled until it is promoted, so
        `now` changes nothing here."""
        t = self._t

        def tally(status: str) -> ColumnElement[Any]:
            return func.sum(case((t.c.status == status, 1), else_=0))

        stmt = (
            select(
                t.c.queue,
                tally(READY),
                tally(SCHEDULED),
                tally(PROCESSING),
                func.min(case((t.c.status == READY, t.c.run_at), else_=null())),
            )
            .group_by(t.c.queue)
            .order_by(t.c.queue)
        )
        rows = self._db.run(lambda conn: conn.execute(stmt).all(), write=False)
        return {
            str(name): QueueCounts(
                ready=int(ready or 0),
                scheduled=int(scheduled or 0),
                in_flight=int(in_flight or 0),
                oldest_ready_at=None if oldest is None else from_micros(int(oldest)),
            )
            for name, ready, scheduled, in_flight, oldest in rows
        }

    def wait_for_work(self, queue: str, timeout_s: float) -> bool:
        """PostgreSQL: block until a job becomes ready on any queue (LISTEN on the
        trigger's channel) or `timeout_s` passes. True means "try a dequeue". On SQLite
        there is no such signal: this returns False at once and the worker polls."""
        if self._db.sqlite:
            return self._wait_sqlite(timeout_s)
        listener: Any = getattr(self._listeners, "conn", None)
        if listener is None or listener.closed:
            raw = self._db.engine.raw_connection()
            listener = raw.driver_connection
            listener.autocommit = True
            listener.execute(f"LISTEN {NOTIFY_CHANNEL}")
            self._listeners.conn = listener
            self._listeners.raw = raw  # keeps the pool's wrapper (and so the connection) alive
        try:
            for _ in listener.notifies(timeout=timeout_s, stop_after=1):
                return True
        except Exception:
            self._listeners.conn = None  # reconnect on the next wait
            raise
        return False

    def _wait_sqlite(self, timeout_s: float) -> bool:
        # SQLite has no notifications; `PRAGMA data_version` changes when another
        # connection commits, and reading it touches no table, so it is cheap to poll.
        watcher: Any = getattr(self._listeners, "raw", None)
        if watcher is None:
            watcher = self._db.engine.raw_connection()
            self._listeners.raw = watcher
        cursor = watcher.driver_connection.cursor()
        try:
            seen = cursor.execute("PRAGMA data_version").fetchone()[0]
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                time.sleep(SQLITE_WATCH_S)
                if cursor.execute("PRAGMA data_version").fetchone()[0] != seen:
                    return True
            return False
        finally:
            cursor.close()

    def finishes_with(self, store: object) -> bool:
        """True when `store` keeps its table in this queue's database."""
        return (
            isinstance(store, SqlJobStore)
            and store._db.engine.url == self._db.engine.url
            and store._db.schema is self._db.schema
        )

    def finish(self, claim: Claim, record: Job) -> bool:
        """One transaction: delete the held row (fenced) and upsert `record` in the
        store. Both commit or neither; a lost claim writes nothing."""
        _same_id(claim, record)
        held = {"job_id": str(claim.job.id), "token": claim.token}
        one = self._db.sql.finish
        if one is not None:
            values = _record_values(record)
            del values["id"]  # the record's id is the deleted row's
            params = {**{f"r_{c}": v for c, v in values.items()}, **held}
            recorded = self._db.run(lambda conn: conn.execute(one, params).first(), single=True)
            return recorded is not None

        def work(conn: Connection) -> bool:
            if conn.execute(self._db.sql.release, held).rowcount != 1:
                return False
            _record(self._db, conn, record)
            return True

        return self._db.run(work)

    def close(self) -> None:
        """Close pooled connections (the engine reconnects if used again)."""
        raw = getattr(self._listeners, "raw", None)
        if raw is not None:
            raw.invalidate()
            self._listeners.conn = self._listeners.raw = None
        self._db.engine.dispose()


def _record(db: _Database, conn: Connection, job: Job) -> None:
    """Upsert `job` into the store table inside `conn`'s transaction."""
    db.put(conn, _record_values(job), record=True, ready=True)


def _record_values(job: Job) -> dict[str, Any]:
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


def _record_many(db: _Database, conn: Connection, jobs: Sequence[Job]) -> None:
    """Upsert several records in one statement, newest in list order."""
    if len(jobs) <= 1:
        for job in jobs:
            _record(db, conn, job)
        return
    rows = [_record_values(job) for job in jobs]
    for row, seq in zip(rows, db.next_seqs(conn, STORE_COUNTER, len(rows)), strict=True):
        row["recorded_seq"] = seq
    db.put_many(conn, rows, record=True)


def _same_id(claim: Claim, job: Job) -> None:
    if job.id != claim.job.id:
        raise ValidationError.of("job", f"has id {job.id}, but the claim holds {claim.job.id}")


def _as_claim(
    job_id: str, token: str, queue: str, payload: str, locked_at: datetime
) -> Claim | BadClaim:
    """A claim on a decoded job, or a `BadClaim` saying why the payload is not one."""
    decoded = decode(payload)
    if not isinstance(decoded, Success):
        return BadClaim(job_id, token, queue, payload, str(decoded.failure()), locked_at)
    job = decoded.unwrap()
    if str(job.id) != job_id:
        # A payload naming another job would make every fenced write miss this row.
        reason = f"payload names job {job.id}, but the row is {job_id}"
        return BadClaim(job_id, token, queue, payload, reason, locked_at)
    return Claim(job=job, token=token, queue=queue, locked_at=locked_at)


# --- the store -----------------------------------------------------------------------------


class SqlJobStore:
    """A `JobStore` (history and dead letters) in a SQLite or PostgreSQL database."""

    def __init__(
        self, engine: Engine, *, schema: Schema = SCHEMA, lock_retry_s: float = 30.0
    ) -> None:
        self._db = _Database(engine, schema, lock_retry_s)
        self._t = schema.job_store

    def record(self, job: Job) -> None:
        """Upsert the job's latest record; it becomes the newest in the listings."""

        self._db.run(lambda conn: _record(self._db, conn, job))

    def get(self, job_id: UUID) -> Job | None:
        """The recorded job, or None (also when its record no longer decodes)."""
        stmt = select(self._t.c.payload).where(self._t.c.id == str(job_id))
        payload = self._db.run(lambda conn: conn.execute(stmt).scalar_one_or_none(), write=False)
        return None if payload is None else _decoded_record(str(job_id), str(payload))

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

    def purge_dead(self, job_id: UUID | None = None) -> int:
        """Delete one dead letter, or all of them. Returns how many went."""
        stmt = delete(self._t).where(self._t.c.status == JobStatus.FAILED.value)
        if job_id is not None:
            stmt = stmt.where(self._t.c.id == str(job_id))
        return self._db.run(lambda conn: int(conn.execute(stmt).rowcount))

    def close(self) -> None:
        """Close pooled connections (the engine reconnects if used again)."""
        self._db.engine.dispose()


def _decoded_record(job_id: str, payload: str) -> Job | None:
    decoded = decode(payload)
    if isinstance(decoded, Success):
        job: Job = decoded.unwrap()
        return job
    # Only this adapter writes the store, so this is corruption: say so, without the payload.
    _log.warning("job_store row %s does not decode: %s", job_id, decoded.failure())
    return None
