"""The SQL backend, on a SQLite file and on a real PostgreSQL server: what is its own
(schema and migrations, the database's clock kept out of claims, raw rows that are
not jobs, processes killed mid-claim, SQLite's lock, the outbox, engines). What
every backend shares (claim order, fencing, promotion, concurrent claimers, the
store's reads) is in the contract (`conveyor.testing.contract`), run here by
test_adapter_surface.py.

Every test taking `db` runs on both. PostgreSQL comes from `DATABASE_URL` or from a
server this process starts (see `conveyor.testing.postgres_server`); when neither
works the PostgreSQL cases fail, they never skip. Times are the injected clock's:
the tests pass instants by hand, far from the database's own clock.
"""

from __future__ import annotations

import json
import os
import pickle
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import attrs
import conveyor
import pytest
from conveyor.core import (
    Job,
    JobStatus,
    LeasePolicy,
    Priority,
    ValidationError,
    create_job,
    decide_reclaim,
    reclaim_cutoff,
    start,
)
from conveyor.shell.adapters.sql import SqlJobQueue, SqlJobStore, from_micros, make_engine
from conveyor.shell.adapters.sql.ddl import ddl_text
from conveyor.shell.adapters.sql.migration import create_tables
from conveyor.shell.adapters.sql.schema import SCHEMA, make_schema
from conveyor.shell.ports import BadClaim, Claim
from conveyor.testing.postgres_server import (
    drop_database,
    fresh_database,
    postgres_url,
    with_psycopg,
)
from sqlalchemy import Column, Engine, Integer, MetaData, String, Table, func, insert, select, text
from sqlalchemy import event as sa_event

T0 = datetime(2026, 1, 1, tzinfo=UTC)
LEASE_MS = 30_000
MICRO = timedelta(microseconds=1)
DOCS = Path(__file__).resolve().parents[2] / "docs" / "sql.md"


# --- fixtures ------------------------------------------------------------------------------


@dataclass
class Db:
    kind: str
    url: str
    engine: Engine
    queue: SqlJobQueue
    store: SqlJobStore


@pytest.fixture(scope="module")
def pg_url() -> Iterator[str]:
    """This module's own PostgreSQL database, with the tables created."""
    url = fresh_database(postgres_url())
    engine = make_engine(url)
    create_tables(engine)
    engine.dispose()
    yield url
    drop_database(url)


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Db]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'conveyor.db'}"
        engine = make_engine(url)
        create_tables(engine)
    else:
        url = request.getfixturevalue("pg_url")
        engine = make_engine(url)
        with engine.begin() as conn:
            conn.execute(text(f"TRUNCATE {SCHEMA.job_queue.name}, {SCHEMA.job_store.name}"))
            conn.execute(text("DROP TABLE IF EXISTS orders"))
    yield Db(request.param, url, engine, SqlJobQueue(engine), SqlJobStore(engine))
    engine.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database with no tables at all."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'empty.db'}"
        return
    url = fresh_database(postgres_url())
    yield url
    drop_database(url)


def make_job(
    queue: str = "default",
    priority: Priority = Priority.NORMAL,
    delay_ms: int = 0,
    now: datetime = T0,
    **options: Any,
) -> Job:
    delay = timedelta(milliseconds=delay_ms) if delay_ms else None
    return create_job(
        id=uuid4(), job_type="work", now=now, queue=queue, priority=priority, delay=delay, **options
    ).unwrap()


def claim(q: SqlJobQueue, queue: str = "default", now: datetime = T0) -> Claim:
    got = q.dequeue(queue, now)
    assert isinstance(got, Claim), f"expected a claim, got {got!r}"
    return got


def claim_order(q: SqlJobQueue, queue: str = "default", now: datetime = T0) -> list[UUID]:
    order = []
    while (got := q.dequeue(queue, now)) is not None:
        assert isinstance(got, Claim) and q.ack(got)
        order.append(got.job.id)
    return order


def reclaimed(c: Claim, now: datetime) -> Job:
    policy = LeasePolicy(lease_ms=LEASE_MS)
    cutoff = reclaim_cutoff(now, LEASE_MS)
    return decide_reclaim(start(c.job, now).unwrap(), now, policy, cutoff).job


# --- helper processes ----------------------------------------------------------------------

