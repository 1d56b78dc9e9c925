"""Limits from the outside: the `partition` option, the wire format, `[limits.<queue>]`
in the config (on Redis too), the worker's claims, and the SQL migration that
adds the columns limited claims read (real SQLite files and a real PostgreSQL)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
import redis
import sqlalchemy as sa
from cli_support import Ran, call_main
from conveyor.core import ValidationError
from conveyor.core.limits import Cap, QueueLimits, Rate
from conveyor.shell.adapters.sql import SqlJobQueue, make_engine
from conveyor.shell.adapters.sql.ddl import ddl_text
from conveyor.shell.adapters.sql.migration import migrate, schema_problem
from conveyor.shell.adapters.sql.schema import SCHEMA
from conveyor.shell.codec import decode, encode, to_document
from conveyor.shell.config import parse_config
from conveyor.shell.runtime import build
from conveyor.testing.clock import ManualClock
from conveyor.testing.postgres_server import drop_database, fresh_database
from conveyor.testing.redis_server import redis_url
from helpers import T0, make_job

PAYMENTS = {
    "fair": True,
    "weights": {"tenant-a": 3},
    "max_running": 20,
    "caps": [{"job_type": "charge-card", "per_partition": True, "max_running": 3}],
    "rates": [{"job_type": "send-email", "per_partition": False, "starts": 10, "per_seconds": 1.0}],
}


# ---- the partition option and the wire format ------------------------------------------


def test_partition_key_round_trips_through_the_wire_format() -> None:
    job = make_job(partition="tenant-7")
    assert decode(encode(job)).unwrap() == job
    assert to_document(job)["partition_key"] == "tenant-7"


def test_a_document_written_before_partitions_decodes_without_one() -> None:
    doc = to_document(make_job())
    del doc["partition_key"]
    import json

    assert decode(json.dumps(doc)).unwrap().partition_key is None


def test_enqueue_takes_a_partition_and_refuses_a_bad_one_naming_it() -> None:
    runtime = build({"provider": "memory"})
    assert runtime.enqueue("t", partition="acme").partition_key == "acme"
    with pytest.raises(ValidationError) as bad:
        runtime.enqueue("t", partition="x" * 201)
    assert str(bad.value) == "partition: must be at most 200 characters"


@pytest.fixture
def status(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Callable[[Path], Ran]:
    """`status(project)`: `conveyor status` in `project`, called in this process, as a
    user runs it there (no CONVEYOR_ variables)."""
    for name in os.environ:
        if name.startswith("CONVEYOR_"):
            monkeypatch.delenv(name)

    def run(project: Path) -> Ran:
        monkeypatch.chdir(project)
        return call_main(capsys, "status")

    return run


# ---- config --------------------------------------------------------------------------


def test_limits_tables_become_queue_limits() -> None:
    limits = dict(parse_config({"limits": {"payments": PAYMENTS}}).limits)
    assert limits == {
        "payments": QueueLimits(
            fair=True,
            weights={"tenant-a": 3.0},
            max_running=20,
            caps=(Cap(3, "charge-card", per_partition=True),),
            rates=(Rate(10, 1.0, "send-email"),),
        )
    }


@pytest.mark.parametrize(
    ("table", "message"),
    [
        (
            {"caps": [{"max_running": 0}]},
            "limits.payments.caps[0].max_running: must be >= 1, got 0",
        ),
        (
            {"rates": [{"starts": 5, "per_seconds": 0}]},
            "limits.payments.rates[0].per_seconds: must be a number of seconds > 0 and "
            "below 1e9 (31 years), got 0",
        ),
        (
            # The bound was not said: "must be ... > 0, got 1e+300".
            {"rates": [{"starts": 5, "per_seconds": 1e300}]},
            "limits.payments.rates[0].per_seconds: must be a number of seconds > 0 and "
            "below 1e9 (31 years), got 1e+300",
        ),
        ({"rates": [{"starts": 5}]}, "limits.payments.rates[0].per_seconds: is required"),
        (
            {"weights": {"a": 2}},
            "limits.payments.weights: apply only to fair shares: add fair = true, or drop "
            "the weights",
        ),
        (
            {"weights": {"a": -2, "b": 0, "c": 1}},
            "limits.payments.weights.a: must be a number > 0 and below 1e9, got -2; "
            "limits.payments.weights.b: must be a number > 0 and below 1e9, got 0",
        ),
        ({"fair": "yes"}, "limits.payments.fair: must be true or false"),
        ({"max_running": 1.5}, "limits.payments.max_running: must be an integer, got 1.5"),
    ],
)
def test_a_bad_limit_is_one_line_naming_the_key(table: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError) as bad:
        parse_config({"limits": {"payments": table}})
    assert str(bad.value) == message


REDIS_LIMITS_DB = 15  # a database of its own: other tests flush theirs


def test_limits_on_redis_work_from_the_config_file_to_conveyor_status(
    tmp_path: Path, status: Callable[[Path], Ran]
) -> None:
    url = redis_url(REDIS_LIMITS_DB)
    flush = redis.Redis.from_url(url)
    flush.flushdb()
    flush.close()
    config = tmp_path / "conveyor.toml"
    config.write_text(
        f'provider = "redis"\n[redis]\nurl = "{url}"\n[workers]\nqueues = ["q"]\n'
        "[limits.q]\nfair = true\n[[limits.q.caps]]\nper_partition = true\nmax_running = 1\n"
    )
    assert dict(parse_config({"provider": "redis", "limits": {"q": {"fair": True}}}).limits) == {
        "q": QueueLimits(fair=True)
    }
    ran: list[str] = []
    runtime = build(str(config), handlers={"t": lambda args: ran.append(args["who"])})
    try:
        assert runtime.limits == {"q": QueueLimits(fair=True, caps=(Cap(1, per_partition=True),))}
        runtime.enqueue_many("t", [{"who": "flood"}] * 30, queue="q", tenant_id="flood")
        runtime.enqueue_many("t", [{"who": "late"}] * 3, queue="q", tenant_id="late")
        # One running per tenant: each claim of 4 takes one job of each.
        assert runtime.worker("q", prefetch=4).drain() == 33
        assert ran[:6] == ["flood", "late"] * 3
        runtime.enqueue("t", {"who": "next"}, queue="q", tenant_id="late")
    finally:
        runtime.close()
    shown = status(tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "limits of queue q (fair shares)" in shown.stdout


def test_the_cli_exits_2_on_a_bad_limit_naming_the_key(
    tmp_path: Path, status: Callable[[Path], Ran]
) -> None:
    (tmp_path / "conveyor.toml").write_text(
        f'url = "sqlite:///{tmp_path / "jobs.db"}"\n'
        "[limits.payments]\nfair = true\n[[limits.payments.caps]]\nmax_running = 0\n"
    )
    result = status(tmp_path)
    assert result.returncode == 2, result.stderr
    [line] = result.stderr.strip().splitlines()
    assert "limits.payments.caps[0].max_running" in line


# ---- the worker ------------------------------------------------------------------------


def test_a_worker_of_a_fair_queue_runs_a_late_small_tenant_between_the_flood() -> None:
    ran: list[str] = []
    runtime = build(
        {"provider": "memory", "workers": {"queues": ["q"]}, "limits": {"q": {"fair": True}}},
        handlers={"t": lambda args: ran.append(args["who"])},
    )
    runtime.enqueue_many("t", [{"who": "flood"}] * 30, queue="q", tenant_id="flood")
    runtime.enqueue_many("t", [{"who": "late"}] * 3, queue="q", tenant_id="late")
    assert runtime.worker("q", prefetch=4).drain() == 33
    assert ran[:6] == ["flood", "late"] * 3


def test_build_takes_limits_in_python_over_the_config() -> None:
    limits = QueueLimits(max_running=1)
    runtime = build({"provider": "memory"}, limits={"q": limits})
    assert runtime.limits == {"q": limits}
    assert runtime.worker("q").limits == limits


def test_build_reads_a_plain_table_of_limits_as_the_config_file_s() -> None:
    # A dict was taken as it came, then every worker round of the queue failed with
    # AttributeError and its jobs never ran.
    runtime = build(
        {"provider": "memory"}, handlers={"x": lambda a: a}, limits={"q": {"max_running": 1}}
    )
    assert runtime.limits == {"q": QueueLimits(max_running=1)}
    job = runtime.enqueue("x", {}, queue="q")
    assert runtime.worker("q").drain() == 1
    assert runtime.get(job.id).state.value == "completed"


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        ({"q": {"max_running": 0}}, "limits.q.max_running: must be >= 1, got 0"),
        ({"q": 5}, "limits.q: must be a table"),
        ({"": QueueLimits(max_running=1)}, "limits.\"\": must not be empty"),
        (["q"], "limits: must be a table of queue = limits, got list"),
    ],
)
def test_build_refuses_bad_limits_naming_the_key(limits: Any, message: str) -> None:
    with pytest.raises(ValidationError) as bad:
        build({"provider": "memory"}, limits=limits)
    assert str(bad.value).startswith(message)


def test_a_rate_limited_worker_sleeps_until_the_next_token_without_spinning() -> None:
    clock = ManualClock(T0)
    ran: list[int] = []
    runtime = build(
        # No pruner: an idle worker also wakes for its next batch (at random in the
        # first interval), which would end this wait before the token.
        {"provider": "memory", "workers": {"queues": ["q"]}, "retention": {"prune_interval_ms": 0}},
        handlers={"t": lambda args: ran.append(1)},
        clock=clock,
        limits={"q": QueueLimits(rates=(Rate(1, 10.0),))},
    )
    runtime.enqueue_many("t", [{}] * 3, queue="q")
    worker = runtime.worker("q", clock_check=False, poll_interval_ms=60_000)
    assert worker.run_once() == 1
    assert worker.run_once() == 0
    # Held back by the rate alone: it may sleep exactly until the next token.
    assert worker._idle_timeout_s() == pytest.approx(10.0)
    calls = []
    original = runtime.queue.dequeue_limited
    runtime.queue.dequeue_limited = lambda *a: calls.append(1) or original(*a)  # type: ignore[method-assign]
    thread = threading.Thread(target=worker.run)
    thread.start()
    time.sleep(0.3)
    worker.stop()
    thread.join(5)
    assert len(calls) <= 2, "a throttled worker must sleep, not poll"
    clock.advance(seconds=10)
    assert worker.run_once() == 1


def test_a_worker_held_back_by_a_cap_sleeps_its_poll_interval_instead_of_waiting_for_work() -> None:
    runtime = build(
        {"provider": "memory", "workers": {"queues": ["q"]}},
        handlers={"t": lambda args: None},
        limits={"q": QueueLimits(max_running=1)},
    )
    runtime.enqueue_many("t", [{}] * 2, queue="q")
    holder = runtime.queue.dequeue_limited("q", runtime.clock.now(), 1, runtime.limits["q"])
    assert len(holder.claims) == 1  # another worker holds the only slot
    worker = runtime.worker("q", poll_interval_ms=200)
    calls: list[int] = []
    original = runtime.queue.dequeue_limited
    runtime.queue.dequeue_limited = lambda *a: calls.append(1) or original(*a)  # type: ignore[method-assign]
    thread = threading.Thread(target=worker.run)
    thread.start()
    time.sleep(0.5)
    worker.stop()
    thread.join(5)
    # A ready job stays ready: waiting for work would return at once and spin.
    assert 1 <= len(calls) <= 4


# ---- the SQL migration -------------------------------------------------------------------

OLD_QUEUE_TABLE = """CREATE TABLE conveyor_job_queue (
    id VARCHAR(36) PRIMARY KEY, queue VARCHAR(128) NOT NULL, status VARCHAR(16) NOT NULL,
    priority SMALLINT NOT NULL, seq BIGINT, run_at BIGINT NOT NULL, locked_by VARCHAR(64),
    locked_at BIGINT, tenant_id VARCHAR(128), payload TEXT NOT NULL)"""


@pytest.fixture(params=["sqlite", "postgresql"])
def old_database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database whose queue table has the columns of the version before limits, with
    two ready rows: one of a tenant, and one whose payload is not a job."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'old.db'}"
    else:
        url = fresh_database(prefix="conveyor_limits")
    engine = sa.create_engine(url)
    tenant = make_job("charge", queue="q", tenant_id="acme")
    with engine.begin() as conn:
        conn.exec_driver_sql(OLD_QUEUE_TABLE)
        for row_id, payload, who in (
            (str(tenant.id), encode(tenant), "acme"),
            ("00000000-0000-4000-8000-00000000000b", "not json", None),
        ):
            conn.execute(
                sa.text(
                    "INSERT INTO conveyor_job_queue (id, queue, status, priority, seq, run_at,"
                    " tenant_id, payload) VALUES (:id, 'q', 'ready', 2, 1, 0, :who, :payload)"
                ),
                {"id": row_id, "who": who, "payload": payload},
            )
    engine.dispose()
    yield url
    if request.param == "postgresql":
        drop_database(url)


def test_migrate_adds_the_limit_columns_to_an_older_table_and_fills_them_in(
    old_database: str,
) -> None:
    engine = make_engine(old_database)
    assert migrate(engine)
    assert schema_problem(engine) is None
    t = SCHEMA.job_queue
    with engine.connect() as conn:
        rows = conn.execute(sa.select(t.c.payload, t.c.job_type, t.c.partition_key)).all()
    assert sorted((r.job_type, r.partition_key) for r in rows) == [("", ""), ("charge", "acme")]
    got = SqlJobQueue(engine).dequeue_limited("q", T0, 5, QueueLimits(fair=True))
    assert len(got.claims) == 2
    engine.dispose()


def test_placements_write_the_job_type_and_partition_columns(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'jobs.db'}")
    migrate(engine)
    queue = SqlJobQueue(engine)
    queue.enqueue(make_job("mail", partition="p1", tenant_id="acme"))
    queue.enqueue_many([make_job("mail", tenant_id="acme"), make_job("mail")])
    t = SCHEMA.job_queue
    with engine.connect() as conn:
        found = conn.execute(sa.select(t.c.job_type, t.c.partition_key)).all()
    assert sorted(tuple(r) for r in found) == [("mail", ""), ("mail", "acme"), ("mail", "p1")]
    engine.dispose()


def test_the_printed_upgrade_sql_adds_the_columns_on_postgresql() -> None:
    text = ddl_text("postgresql", if_not_exists=True)
    assert "ADD COLUMN IF NOT EXISTS partition_key" in text
    assert text.index("ADD COLUMN IF NOT EXISTS partition_key") < text.index(
        "CREATE INDEX IF NOT EXISTS conveyor_job_queue_partition"
    )


def test_limit_state_lives_in_its_own_table() -> None:
    assert [c.name for c in SCHEMA.limit_state.columns] == [
        "queue",
        "kind",
        "key",
        "value",
        "at_us",
    ]
    assert attrs.has(type(SCHEMA))


def test_a_limited_claim_on_sqlite_reads_ready_rows_through_the_partition_index(
    tmp_path: Path,
) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'jobs.db'}")
    migrate(engine)
    queue = SqlJobQueue(engine)
    for tenant in ("a", "b", "c"):
        queue.enqueue_many([make_job(queue="q", tenant_id=tenant) for _ in range(50)])
    seen: list[tuple[str, Any]] = []

    def record(conn: Any, cursor: Any, statement: str, params: Any, *rest: Any) -> None:
        seen.append((statement, params))

    sa.event.listen(engine, "before_cursor_execute", record)
    queue.dequeue_limited("q", T0, 5, QueueLimits(fair=True))
    sa.event.remove(engine, "before_cursor_execute", record)
    # The reads of ready rows: index searches on the partition index, never a scan.
    reads = [(s, p) for s, p in seen if "'ready'" in s]
    assert reads
    with engine.connect() as conn:
        for statement, params in reads:
            plan = conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, params).all()
            probes = [str(row[-1]) for row in plan if "conveyor_job_queue" in str(row[-1])]
            assert probes
            for probe in probes:
                assert probe.startswith("SEARCH"), probe
                assert "conveyor_job_queue_partition" in probe, probe
    engine.dispose()
