"""The SQL backend's own part of the trust work: claims, starts and finishes whose
re-send after a lost answer takes no second job, a lock retry budget, a lease kept to
the microsecond, databases made by the previous version, and idle workers that leave
the pool alone. What every backend shares (prefetched claims, claim-time promotion,
guarded finishes, revive, the server's clock, waking an idle worker) is in the
contract (`conveyor.testing.contract`), run on SQLite and PostgreSQL by
test_adapter_surface.py.

Every test taking `db` runs on a SQLite file and on a real PostgreSQL server, with the
fixtures of test_sql_backend.py.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from conveyor.core import JobStatus
from conveyor.shell.adapters.sql import SqlJobQueue, make_engine
from conveyor.shell.adapters.sql.migration import create_tables
from conveyor.shell.adapters.sql.postgres_ddl import claim_function_name
from conveyor.shell.adapters.sql.schema import SCHEMA
from conveyor.shell.adapters.sql.wakeups import wakeups_for
from conveyor.shell.ports import BadClaim, Claim
from sqlalchemy import Engine, text
from test_sql_backend import (
    MICRO,
    T0,
    Db,
    claim,
    claim_order,
    db,
    finished,
    make_job,
    pg_url,
)

__all__ = ["db", "pg_url"]  # fixtures, imported so pytest finds them here

LATER = T0 + timedelta(seconds=10)


def claims(got: list[Claim | BadClaim]) -> list[Claim]:
    assert all(isinstance(c, Claim) for c in got), got
    return [c for c in got if isinstance(c, Claim)]


# --- the lease, to the microsecond ---------------------------------------------------------


def test_a_lease_is_kept_to_the_microsecond(db: Db) -> None:
    """A claim renewed at LATER is abandoned as of one microsecond later: the lease
    keeper's guarded write lands then (Redis keeps leases to the millisecond)."""
    db.queue.enqueue(make_job())
    held = claim(db.queue)
    assert db.queue.extend(held, LATER)
    record = finished(held.job, JobStatus.FAILED, LATER)
    assert db.queue.finish(held, record, abandoned_before=LATER) is False
    assert [c.token for c in db.queue.abandoned(LATER + MICRO)] == [held.token]
    assert db.queue.finish(held, record, abandoned_before=LATER + MICRO) is True


# --- re-sent claims ------------------------------------------------------------------------


def is_claim(db: Db, statement: str) -> bool:
    if db.kind == "postgresql":
        return claim_function_name(SCHEMA) + "(" in statement
    taking = statement.split("WHERE")[0]
    return statement.startswith("UPDATE") and "RETURNING" in statement and "locked_by" in taking


def is_start(db: Db, statement: str) -> bool:
    return statement.startswith(f"UPDATE {SCHEMA.job_queue.name} SET locked_by=")


@contextmanager
def answer_lost_once(
    db: Db,
    monkeypatch: pytest.MonkeyPatch,
    matches: Callable[[Db, str], bool] = is_claim,
) -> Iterator[Callable[[], bool]]:
    """The next statement that `matches` (a claim by default) commits, then its
    connection fails before the answer arrives, as when the network drops at the
    worst moment: the adapter must rerun it. Yields a function saying whether the
    loss happened."""
    dialect = db.engine.dialect
    state = {"armed": True, "claiming": False, "lost": False}

    def is_claim(statement: str) -> bool:
        return matches(db, statement)

    if db.kind == "sqlite":
        execute, commit = dialect.do_execute, dialect.do_commit

        def do_execute(cursor: Any, statement: str, parameters: Any, context: Any = None) -> None:
            execute(cursor, statement, parameters, context)
            if state["armed"] and is_claim(statement):
                state["claiming"] = True

        def do_commit(dbapi_connection: Any) -> None:
            commit(dbapi_connection)
            if state["armed"] and state["claiming"]:
                state["armed"] = False
                state["lost"] = True
                raise sqlite3.OperationalError("database is locked")

        monkeypatch.setattr(dialect, "do_execute", do_execute)
        monkeypatch.setattr(dialect, "do_commit", do_commit)
    else:
        import psycopg

        execute = dialect.do_execute

        def pg_execute(cursor: Any, statement: str, parameters: Any, context: Any = None) -> None:
            execute(cursor, statement, parameters, context)
            if state["armed"] and is_claim(statement):
                state["armed"] = False
                state["lost"] = True
                cursor.connection.close()
                raise psycopg.OperationalError("the connection is closed")

        monkeypatch.setattr(dialect, "do_execute", pg_execute)
    yield lambda: bool(state["lost"])