WORKER = r"""
import json, sys, time
from datetime import UTC, datetime
from uuid import uuid4
from conveyor.core import create_job
from conveyor.shell.adapters.sql import SqlJobQueue, make_engine

mode, url = sys.argv[1], sys.argv[2]
T0 = datetime(2026, 1, 1, tzinfo=UTC)

if mode == "claim-all":
    q = SqlJobQueue(make_engine(url))
    print("ready", flush=True)
    sys.stdin.readline()
    got = []
    while (c := q.dequeue("default", T0)) is not None:
        assert q.ack(c), "an ack of a live claim failed"
        got.append(str(c.job.id))
    print(json.dumps(got), flush=True)

elif mode == "claim-and-hang":
    q = SqlJobQueue(make_engine(url))
    c = q.dequeue("default", T0)
    print(json.dumps({"id": str(c.job.id), "token": c.token}), flush=True)
    time.sleep(120)

elif mode == "hammer":
    q = SqlJobQueue(make_engine(url, busy_timeout_ms=1), lock_retry_s=60)
    print("ready", flush=True)
    sys.stdin.readline()
    enqueued, acked = [], []
    for _ in range(int(sys.argv[3])):
        job = create_job(id=uuid4(), job_type="work", now=T0, queue="hammer").unwrap()
        q.enqueue(job)
        enqueued.append(str(job.id))
        c = q.dequeue("hammer", T0)
        if c is not None:
            assert q.ack(c), "an ack of a live claim failed"
            acked.append(str(c.job.id))
    print(json.dumps({"enqueued": enqueued, "acked": acked, "retries": q.lock_retries}))
"""


