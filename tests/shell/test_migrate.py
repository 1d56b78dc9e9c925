"""Schema changes happen on purpose: `conveyor migrate` runs the DDL, and nothing else does.

Every other process reads the schema mark once; on a missing or foreign schema it says
in one line what to run. On PostgreSQL this lets an application role with DML rights
only enqueue, work and report. Real SQLite files and a real PostgreSQL server.
"""

from __future__ import annotations

import re
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from conveyor.core import ValidationError
from conveyor.shell import cli
from conveyor.shell.adapters.sql import make_engine
from conveyor.shell.adapters.sql.ddl import ddl_text, schema_version
from conveyor.shell.adapters.sql.migration import schema_problem
from conveyor.shell.adapters.sql.schema import SCHEMA
from conveyor.shell.config import load_config
from conveyor.shell.migrate import SchemaNotCurrent, migrate, migration_sql
from conveyor.shell.runtime import build
from conveyor.testing.postgres_server import drop_database, fresh_database

DDL = re.compile(r"^\s*(CREATE|DROP|ALTER|COMMENT|PRAGMA user_version\s*=)", re.I)
TABLES = (
    SCHEMA.job_queue.name,
    SCHEMA.job_store.name,
    SCHEMA.workers.name,
    SCHEMA.cancel_requests.name,
)
SEQUENCES = (SCHEMA.job_seq.name, SCHEMA.store_seq.name)


# --- fixtures ------------------------------------------------------------------------------


@pytest.fixture
def pg_url() -> Iterator[str]:
    """An empty PostgreSQL database, owned by the superuser (who may migrate)."""
    url = fresh_database(prefix="conveyor_migrate")
    yield url
    drop_database(url)


@pytest.fixture
def app_url(pg_url: str) -> Iterator[str]:
    """The same database, as a role that may log in and nothing else yet: no CREATE
    anywhere. `grant_dml` gives it read/write rights on Conveyor's tables."""
    role = f"conveyor_app_{uuid.uuid4().hex[:8]}"
    owner = sa.create_engine(pg_url, isolation_level="AUTOCOMMIT")
    with owner.connect() as conn:
        conn.exec_driver_sql(f"CREATE ROLE {role} LOGIN")
        conn.exec_driver_sql("REVOKE CREATE ON SCHEMA public FROM PUBLIC")
    owner.dispose()
    yield sa.make_url(pg_url).set(username=role).render_as_string(hide_password=False)
    drop_database(pg_url)  # with the rights granted in it
    server = sa.make_url(pg_url).set(database="postgres")
    admin = sa.create_engine(server, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f"DROP ROLE IF EXISTS {role}")
    admin.dispose()


def grant_dml(owner_url: str, app_url: str) -> None:
    role = sa.make_url(app_url).username
    engine = sa.create_engine(owner_url)
    with engine.begin() as conn:
        conn.exec_driver_sql(
            f"GRANT SELECT, INSERT, UPDATE, DELETE ON {', '.join(TABLES)} TO {role}"
        )
        conn.exec_driver_sql(f"GRANT USAGE ON SEQUENCE {', '.join(SEQUENCES)} TO {role}")
    engine.dispose()


def config(url: str, **extra: Any) -> dict[str, Any]:
    return {
        "provider": "db",
        "url": url,
        "entry_points": False,
        "workers": {"count": 1, "queues": ["default"], "poll_interval_ms": 20},
        **extra,
    }


def write_config(folder: Path, url: str, **extra: Any) -> Path:
    lines = [f'url = "{url}"', "entry_points = false"]
    lines += [f"{key} = {str(value).lower()}" for key, value in extra.items()]
    path = folder / "conveyor.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


