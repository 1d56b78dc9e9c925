"""The GRANT list docs/sql.md gives an application role on PostgreSQL is the one the
schema gives (`sql.grants.grant_sql`), it names every table and sequence that
`migrate` creates, and a role holding exactly those rights (and no CREATE right
anywhere) runs every feature: enqueue, unique keys, a worker on a plain and on a
limited queue, cancel (queued and running), dead letters, cron, status, limit
reports, prune, and the operator commands. Real PostgreSQL."""

from __future__ import annotations

import re
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import conveyor
import pytest
import sqlalchemy as sa
from conveyor.shell import cli
from conveyor.shell.adapters.sql.grants import grant_sequences, grant_sql, grant_tables
from conveyor.shell.migrate import migrate
from conveyor.testing.postgres_server import drop_database, fresh_database

pytestmark = pytest.mark.timeout(180)

DOCS = Path(__file__).resolve().parents[2] / "docs" / "sql.md"


def documented_grants() -> str:
    """The GRANT block docs/sql.md gives the role `app`."""
    text = DOCS.read_text()
    section = text.split("**A role with DML rights only.**", 1)[1]
    return section.split("```text\n", 1)[1].split("```", 1)[0]


def words(sql: str) -> list[str]:
    return sql.split()


def test_the_documented_grants_are_the_ones_the_schema_gives() -> None:
    assert words(documented_grants()) == words(grant_sql("app"))


def test_a_role_name_that_is_not_a_plain_name_is_refused() -> None:
    with pytest.raises(conveyor.ValidationError, match="role"):
        grant_sql("app; DROP TABLE conveyor_job_queue")


@pytest.fixture
def owner_url() -> Iterator[str]:
    url = fresh_database(prefix="conveyor_grants")
    yield url
    drop_database(url)


@pytest.fixture
def role_url(owner_url: str) -> Iterator[str]:
    """The same database as a login role with no rights at all yet (and no CREATE
    right on the public schema)."""
    role = f"conveyor_app_{uuid.uuid4().hex[:8]}"
    owner = sa.create_engine(owner_url, isolation_level="AUTOCOMMIT")
    with owner.connect() as conn:
        conn.exec_driver_sql(f"CREATE ROLE {role} LOGIN")
        conn.exec_driver_sql("REVOKE CREATE ON SCHEMA public FROM PUBLIC")
    owner.dispose()
    yield sa.make_url(owner_url).set(username=role).render_as_string(hide_password=False)
    drop_database(owner_url)
    admin = sa.create_engine(sa.make_url(owner_url).set(database="postgres"))
    with admin.connect() as conn:
        conn.exec_driver_sql(f"DROP ROLE IF EXISTS {role}")
        conn.commit()
    admin.dispose()


def config_text(url: str) -> str:
    return (
        f'provider = "db"\nurl = "{url}"\nentry_points = false\n'
        'workers = { queues = ["default", "payments"], count = 2, poll_interval_ms = 20 }\n\n'
        '[[cron]]\nname = "nightly"\nschedule = "30 2 * * *"\njob_type = "ok"\n\n'
        "[limits.payments]\nfair = true\nweights = { acme = 2 }\n"
        '[[limits.payments.caps]]\njob_type = "ok"\nper_partition = true\nmax_running = 1\n'
        "[[limits.payments.rates]]\nstarts = 100\nper_seconds = 1\n"
    )


def test_the_grants_name_every_table_and_sequence_migrate_creates(owner_url: str) -> None:
    migrate({"provider": "db", "url": owner_url, "entry_points": False})
    engine = sa.create_engine(owner_url)
    with engine.connect() as conn:
        tables = conn.exec_driver_sql(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
        ).scalars()
        sequences = conn.exec_driver_sql(
            "SELECT sequencename FROM pg_sequences WHERE schemaname = 'public'"
        ).scalars()
        assert set(tables) == set(grant_tables())
        assert set(sequences) == set(grant_sequences())
    engine.dispose()


def wait_for(check: Any, what: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_a_role_with_exactly_the_documented_grants_runs_every_feature(
    owner_url: str, role_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    migrate({"provider": "db", "url": owner_url, "entry_points": False})
    role = sa.make_url(role_url).username
    assert role is not None
    owner = sa.create_engine(owner_url)
    with owner.begin() as conn:
        for statement in documented_grants().replace(" TO app;", f" TO {role};").split(";"):
            if statement.strip():
                conn.exec_driver_sql(statement)
    owner.dispose()
    path = tmp_path / "conveyor.toml"
    path.write_text(config_text(role_url))

    started = threading.Event()

    def wait_for_cancel(args: dict[str, Any], ctx: conveyor.JobContext) -> str:
        started.set()
        deadline = time.monotonic() + 20
        while not ctx.cancel_requested() and time.monotonic() < deadline:
            time.sleep(0.02)
        return "stopped"

    def boom(args: dict[str, Any]) -> None:
        raise conveyor.Permanent("no")

    handlers = {"ok": lambda args: args, "boom": boom, "slow": wait_for_cancel}
    runtime = conveyor.build(str(path), handlers=handlers)
    try:
        first = runtime.enqueue("ok", {"n": 1}, unique_key="once")
        assert runtime.enqueue("ok", {"n": 2}, unique_key="once").id == first.id
        limited = [
            runtime.enqueue("ok", {"n": n}, queue="payments", partition=p)
            for n, p in enumerate(["acme", "acme", "globex", "initech"])
        ]
        runtime.enqueue_many("ok", [{"n": n} for n in range(5)])
        dead = runtime.enqueue("boom", {}, max_retries=0)
        later = runtime.enqueue("ok", {}, delay=3600)
        assert runtime.cancel(later.id) is conveyor.CancelResult.CANCELLED
        running = runtime.enqueue("slow", {})
        runtime.start()
        assert started.wait(20), "the worker never ran the slow job"
        assert runtime.cancel(running.id) is conveyor.CancelResult.REQUESTED

        def state(job: conveyor.Job) -> conveyor.JobStatus | None:
            view = runtime.get(job.id)
            return None if view is None else view.state

        wait_for(lambda: state(running) is conveyor.JobStatus.CANCELLED, "the cancel")
        wait_for(
            lambda: all(state(j) is conveyor.JobStatus.COMPLETED for j in [first, *limited]),
            "the plain and the limited queue's jobs",
        )
        wait_for(lambda: state(dead) is conveyor.JobStatus.FAILED, "the dead letter")
        assert [job.id for job in runtime.list_dead()] == [dead.id]
        assert {row.queue for row in runtime.status().queues} >= {"default", "payments"}
        (report,) = runtime.limit_reports(runtime.clock.now())
        assert report.queue == "payments"
        ran = runtime.cron.run("nightly")
        assert [row.name for row in runtime.cron.list()] == ["nightly"]
        wait_for(lambda: state(ran) is conveyor.JobStatus.COMPLETED, "the cron job")
        assert runtime.retry_dead(dead.id).id == dead.id
        wait_for(lambda: state(dead) is conveyor.JobStatus.FAILED, "the retried dead letter")
        assert runtime.purge_dead(dead.id) == 1
        assert runtime.prune(older_than_ms=0) > 0
    finally:
        runtime.stop()
        runtime.close()
    capsys.readouterr()
    for command in (["status"], ["dead", "list"], ["cron", "list"], ["jobs", "list"]):
        assert cli.main(["-c", str(path), *command]) == 0, capsys.readouterr().err
    assert re.search(r"payments", capsys.readouterr().out)