def spawn(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", WORKER, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def run_together(procs: list[subprocess.Popen[str]]) -> list[Any]:
    """Wait until every process is ready, release them at once, return their JSON output."""
    for p in procs:
        assert p.stdout is not None
        line = p.stdout.readline()
        assert line.strip() == "ready", p.stderr.read() if p.stderr else line
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    results = []
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results


# --- schema --------------------------------------------------------------------------------


def test_create_tables_twice_is_harmless(db: Db) -> None:
    db.queue.enqueue(make_job())
    create_tables(db.engine)
    create_tables(db.engine)
    assert db.queue.counts(T0)["default"].ready == 1


def test_a_current_schema_is_left_alone_with_no_ddl(db: Db) -> None:
    """A process finding this version's schema runs no DDL: on PostgreSQL its table
    locks queued behind running workers and deadlocked with them."""
    create_tables(db.engine)
    statements: list[str] = []

    def seen(conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
        statements.append(statement)

    sa_event.listen(db.engine, "before_cursor_execute", seen)
    try:
        create_tables(db.engine)
    finally:
        sa_event.remove(db.engine, "before_cursor_execute", seen)
    reads = [s for s in statements if not s.startswith("BEGIN")]
    assert len(reads) == 1 and re.match(r"\s*(SELECT|PRAGMA user_version$)", reads[0]), reads


def test_starting_beside_a_busy_worker_waits_for_no_lock(db: Db) -> None:
    """A transaction holding a queue row (a worker mid-claim) does not hold up a new
    process starting on a current schema."""
    db.queue.enqueue(make_job())
    with db.engine.connect() as busy:
        busy.begin()
        busy.execute(text(f"UPDATE {SCHEMA.job_queue.name} SET priority = priority"))
        began = time.monotonic()
        done = threading.Thread(target=create_tables, args=(db.engine,))
        done.start()
        done.join(5)
        assert not done.is_alive(), "create_tables waited on a running transaction"
        busy.rollback()
    assert time.monotonic() - began < 5


def test_ddl_text_is_create_statements_for_each_dialect() -> None:
    pg, lite = ddl_text("postgresql"), ddl_text("sqlite")
    for ddl in (pg, lite):
        assert "CREATE TABLE conveyor_job_queue (" in ddl
        assert "CREATE TABLE conveyor_job_store (" in ddl
        assert "CREATE INDEX conveyor_job_queue_claim ON conveyor_job_queue " in ddl
    assert "CREATE SEQUENCE conveyor_job_seq" in pg and "conveyor_counters" not in pg
    assert "CREATE TABLE conveyor_counters (" in lite and "SEQUENCE" not in lite


def test_ddl_text_builds_a_working_schema(empty_url: str) -> None:
    engine = make_engine(empty_url)
    try:
        with engine.begin() as conn:
            for statement in ddl_text(engine.dialect).split(";\n\n"):
                if statement.strip():
                    conn.exec_driver_sql(statement)
        q = SqlJobQueue(engine)
        job = make_job()
        q.enqueue(job)
        assert claim(q).job == job
    finally:
        engine.dispose()


def test_a_table_prefix_keeps_two_installations_apart(db: Db) -> None:
    other = make_schema("other")
    create_tables(db.engine, other)
    try:
        SqlJobQueue(db.engine, schema=other).enqueue(make_job())
        assert db.queue.counts(T0) == {}
    finally:
        other.metadata.drop_all(db.engine, tables=other.tables_for(db.engine.dialect))


# --- claims --------------------------------------------------------------------------------


def test_a_claim_is_locked_at_the_callers_now_not_the_database_clock(db: Db) -> None:
    long_ago = datetime(2001, 1, 1, tzinfo=UTC)
    db.queue.enqueue(make_job())
    held = claim(db.queue, now=long_ago)
    assert held.locked_at == long_ago
    assert db.queue.abandoned(long_ago) == []
    [found] = db.queue.abandoned(long_ago + MICRO)
    assert (found.token, found.locked_at) == (held.token, long_ago)


# --- fencing -------------------------------------------------------------------------------


def test_replace_refuses_a_job_with_another_id(db: Db) -> None:
    db.queue.enqueue(make_job())
    held = claim(db.queue)
    with pytest.raises(ValidationError) as error:
        db.queue.replace(held, make_job())
    assert error.value.fields == ("job",)


# --- payloads that are not jobs ------------------------------------------------------------


class _Exploit:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.marker}",))


def insert_raw(db: Db, payload: str, status: str = "ready", locked_at: int | None = None) -> str:
    job_id = str(uuid4())
    row = {"id": job_id, "queue": "default", "status": status, "priority": 2, "seq": 1}
    row |= {"run_at": 0, "payload": payload, "locked_at": locked_at}
    row |= {"locked_by": "dead-worker" if status == "processing" else None}
    with db.engine.begin() as conn:
        conn.execute(insert(SCHEMA.job_queue).values(row))
    return job_id


def test_a_pickle_payload_is_claimed_as_a_bad_claim_and_never_unpickled(
    db: Db, tmp_path: Path
) -> None:
    marker = tmp_path / "unpickled"
    payload = pickle.dumps(_Exploit(marker), protocol=0).decode("ascii")
    job_id = insert_raw(db, payload)
    bad = db.queue.dequeue("default", T0)
    assert isinstance(bad, BadClaim)
    assert (bad.job_id, bad.payload, bad.locked_at) == (job_id, payload, T0)
    assert "not JSON" in bad.reason
    assert not marker.exists()
    assert db.queue.counts(T0)["default"].in_flight == 1


def test_an_abandoned_undecodable_row_is_reported_as_a_bad_claim_and_left_as_it_is(
    db: Db,
) -> None:
    job_id = insert_raw(db, '{"v": 99}', status="processing", locked_at=0)
    [bad] = db.queue.abandoned(T0)
    assert isinstance(bad, BadClaim)
    assert (bad.job_id, bad.token, bad.locked_at) == (job_id, "dead-worker", from_micros(0))
    assert "version" in bad.reason
    assert db.queue.counts(T0)["default"].in_flight == 1, "abandoned() must not write"
    assert db.queue.dequeue("default", T0) is None


# --- concurrency ---------------------------------------------------------------------------


def test_three_processes_claim_each_job_exactly_once(db: Db) -> None:
    jobs = [make_job() for _ in range(600)]
    with db.engine.begin() as conn:
        for job in jobs:
            db.queue.enqueue_in_tx(conn, job)
    results = run_together([spawn("claim-all", db.url) for _ in range(3)])
    claimed = [job_id for mine in results for job_id in mine]
    assert len(claimed) == len(jobs) and set(claimed) == {str(j.id) for j in jobs}
    assert db.queue.counts(T0) == {}


def test_a_worker_killed_mid_job_is_reclaimed_and_its_stale_ack_changes_nothing(db: Db) -> None:
    job = make_job()
    db.queue.enqueue(job)
    worker = spawn("claim-and-hang", db.url)
    assert worker.stdout is not None
    held = json.loads(worker.stdout.readline())
    worker.send_signal(signal.SIGKILL)
    worker.wait(timeout=10)
    assert worker.returncode == -signal.SIGKILL
    assert db.queue.abandoned(T0) == []  # still within its lease

    now = T0 + timedelta(milliseconds=LEASE_MS + 1)
    cutoff = reclaim_cutoff(now, LEASE_MS)
    [orphan] = db.queue.abandoned(cutoff)
    assert isinstance(orphan, Claim)
    assert (str(orphan.job.id), orphan.token) == (held["id"], held["token"])
    assert db.queue.reclaim(orphan, reclaimed(orphan, now), cutoff)

    rescuer = claim(db.queue, now=now)
    assert rescuer.job.id == job.id and rescuer.job.metadata.reclaim_count == 1
    assert db.queue.ack(orphan) is False  # the dead worker's token, were it to come back
    assert db.queue.counts(now)["default"].in_flight == 1
    assert db.queue.ack(rescuer) is True
    assert db.queue.counts(now) == {}


def test_sqlite_database_is_locked_is_retried_and_loses_nothing(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'hammer.db'}"
    engine = make_engine(url)
    create_tables(engine)
    results = run_together([spawn("hammer", url, "250") for _ in range(2)])
    enqueued = [i for r in results for i in r["enqueued"]]
    acked = [i for r in results for i in r["acked"]]
    assert sum(r["retries"] for r in results) > 0, "the lock was never contended"
    left = [str(i) for i in claim_order(SqlJobQueue(engine), "hammer")]
    assert len(acked) == len(set(acked))
    assert sorted(acked + left) == sorted(enqueued)
    engine.dispose()


# --- transactional enqueue (outbox) --------------------------------------------------------

ORDERS = Table(
    "orders",
    MetaData(),
    Column("id", Integer, primary_key=True),
    Column("item", String(50), nullable=False),
)


def order_count(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(ORDERS)).scalar_one())