class Statements:
    """Every SQL statement any engine in this process sends while it is open."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def _on(self, conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
        self.seen.append(statement)

    def __enter__(self) -> Statements:
        sa.event.listen(sa.Engine, "before_cursor_execute", self._on)
        return self

    def __exit__(self, *exc: object) -> None:
        sa.event.remove(sa.Engine, "before_cursor_execute", self._on)

    @property
    def ddl(self) -> list[str]:
        return [s for s in self.seen if DDL.match(s)]


def one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def tables_in(url: str) -> set[str]:
    engine = make_engine(url)
    try:
        return set(sa.inspect(engine).get_table_names())
    finally:
        engine.dispose()


# --- PostgreSQL: no DDL at start ------------------------------------------------------------


def test_build_on_postgresql_without_a_schema_says_to_migrate_and_creates_nothing(
    pg_url: str,
) -> None:
    with pytest.raises(SchemaNotCurrent, match=r'schema is missing: run "conveyor migrate"'):
        build(config(pg_url))
    assert tables_in(pg_url) == set()


def test_migrate_creates_the_postgresql_schema_and_then_build_works(pg_url: str) -> None:
    assert migrate(config(pg_url)).startswith("migrated ")
    assert set(TABLES) <= tables_in(pg_url)
    runtime = build(config(pg_url), handlers={"noop": lambda args: None})
    try:
        runtime.enqueue("noop", {})
        assert runtime.drain().completed == 1
    finally:
        runtime.close()


def test_migrate_tunes_autovacuum_so_churned_tables_stay_flat_on_postgresql(
    pg_url: str,
) -> None:
    migrate(config(pg_url))
    engine = make_engine(pg_url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                sa.text(
                    "SELECT relname, reloptions FROM pg_class WHERE relname IN :names"
                ).bindparams(sa.bindparam("names", expanding=True)),
                {"names": (SCHEMA.job_queue.name, SCHEMA.job_store.name)},
            ).all()
    finally:
        engine.dispose()
    options = {name: set(opts or ()) for name, opts in rows}
    assert set(options) == {SCHEMA.job_queue.name, SCHEMA.job_store.name}
    for table, opts in options.items():
        assert "autovacuum_vacuum_scale_factor=0" in opts, (table, opts)
        assert "autovacuum_vacuum_threshold=2000" in opts, (table, opts)


def test_migrate_twice_says_there_is_nothing_to_do(pg_url: str) -> None:
    migrate(config(pg_url))
    assert "nothing to do" in migrate(config(pg_url))


def test_the_mark_of_another_version_is_refused_in_one_line_naming_both_versions(
    pg_url: str,
) -> None:
    migrate(config(pg_url))
    engine = make_engine(pg_url)
    with engine.begin() as conn:
        conn.exec_driver_sql(f"COMMENT ON TABLE {SCHEMA.job_queue.name} IS 'conveyor schema 0ld'")
    engine.dispose()
    with pytest.raises(SchemaNotCurrent) as error:
        build(config(pg_url))
    message = str(error.value)
    assert "at version 0ld" in message and schema_version("postgresql") in message
    assert "\n" not in message


def test_status_on_a_foreign_schema_beside_a_long_transaction_answers_at_once(
    pg_url: str,
) -> None:
    """A transaction holding a queue row used to hold up the DDL of every starting
    process, and every reader queued behind that DDL."""
    migrate(config(pg_url))
    engine = make_engine(pg_url)
    with engine.begin() as conn:
        conn.exec_driver_sql(f"COMMENT ON TABLE {SCHEMA.job_queue.name} IS 'conveyor schema 0ld'")
    with engine.connect() as busy:
        busy.begin()
        busy.exec_driver_sql(f"LOCK TABLE {SCHEMA.job_queue.name} IN ROW EXCLUSIVE MODE")
        outcome: list[BaseException | None] = []

        def start() -> None:
            try:
                build(config(pg_url)).close()
                outcome.append(None)
            except BaseException as exc:
                outcome.append(exc)

        began = time.monotonic()
        thread = threading.Thread(target=start)
        thread.start()
        thread.join(5)
        waited = time.monotonic() - began
        busy.rollback()
    thread.join(10)
    engine.dispose()
    assert waited < 2, f"starting waited {waited:.1f}s on a running transaction"
    assert isinstance(outcome[0], SchemaNotCurrent)


def test_auto_migrate_true_lets_a_postgresql_process_migrate_at_start(pg_url: str) -> None:
    build(config(pg_url, auto_migrate=True)).close()
    assert schema_problem(make_engine(pg_url)) is None


# --- PostgreSQL: a role with DML rights only -------------------------------------------------


def test_a_dml_only_role_before_migrate_gets_one_line_naming_the_command(
    app_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_config(tmp_path, app_url)
    assert cli.main(["-c", str(path), "status"]) == 1
    line = one_error_line(capsys)
    assert line.startswith('conveyor: the database schema is missing: run "conveyor migrate"')


def test_a_dml_only_role_enqueues_works_and_reports_after_the_owner_migrates(
    pg_url: str, app_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    migrate(config(pg_url))
    grant_dml(pg_url, app_url)
    done = threading.Event()
    runtime = build(config(app_url), handlers={"noop": lambda args: done.set()})
    runtime.start()
    try:
        runtime.enqueue("noop", {})
        assert done.wait(10), "the worker never ran the job"
        status = runtime.status()
        assert [w.worker_id for w in status.workers] == [runtime.worker_id]
    finally:
        runtime.stop()
        runtime.close()
    path = write_config(tmp_path, app_url)
    assert cli.main(["-c", str(path), "enqueue", "noop"]) == 0
    assert cli.main(["-c", str(path), "status"]) == 0
    assert "default" in capsys.readouterr().out


def test_a_dml_only_role_works_on_a_schema_applied_from_the_printed_sql(
    pg_url: str, app_url: str
) -> None:
    engine = make_engine(pg_url)
    with engine.begin() as conn:
        for statement in migration_sql(config(pg_url)).split(";\n\n"):
            if statement.strip():
                conn.exec_driver_sql(statement)
    engine.dispose()
    grant_dml(pg_url, app_url)
    runtime = build(config(app_url), handlers={"noop": lambda args: None})
    try:
        runtime.enqueue("noop", {})
        assert runtime.drain().completed == 1
    finally:
        runtime.close()


def test_the_printed_sql_upgrades_an_existing_schema_when_applied_again(pg_url: str) -> None:
    migrate(config(pg_url))
    engine = make_engine(pg_url)
    with engine.begin() as conn:
        for statement in migration_sql(config(pg_url)).split(";\n\n"):
            if statement.strip():
                conn.exec_driver_sql(statement)
    assert schema_problem(engine) is None
    engine.dispose()


@pytest.mark.parametrize("command", [["status"], ["enqueue", "noop"]])
def test_status_and_enqueue_run_no_ddl_on_postgresql(
    pg_url: str, tmp_path: Path, command: list[str]
) -> None:
    migrate(config(pg_url))
    path = write_config(tmp_path, pg_url)
    with Statements() as statements:
        assert cli.main(["-c", str(path), *command]) == 0
    assert statements.seen, "the listener saw nothing"
    assert statements.ddl == []


# --- SQLite ---------------------------------------------------------------------------------


def test_a_brand_new_sqlite_file_is_migrated_at_start_by_default(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    build(config(url)).close()
    assert schema_problem(make_engine(url)) is None


def test_sqlite_with_auto_migrate_false_says_to_migrate_and_creates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    path = write_config(tmp_path, url, auto_migrate=False)
    assert cli.main(["-c", str(path), "enqueue", "noop"]) == 1
    assert 'run "conveyor migrate"' in one_error_line(capsys)
    assert tables_in(url) == set()


def test_conveyor_migrate_on_sqlite_lets_processes_start_without_ddl(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'data' / 'jobs.db'}"
    path = write_config(tmp_path, url, auto_migrate=False)
    assert cli.main(["-c", str(path), "migrate"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("conveyor: migrated ") and len(out.strip().splitlines()) == 1
    with Statements() as statements:
        assert cli.main(["-c", str(path), "enqueue", "noop"]) == 0
        assert cli.main(["-c", str(path), "status"]) == 0
    assert statements.ddl == []


@pytest.mark.parametrize("command", [["status"], ["enqueue", "noop"]])
def test_status_and_enqueue_run_no_ddl_on_a_current_sqlite_file(
    tmp_path: Path, command: list[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    path = write_config(tmp_path, url)
    assert cli.main(["-c", str(path), "migrate"]) == 0
    with Statements() as statements:
        assert cli.main(["-c", str(path), *command]) == 0
    assert statements.ddl == []


def test_migrate_sql_prints_the_schema_with_its_mark_and_runs_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    path = write_config(tmp_path, url)
    assert cli.main(["-c", str(path), "migrate", "--sql"]) == 0
    out = capsys.readouterr().out
    assert "CREATE TABLE IF NOT EXISTS conveyor_job_queue (" in out
    assert re.search(r"PRAGMA user_version = \d+;\s*$", out)
    assert not (tmp_path / "jobs.db").exists()


def test_the_ddl_text_ends_by_recording_the_schema_mark() -> None:
    assert (
        ddl_text("postgresql")
        .rstrip()
        .endswith(
            f"COMMENT ON TABLE conveyor_job_queue IS 'conveyor schema "
            f"{schema_version('postgresql')}';"
        )
    )


# --- Redis and memory -----------------------------------------------------------------------


@pytest.mark.parametrize("sql", [False, True])
def test_migrate_on_redis_says_in_one_line_that_redis_needs_none(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], sql: bool
) -> None:
    path = tmp_path / "conveyor.toml"
    path.write_text('provider = "redis"\nentry_points = false\n')
    assert cli.main(["-c", str(path), "migrate", *(["--sql"] if sql else [])]) == 0
    out = capsys.readouterr().out
    assert out.splitlines() == [
        "conveyor: Redis needs no migration: its keys are made as jobs arrive"
    ]


def test_auto_migrate_must_be_true_or_false() -> None:
    with pytest.raises(ValidationError) as error:
        load_config({"auto_migrate": "yes"}, env={})
    assert error.value.fields == ("auto_migrate",)


def test_the_printed_upgrade_sql_fills_the_limit_columns_as_migrate_does(pg_url: str) -> None:
    """`conveyor migrate --sql` on a table of the version before limits: rows queued
    then get the job type and partition `conveyor migrate` would give them."""
    from conveyor.shell.codec import encode
    from helpers import make_job
    from test_queue_limits import OLD_QUEUE_TABLE

    rows = {
        "tenant": make_job("charge", queue="q", tenant_id="acme"),
        "keyed": make_job("mail", queue="q", tenant_id="acme", partition="p1"),
        "plain": make_job("mail", queue="q"),
        "nul": make_job("charge", queue="q", partition="p2", args={"note": "a\x00b"}),
    }
    engine = make_engine(pg_url)
    with engine.begin() as conn:
        conn.exec_driver_sql(OLD_QUEUE_TABLE)
        inserts = [(str(j.id), encode(j), j.tenant_id) for j in rows.values()]
        inserts.append(("00000000-0000-4000-8000-00000000000b", "not json", "acme"))
        inserts.append(("00000000-0000-4000-8000-00000000000c", "[1, 2]", None))
        for row_id, payload, who in inserts:
            conn.execute(
                sa.text(
                    "INSERT INTO conveyor_job_queue (id, queue, status, priority, seq, run_at,"
                    " tenant_id, payload) VALUES (:id, 'q', 'ready', 2, 1, 0, :who, :payload)"
                ),
                {"id": row_id, "who": who, "payload": payload},
            )
    with engine.begin() as conn:
        for statement in migration_sql(config(pg_url)).split(";\n\n"):
            if statement.strip():
                conn.exec_driver_sql(statement)
    assert schema_problem(engine) is None
    t = SCHEMA.job_queue
    with engine.connect() as conn:
        filled = {
            r.id: (r.job_type, r.partition_key)
            for r in conn.execute(sa.select(t.c.id, t.c.job_type, t.c.partition_key))
        }
    engine.dispose()
    assert filled == {
        str(rows["tenant"].id): ("charge", "acme"),
        str(rows["keyed"].id): ("mail", "p1"),
        str(rows["plain"].id): ("mail", ""),
        str(rows["nul"].id): ("charge", "p2"),
        "00000000-0000-4000-8000-00000000000b": ("", "acme"),
        "00000000-0000-4000-8000-00000000000c": ("", ""),
    }
