"""Bulk enqueue on the SQL backend: by COPY on PostgreSQL, one statement on SQLite.

Whatever the path, `enqueue_many` keeps the meaning of `enqueue` for each job of the
list: an upsert by id, ready jobs FIFO by list order within a priority, parked jobs
in list order among those due at the same instant, every byte of the args kept.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import attrs
import pytest
import sqlalchemy as sa
from backends import Backend, make_backend
from conveyor.core import Priority
from conveyor.shell.ports import Claim
from helpers import T0, make_job


@pytest.fixture(params=["sqlite", "postgresql"])
def sql(request: pytest.FixtureRequest) -> Iterator[Backend]:
    made = make_backend(request.param)
    yield made
    made.cleanup()


@pytest.fixture
def pg() -> Iterator[Backend]:
    made = make_backend("postgresql")
    yield made
    made.cleanup()


def _claim_all(b: Backend, queue: str = "default", batch: int = 1000) -> list[Claim]:
    claims: list[Claim] = []
    while taken := b.queue.dequeue_many(queue, T0, batch):
        assert all(isinstance(c, Claim) for c in taken)
        claims += taken
    return claims


def _engine(b: Backend) -> sa.Engine:
    engine: sa.Engine = b.queue.engine
    return engine


def test_a_bulk_enqueue_on_postgresql_streams_its_rows_by_copy(pg: Backend) -> None:
    pg.queue.enqueue_many([make_job(args={"i": i}) for i in range(3)])
    with _engine(pg).connect() as conn:
        staged = conn.execute(
            sa.text(
                "SELECT count(*) FROM pg_class WHERE relpersistence = 't'"
                " AND relname LIKE 'conveyor_job_queue_staging_%'"
            )
        ).scalar_one()
    assert staged >= 1, "the rows went through a temporary staging table filled by COPY"
    assert pg.queue.counts(T0)["default"].ready == 3


def test_ten_thousand_jobs_in_one_call_are_claimed_once_each_priority_then_list_order(
    sql: Backend,
) -> None:
    ranks = (Priority.LOW, Priority.NORMAL, Priority.HIGH)
    jobs = [make_job(args={"i": i}, priority=ranks[i % 3]) for i in range(10_000)]
    sql.queue.enqueue_many(jobs)
    claimed = [c.job.id for c in _claim_all(sql)]
    expected = [j.id for j in sorted(jobs, key=lambda j: j.priority.rank)]  # a stable sort
    assert claimed == expected


def test_a_bulk_enqueue_replaces_a_queued_job_and_takes_a_claimed_one_from_its_holder(
    sql: Backend,
) -> None:
    queued, held, fresh = make_job(args={"v": 1}), make_job(args={"v": 1}), make_job()
    sql.queue.enqueue(held)
    claim = sql.queue.dequeue("default", T0)
    assert isinstance(claim, Claim) and claim.job.id == held.id
    sql.queue.enqueue(queued)
    new_held, new_queued = (attrs.evolve(j, args={"v": 2}) for j in (held, queued))
    sql.queue.enqueue_many([new_held, fresh, new_queued])
    counts = sql.queue.counts(T0)["default"]
    assert (counts.ready, counts.in_flight) == (3, 0), "one row per id, none held"
    assert sql.queue.ack(claim) is False, "the old holder lost its claim"
    claimed = _claim_all(sql)
    assert [c.job.id for c in claimed] == [held.id, fresh.id, queued.id]
    assert [c.job.args for c in claimed] == [{"v": 2}, {}, {"v": 2}]


def test_the_last_of_several_versions_of_one_id_in_a_list_wins(sql: Backend) -> None:
    first = make_job(args={"v": 1})
    other = make_job()
    sql.queue.enqueue_many([first, other, attrs.evolve(first, args={"v": 2})])
    claimed = _claim_all(sql)
    assert [(c.job.id, c.job.args) for c in claimed] == [(first.id, {"v": 2}), (other.id, {})]


AWKWARD: dict[str, Any] = {
    "quotes": 'it\'s "quoted"',
    "lines": "one\ntwo\r\nthree\rfour",
    "tabs": "a\tb\t\tc",
    "backslashes": "C:\\path\\N \\. \\\\ end\\",
    "copy markers": "\\N",
    "end of data": "\n\\.\n",
    "unicode": "ünïcödé 日本語 \U0001f600",
    "json escapes": "\\u0000 \\n \\t",
    "nul": "before\x00after",
    "nested": {"list": ["\t", "\n", "\\", None, 1.5, True]},
}


def test_args_with_quotes_newlines_tabs_backslashes_and_unicode_survive_a_bulk_enqueue(
    sql: Backend,
) -> None:
    jobs = [make_job(args={**AWKWARD, "i": i, AWKWARD["lines"]: AWKWARD["tabs"]}) for i in range(5)]
    sql.queue.enqueue_many(jobs)
    claimed = _claim_all(sql)
    assert [c.job for c in claimed] == jobs


def test_parked_jobs_of_a_bulk_enqueue_come_due_in_list_order(sql: Backend) -> None:
    later = timedelta(seconds=30)
    parked = [make_job(args={"i": i}, delay=later) for i in range(5)]
    sql.queue.enqueue_many([parked[3], parked[0], parked[4], parked[1], parked[2]])
    assert sql.queue.counts(T0)["default"].scheduled == 5
    due = T0 + later
    claimed = []
    while taken := sql.queue.dequeue_many("default", due, 2):
        claimed += taken
    assert [c.job.args["i"] for c in claimed] == [3, 0, 4, 1, 2]


def test_a_failed_bulk_enqueue_on_postgresql_writes_nothing_and_the_next_one_works(
    pg: Backend,
) -> None:
    good = [make_job(args={"i": i}) for i in range(3)]
    too_long = attrs.evolve(make_job(), queue="q" * 300)  # wider than the queue column
    with pytest.raises(sa.exc.DBAPIError):
        pg.queue.enqueue_many([*good, too_long])
    assert pg.queue.counts(T0) == {}
    for _ in range(3):  # again on the same pooled connections, staging table and all
        pg.queue.enqueue_many(good)
    assert [c.job.id for c in _claim_all(pg)] == [j.id for j in good]


def test_a_connection_lost_during_the_copy_is_retried_and_writes_each_job_once(
    pg: Backend,
) -> None:
    engine = _engine(pg)
    killed: list[int] = []

    def kill_own_backend_after_staging(conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
        if not killed and statement.startswith("CREATE TEMPORARY TABLE"):
            pid = cursor.connection.info.backend_pid
            with engine.connect() as other:
                other.execute(sa.text("SELECT pg_terminate_backend(:pid, 10000)"), {"pid": pid})
            killed.append(pid)

    sa.event.listen(engine, "after_cursor_execute", kill_own_backend_after_staging)
    try:
        jobs = [make_job(args={"i": i}) for i in range(50)]
        pg.queue.enqueue_many(jobs)
    finally:
        sa.event.remove(engine, "after_cursor_execute", kill_own_backend_after_staging)
    assert killed, "the connection was cut between staging and COPY"
    assert [c.job.id for c in _claim_all(pg)] == [j.id for j in jobs]


@pytest.fixture
def no_temp_url() -> Iterator[str]:
    """A migrated database and a role with DML rights on it but no TEMPORARY privilege."""
    import uuid

    from conveyor.shell.adapters.sql import make_engine
    from conveyor.shell.adapters.sql.migration import migrate
    from conveyor.shell.adapters.sql.schema import SCHEMA
    from conveyor.testing.postgres_server import drop_database, fresh_database

    url = fresh_database(prefix="conveyor_notemp")
    owner = make_engine(url)
    migrate(owner)
    role = f"conveyor_notemp_{uuid.uuid4().hex[:8]}"
    database = sa.make_url(url).database
    tables = ", ".join(t.name for t in SCHEMA.tables_for(owner.dialect))
    with owner.begin() as conn:
        conn.exec_driver_sql(f"CREATE ROLE {role} LOGIN")
        conn.exec_driver_sql(f"REVOKE TEMPORARY ON DATABASE {database} FROM PUBLIC")
        conn.exec_driver_sql(f"GRANT SELECT, INSERT, UPDATE, DELETE ON {tables} TO {role}")
        conn.exec_driver_sql(
            f"GRANT USAGE ON SEQUENCE {SCHEMA.job_seq.name}, {SCHEMA.store_seq.name} TO {role}"
        )
    owner.dispose()
    yield sa.make_url(url).set(username=role).render_as_string(hide_password=False)
    drop_database(url)
    admin = make_engine(sa.make_url(url).set(database="postgres"), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f"DROP ROLE IF EXISTS {role}")
    admin.dispose()


def test_a_role_that_may_not_create_temporary_tables_bulk_enqueues_in_one_statement(
    no_temp_url: str,
) -> None:
    from conveyor.shell.adapters.sql import SqlJobQueue, make_engine

    engine = make_engine(no_temp_url)
    queue = SqlJobQueue(engine)
    try:
        jobs = [make_job(args={"i": i}) for i in range(20)]
        queue.enqueue_many(jobs)
        taken = queue.dequeue_many("default", T0, 50)
    finally:
        queue.close()
    assert [c.job.id for c in taken if isinstance(c, Claim)] == [j.id for j in jobs]