@pytest.fixture
def orders(db: Db) -> Db:
    ORDERS.create(db.engine, checkfirst=True)
    return db


def test_outbox_commit_keeps_both_the_order_and_the_job(orders: Db) -> None:
    job = make_job()
    with orders.engine.begin() as conn:
        conn.execute(insert(ORDERS).values(item="book"))
        orders.queue.enqueue_in_tx(conn, job)
    assert order_count(orders.engine) == 1
    assert claim(orders.queue).job == job


class Boom(Exception):
    pass


def test_outbox_rollback_keeps_neither(orders: Db) -> None:
    with pytest.raises(Boom), orders.engine.begin() as conn:
        conn.execute(insert(ORDERS).values(item="book"))
        orders.queue.enqueue_in_tx(conn, make_job())
        raise Boom
    assert order_count(orders.engine) == 0
    assert orders.queue.counts(T0) == {}


def test_outbox_job_is_invisible_to_other_connections_until_commit(orders: Db) -> None:
    with orders.engine.connect() as conn:
        tx = conn.begin()
        conn.execute(insert(ORDERS).values(item="book"))
        orders.queue.enqueue_in_tx(conn, make_job())
        assert orders.queue.counts(T0) == {}
        tx.commit()
    assert orders.queue.counts(T0)["default"].ready == 1


@pytest.mark.parametrize("db", ["postgresql"], indirect=True)
def test_postgresql_claimer_sees_nothing_before_the_commit(orders: Db) -> None:
    job = make_job()
    with orders.engine.connect() as conn:
        tx = conn.begin()
        orders.queue.enqueue_in_tx(conn, job)
        assert orders.queue.dequeue("default", T0) is None
        tx.commit()
    assert claim(orders.queue).job == job


@pytest.mark.parametrize("db", ["sqlite"], indirect=True)
def test_sqlite_claimer_waits_for_the_enqueuing_transaction_to_commit(orders: Db) -> None:
    job = make_job()
    with ThreadPoolExecutor(1) as pool, orders.engine.connect() as conn:
        tx = conn.begin()
        orders.queue.enqueue_in_tx(conn, job)
        claimer = pool.submit(orders.queue.dequeue, "default", T0)
        time.sleep(0.3)
        assert not claimer.done(), "claimed through an open write transaction"
        tx.commit()
        got = claimer.result(timeout=10)
    assert isinstance(got, Claim) and got.job == job


def test_enqueue_in_tx_refuses_an_engine(db: Db) -> None:
    with pytest.raises(ValidationError) as error:
        db.queue.enqueue_in_tx(db.engine, make_job())
    assert error.value.fields == ("conn",) and "Engine" in str(error.value)
    assert db.queue.counts(T0) == {}


def test_enqueue_in_tx_given_a_session_says_to_pass_its_connection(db: Db) -> None:
    # It said an Engine would commit the job on its own: not what a Session is.
    from sqlalchemy.orm import Session

    with Session(db.engine) as session, pytest.raises(ValidationError) as error:
        db.queue.enqueue_in_tx(session, make_job())
    assert error.value.fields == ("conn",)
    assert "got Session; pass session.connection()" in str(error.value), error.value
    assert db.queue.counts(T0) == {}