def test_a_claim_whose_answer_was_lost_returns_the_same_job_on_rerun(
    db: Db, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = make_job(), make_job()
    db.queue.enqueue(first)
    db.queue.enqueue(second)
    with answer_lost_once(db, monkeypatch) as lost:
        got = claim(db.queue)
    assert lost() and db.queue.lock_retries >= 1
    assert got.job.id == first.id and got.started
    counts = db.queue.counts(T0)["default"]
    assert (counts.in_flight, counts.ready) == (1, 1), "the rerun took a second job"
    assert db.queue.ack(got)


def test_a_batch_claim_whose_answer_was_lost_returns_the_same_batch_on_rerun(
    db: Db, monkeypatch: pytest.MonkeyPatch
) -> None:
    jobs = [make_job() for _ in range(5)]
    db.queue.enqueue_many(jobs)
    with answer_lost_once(db, monkeypatch) as lost:
        got = claims(db.queue.dequeue_many("default", T0, 2))
    assert lost()
    assert [c.job.id for c in got] == [jobs[0].id, jobs[1].id]
    counts = db.queue.counts(T0)["default"]
    assert (counts.in_flight, counts.ready) == (2, 3), "the rerun took more jobs"
    assert all(db.queue.ack(c) for c in got)


def test_a_start_whose_answer_was_lost_still_starts_the_claim(
    db: Db, monkeypatch: pytest.MonkeyPatch
) -> None:
    db.queue.enqueue(make_job())
    [waiting] = claims(db.queue.dequeue_many("default", T0, 1))
    with answer_lost_once(db, monkeypatch, is_start) as lost:
        started = db.queue.start_claim(waiting, LATER)
    assert lost()
    assert started is not None and started.started and started.locked_at == LATER
    assert db.queue.ack(started) is True


def test_a_finish_whose_answer_was_lost_still_reports_success(
    db: Db, monkeypatch: pytest.MonkeyPatch
) -> None:
    db.queue.enqueue(make_job())
    held = claim(db.queue)
    record = finished(held.job, JobStatus.COMPLETED)
    dialect = db.engine.dialect
    lost = {"armed": True}
    if db.kind == "sqlite":
        commit = dialect.do_commit

        def do_commit(dbapi_connection: Any) -> None:
            commit(dbapi_connection)
            if lost["armed"]:
                lost["armed"] = False
                raise sqlite3.OperationalError("database is locked")

        monkeypatch.setattr(dialect, "do_commit", do_commit)
    else:
        import psycopg

        execute = dialect.do_execute

        def pg_execute(cursor: Any, statement: str, parameters: Any, context: Any = None) -> None:
            execute(cursor, statement, parameters, context)
            if lost["armed"] and statement.startswith("WITH gone"):
                lost["armed"] = False
                cursor.connection.close()
                raise psycopg.OperationalError("the connection is closed")

        monkeypatch.setattr(dialect, "do_execute", pg_execute)
    assert db.queue.finish(held, record) is True
    assert not lost["armed"]
    monkeypatch.undo()
    assert db.store.get(held.job.id) == record
    assert db.queue.counts(T0) == {}


def test_the_retry_budget_is_lock_retry_s(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    engine = make_engine(f"sqlite:///{path}", busy_timeout_ms=1)
    create_tables(engine)
    queue = SqlJobQueue(engine, lock_retry_s=0.3)
    blocker = sqlite3.connect(path, isolation_level=None)
    try:
        blocker.execute("BEGIN IMMEDIATE")
        began = time.monotonic()
        with pytest.raises(Exception, match="locked"):
            queue.enqueue(make_job())
        # Retried (more than once) and gave up within the budget, not after 30 s. The
        # last wait that would overrun the budget is skipped, so it may end a little early.
        assert time.monotonic() - began < 3
        assert queue.lock_retries > 1
    finally:
        blocker.close()
        engine.dispose()


# --- databases made by the previous version ------------------------------------------------


def make_it_look_old(engine: Engine) -> None:
    """Take away what this version added: the per-queue due index, the claim function,
    the seq of parked rows (the previous version left it NULL) and the schema mark."""
    with engine.begin() as conn:
        conn.execute(text("DROP INDEX IF EXISTS conveyor_job_queue_due_by_queue"))
        if engine.dialect.name == "postgresql":
            conn.execute(text(f"DROP FUNCTION IF EXISTS {claim_function_name(SCHEMA)}"))
            conn.execute(text("COMMENT ON TABLE conveyor_job_queue IS NULL"))
        else:
            conn.execute(text("PRAGMA user_version = 0"))
        conn.execute(text("UPDATE conveyor_job_queue SET seq = NULL WHERE status = 'scheduled'"))


def index_names(engine: Engine) -> set[str]:
    from sqlalchemy import inspect

    return {str(i["name"]) for i in inspect(engine).get_indexes(SCHEMA.job_queue.name)}


def test_a_database_made_by_the_previous_version_keeps_working(db: Db) -> None:
    ready, due = make_job(), make_job(delay_ms=1000)
    db.queue.enqueue(ready)
    db.queue.enqueue(due)
    make_it_look_old(db.engine)
    assert "conveyor_job_queue_due_by_queue" not in index_names(db.engine)
    now = T0 + timedelta(seconds=1)
    queue = SqlJobQueue(db.engine)  # no create_tables yet
    assert claim_order(queue, now=now) == [ready.id, due.id]
    create_tables(db.engine)
    assert "conveyor_job_queue_due_by_queue" in index_names(db.engine)
    again = make_job(delay_ms=1000)
    db.queue.enqueue(again)
    assert claim_order(SqlJobQueue(db.engine), now=now) == [again.id]


# --- idle workers and the pool -------------------------------------------------------------


def listen_connections(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(
            conn.execute(
                text(
                    "SELECT count(*) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND query LIKE 'LISTEN%'"
                )
            ).scalar_one()
        )


def test_make_engine_takes_a_pool_size(db: Db) -> None:
    engine = make_engine(db.url, pool_size=3)
    try:
        assert engine.pool.size() == 3  # type: ignore[attr-defined]
    finally:
        engine.dispose()


def test_thirty_two_idle_workers_leave_the_pool_to_enqueue_and_claim(db: Db) -> None:
    engine = make_engine(db.url, pool_size=2, max_overflow=2, pool_timeout=3)
    queue = SqlJobQueue(engine)
    stop = threading.Event()
    failures: list[BaseException] = []
    woken = [0] * 32

    def idle_worker(n: int) -> None:
        try:
            while not stop.is_set():
                if queue.wait_for_work("default", 0.2):
                    woken[n] += 1
        except BaseException as exc:
            failures.append(exc)

    workers = [threading.Thread(target=idle_worker, args=(n,)) for n in range(32)]
    for w in workers:
        w.start()
    try:
        time.sleep(0.5)  # every worker is waiting now
        began = time.monotonic()
        job = make_job()
        queue.enqueue(job)
        assert claim(queue).job == job
        assert time.monotonic() - began < 2, "enqueue and claim waited for the pool"
        if db.kind == "postgresql":
            deadline = time.monotonic() + 5
            while (listening := listen_connections(engine)) != 1 and time.monotonic() < deadline:
                time.sleep(0.1)
            assert listening == 1, "one wake-up listener per process"
        deadline = time.monotonic() + 5
        while sum(1 for n in woken if n) < 32 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert all(woken), "every idle worker heard of the new job"
    finally:
        stop.set()
        for w in workers:
            w.join(timeout=10)
        queue.close()
        engine.dispose()
    assert failures == []


@pytest.mark.parametrize("db", ["postgresql"], indirect=True)
def test_a_postgresql_waiter_sleeps_through_other_queues_jobs(db: Db) -> None:
    # A listener that connects wakes every waiter once (what was announced before it
    # listened is lost); on a busy machine that may come late, so let it come first.
    deadline = time.monotonic() + 10
    while not db.queue.wait_for_work("default", 0.5) and time.monotonic() < deadline:
        pass
    assert db.queue.wait_for_work("default", 0.01) is False
    db.queue.enqueue(make_job("other"))
    time.sleep(0.2)
    assert db.queue.wait_for_work("default", 0.3) is False
    db.queue.enqueue(make_job("default"))
    assert db.queue.wait_for_work("default", 5.0) is True


def test_the_listener_stops_when_its_queues_are_closed(db: Db) -> None:
    queue = SqlJobQueue(db.engine)
    wakeups = wakeups_for(db.engine)
    queue.wait_for_work("default", 0.01)
    assert wakeups.listening
    queue.close()
    db.queue.close()
    deadline = time.monotonic() + 5
    while wakeups.listening and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not wakeups.listening


@pytest.mark.parametrize("db", ["postgresql"], indirect=True)
def test_closing_the_last_queue_ends_the_listener_session_before_close_returns(
    db: Db,
) -> None:
    # A DROP DATABASE (or a server that stops) right after close must find no session
    # of ours left: the listener used to notice it was unused only a second later.
    queue = SqlJobQueue(db.engine)
    queue.wait_for_work("default", 0.01)
    deadline = time.monotonic() + 5
    while listen_connections(db.engine) != 1 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert listen_connections(db.engine) == 1
    queue.close()
    db.queue.close()
    assert not wakeups_for(db.engine).listening
    assert listen_connections(db.engine) == 0


def test_a_postgresql_listener_that_fails_before_it_connects_is_started_again() -> None:
    # A failure outside the listener's connection (here: making its pool) must not
    # leave a dead thread that the next wait takes for a live one.
    from conveyor.testing.postgres_server import drop_database, fresh_database

    url = fresh_database(prefix="conveyor_listener_restart")
    engine = make_engine(url)
    create_tables(engine)
    queue = SqlJobQueue(engine)
    real = engine.pool.recreate
    made: list[int] = []

    def recreate_failing_once() -> Any:
        made.append(1)
        if len(made) == 1:
            raise RuntimeError("no pool this time")
        return real()

    engine.pool.recreate = recreate_failing_once  # type: ignore[method-assign]
    try:
        queue.wait_for_work("default", 0.2)  # starts the listener, which fails at once
        deadline = time.monotonic() + 15
        woke = False
        while not woke and time.monotonic() < deadline:
            queue.enqueue(make_job("default"))
            woke = queue.wait_for_work("default", 1.0)
        assert woke, "no waiter was woken: the listener was never started again"
        assert len(made) >= 2
    finally:
        queue.close()
        engine.dispose()
        drop_database(url)


def _waiting_on(queue: SqlJobQueue) -> tuple[threading.Event, threading.Thread]:
    """A thread waiting for work on `queue` (so its process listens) until the event."""
    stop = threading.Event()
    waiter = threading.Thread(
        target=lambda: [queue.wait_for_work("default", 0.2) for _ in iter(stop.is_set, True)]
    )
    waiter.start()
    return stop, waiter


def _until_listening(engine: Engine) -> None:
    deadline = time.monotonic() + 10
    while listen_connections(engine) != 1:
        assert time.monotonic() < deadline, "the listener did not listen"
        time.sleep(0.02)


@pytest.mark.parametrize("db", ["postgresql"], indirect=True)
def test_a_listener_session_ended_while_the_server_is_up_is_no_outage(db: Db) -> None:
    # Its session terminated (pg_terminate_backend, a pooler's recycling), the listener
    # told the process's server watch, which logged the server unreachable, then back.
    told: list[BaseException] = []

    class Watch:
        def failed(self, exc: BaseException) -> bool:
            told.append(exc)
            return True

    queue = SqlJobQueue(db.engine)
    queue.report_outages_to(Watch())
    stop, waiter = _waiting_on(queue)
    try:
        _until_listening(db.engine)
        with db.engine.begin() as conn:
            ended = conn.execute(
                text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND query LIKE 'LISTEN%'"
                )
            ).scalar_one()
        assert ended is True
        deadline = time.monotonic() + 10
        time.sleep(0.2)
        while listen_connections(db.engine) != 1:
            assert time.monotonic() < deadline, "the listener came back"
            time.sleep(0.02)
    finally:
        stop.set()
        waiter.join(10)
        queue.close()
    assert told == []


@pytest.mark.parametrize("db", ["postgresql"], indirect=True)
def test_a_listener_that_cannot_listen_again_after_its_session_ended_says_so(
    db: Db, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # After a session ended, every later failure counted as "failing again" and was
    # logged at DEBUG: a listener that could never listen again was never told.
    class NoOutage:
        def failed(self, exc: BaseException) -> bool:
            return False  # the server is up: the listener logs the failure itself

    queue = SqlJobQueue(db.engine)
    queue.report_outages_to(NoOutage())
    stop, waiter = _waiting_on(queue)

    class Refusing:
        """A pool whose connections are refused for good (a revoked login, say)."""

        def connect(self) -> None:
            raise PermissionError("permission denied for database")

        def dispose(self) -> None:
            pass

    try:
        _until_listening(db.engine)
        with caplog.at_level("DEBUG", logger="conveyor.shell.adapters.sql.wakeups"):
            monkeypatch.setattr(db.engine.pool, "recreate", Refusing)
            with db.engine.begin() as conn:
                conn.execute(
                    text(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                        " WHERE datname = current_database() AND query LIKE 'LISTEN%'"
                    )
                )
            deadline = time.monotonic() + 10
            while not any(r.levelname == "WARNING" for r in caplog.records):
                assert time.monotonic() < deadline, [r.getMessage() for r in caplog.records]
                time.sleep(0.05)
    finally:
        stop.set()
        waiter.join(10)
        monkeypatch.undo()
        queue.close()
    warned = [r for r in caplog.records if r.levelname == "WARNING"]
    assert "the PostgreSQL wake-up listener failed" in warned[0].getMessage()


def test_a_postgresql_server_that_never_answers_fails_a_connect_within_its_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # libpq waits as long as TCP does: an operator command against a server that
    # accepts connections and never answers hung for over two minutes.
    import socket

    from conveyor.shell.adapters.sql import engine as engines
    from sqlalchemy.exc import OperationalError

    monkeypatch.setattr(engines, "CONNECT_TIMEOUT_S", 2, raising=False)
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                held.append(silent.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    engine = make_engine(f"postgresql://user:secret@127.0.0.1:{silent.getsockname()[1]}/jobs")
    raised: list[BaseException] = []

    def connect() -> None:
        try:
            engine.connect().close()
        except BaseException as exc:
            raised.append(exc)

    attempt = threading.Thread(target=connect, daemon=True)
    attempt.start()
    attempt.join(60)
    try:
        assert not attempt.is_alive(), "the connect still waits for the silent server"
        assert len(raised) == 1 and isinstance(raised[0], OperationalError), raised
    finally:
        silent.close()
        for conn in held:
            conn.close()
        engine.dispose()


def test_the_default_connect_timeout_gives_way_to_any_other_and_speaks_each_drivers_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # asyncpg was handed psycopg's `connect_timeout` (every async PostgreSQL connect
    # failed with a TypeError), and PGCONNECT_TIMEOUT was overridden by the default.
    from conveyor.shell.adapters.sql.engine import CONNECT_TIMEOUT_S, with_connect_timeout
    from sqlalchemy import make_url

    def connect_args(url: str, **options: Any) -> dict[str, Any]:
        address, made = with_connect_timeout(make_url(url), options)
        assert "connect_timeout" not in address.query or "asyncpg" not in url
        return dict(made["connect_args"])

    monkeypatch.delenv("PGCONNECT_TIMEOUT", raising=False)
    sync, asyncpg = "postgresql+psycopg://u@db/jobs", "postgresql+asyncpg://u@db/jobs"
    assert connect_args(sync) == {"connect_timeout": CONNECT_TIMEOUT_S}
    assert connect_args(asyncpg) == {"timeout": CONNECT_TIMEOUT_S}
    assert connect_args(sync + "?connect_timeout=3") == {}, "libpq reads the URL's"
    assert connect_args(asyncpg + "?connect_timeout=3") == {"timeout": 3.0}
    own = {"connect_timeout": 30, "options": "-c x=1"}
    assert connect_args(sync, connect_args=own) == own
    monkeypatch.setenv("PGCONNECT_TIMEOUT", "45")
    assert connect_args(sync) == {}, "libpq reads the environment"
    assert connect_args(asyncpg) == {"timeout": 45.0}