def test_enqueue_in_tx_refuses_after_naming_the_workflow_call(tmp_path: Path) -> None:
    # It raised TypeError "unexpected options: ['after']".
    runtime = conveyor.build({"url": f"sqlite:///{tmp_path / 'jobs.db'}", "entry_points": False})
    try:
        first = runtime.enqueue("a", {})
        with pytest.raises(ValidationError) as error, runtime.queue.engine.begin() as conn:
            runtime.enqueue_in_tx(conn, "b", {}, after=[first])
    finally:
        runtime.close()
    assert error.value.fields == ("after",) and "enqueue_workflow_in_tx" in str(error.value)


def test_enqueue_in_tx_refuses_a_connection_without_a_transaction(db: Db) -> None:
    with db.engine.connect() as conn, pytest.raises(ValidationError) as error:
        db.queue.enqueue_in_tx(conn, make_job())
    assert error.value.fields == ("conn",) and "no transaction" in str(error.value)
    assert db.queue.counts(T0) == {}


def test_the_docs_transactional_enqueue_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOCS.read_text(encoding="utf-8"), re.S)
    exec(compile(blocks[-1], str(DOCS), "exec"), {})
    assert capsys.readouterr().out.split() == ["orders=1", "claimed=send-receipt"]


# --- the store -----------------------------------------------------------------------------


def finished(job: Job, status: JobStatus, at: datetime = T0) -> Job:
    return attrs.evolve(job, status=status, finished_at=at)


# --- engines -------------------------------------------------------------------------------


def test_make_engine_gives_sqlite_wal_a_busy_timeout_and_full_sync(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'x.db'}", busy_timeout_ms=1234)
    with engine.connect() as conn:
        settings = [
            conn.exec_driver_sql(f"PRAGMA {name}").scalar()
            for name in ("journal_mode", "busy_timeout", "synchronous", "journal_size_limit")
        ]
    # synchronous 2 is FULL; a log a long reader let grow is cut back to 32 MiB.
    assert settings == ["wal", 1234, 2, 32 * 1024 * 1024]
    engine.dispose()


def test_sqlite_write_transactions_take_the_write_lock_at_begin(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    engine = make_engine(f"sqlite:///{path}")
    create_tables(engine)
    other = sqlite3.connect(path, timeout=0, isolation_level=None)
    try:
        with engine.begin(), pytest.raises(sqlite3.OperationalError, match="locked"):
            other.execute("BEGIN IMMEDIATE")
        other.execute("BEGIN IMMEDIATE")
    finally:
        other.close()
        engine.dispose()


def test_a_sqlite_url_with_two_slashes_is_told_how_to_name_the_file() -> None:
    # It said "an in-memory SQLite database is per connection" of `sqlite://jobs.db`.
    with pytest.raises(ValidationError) as refused:
        make_engine("sqlite://jobs.db")
    assert str(refused.value) == (
        "url: names no file: write sqlite:///jobs.db (three slashes) for a path relative "
        "to the current directory, four for an absolute one"
    )


def test_make_engine_refuses_in_memory_sqlite() -> None:
    with pytest.raises(ValidationError) as error:
        make_engine("sqlite://")
    assert error.value.fields == ("url",)


def test_plain_postgresql_urls_get_the_psycopg_driver() -> None:
    assert make_engine("postgresql://u@db.example/app").url.drivername == "postgresql+psycopg"
    assert with_psycopg("postgres://u@h/d") == "postgresql+psycopg://u@h/d"
    assert with_psycopg("postgresql://u@h/d") == "postgresql+psycopg://u@h/d"


def test_the_docs_show_the_current_postgresql_ddl() -> None:
    [shown] = re.findall(r"```sql\n(.*?)```", DOCS.read_text(encoding="utf-8"), re.S)
    assert shown.strip() == ddl_text("postgresql").strip()


def test_a_failing_statement_never_shows_job_args_in_its_error(tmp_path: Path) -> None:
    import uuid

    from conveyor.core import create_job

    engine = make_engine(f"sqlite:///{tmp_path / 'x.db'}")
    create_tables(engine)
    with engine.begin() as conn:  # a broken table: the upsert carrying the payload fails
        conn.execute(text("DROP TABLE conveyor_job_queue"))
        conn.execute(text("CREATE TABLE conveyor_job_queue (id TEXT PRIMARY KEY)"))
    queue = SqlJobQueue(engine)
    job = create_job(
        id=uuid.uuid4(), job_type="t", args={"password": "s3cr3t-canary"}, now=T0
    ).unwrap()
    with pytest.raises(Exception) as info:
        queue.enqueue(job)
    assert "s3cr3t-canary" not in str(info.value)
