"""Finishing a prefetched batch on the SQL backend: one write for the whole batch,
fenced per job. The semantics run on SQLite and PostgreSQL; the statement count is
PostgreSQL's (SQLite runs its finish as one transaction of several statements, which
costs no round trip)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any
from uuid import uuid4

import attrs
import pytest
from conveyor.core import ErrorInfo, Job, JobStatus, create_job, dead_letter, start
from conveyor.shell.adapters.sql import SqlJobQueue, SqlJobStore, make_engine
from conveyor.shell.adapters.sql.migration import create_tables
from conveyor.shell.ports import Claim
from conveyor.testing.postgres_server import drop_database, fresh_database, postgres_url
from sqlalchemy import Engine
from sqlalchemy import event as sa_event

T0 = datetime(2026, 1, 1, tzinfo=UTC)
ERROR = ErrorInfo("boom", "it broke", False)


@attrs.define
class Db:
    engine: Engine
    queue: SqlJobQueue
    store: SqlJobStore


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Db]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'conveyor.db'}"
    else:
        url = fresh_database(postgres_url())
    engine = make_engine(url)
    create_tables(engine)
    yield Db(engine, SqlJobQueue(engine), SqlJobStore(engine))
    engine.dispose()
    if request.param == "postgresql":
        drop_database(url)


def make_job(queue: str = "jobs") -> Job:
    return create_job(id=uuid4(), job_type="work", now=T0, queue=queue).unwrap()


def completed(job: Job) -> Job:
    return attrs.evolve(start(job, T0).unwrap(), status=JobStatus.COMPLETED)


def dead(job: Job) -> Job:
    return dead_letter(start(job, T0).unwrap(), ERROR, T0).job


def claims(db: Db, n: int) -> list[Claim]:
    for _ in range(n):
        db.queue.enqueue(make_job())
    got = db.queue.dequeue_many("jobs", T0, n)
    assert all(isinstance(c, Claim) for c in got)
    return [c for c in got if isinstance(c, Claim)]


def test_a_batch_records_every_outcome_newest_in_list_order(db: Db) -> None:
    batch = claims(db, 5)
    records = [completed(c.job) if i % 2 else dead(c.job) for i, c in enumerate(batch)]
    assert db.queue.finish_many(list(zip(batch, records, strict=True))) == [True] * 5
    assert "jobs" not in db.queue.counts(T0)  # no row left, in flight or otherwise
    # Newest first: the last item of the batch was recorded last.
    assert [j.id for j in db.store.list_history()] == [r.id for r in reversed(records)]
    assert [j.id for j in db.store.list_dead()] == [r.id for r in records[::2]][::-1]


def test_a_stale_token_in_a_batch_is_refused_alone(db: Db) -> None:
    batch = claims(db, 3)
    stale = attrs.evolve(batch[1], token=batch[1].token + "-old")
    items = [(batch[0], completed(batch[0].job)), (stale, completed(batch[1].job))]
    items.append((batch[2], completed(batch[2].job)))
    assert db.queue.finish_many(items) == [True, False, True]
    assert db.store.get(batch[1].job.id) is None
    assert db.queue.counts(T0)["jobs"].in_flight == 1
    # The same batch sent again changes nothing: its rows are gone.
    assert db.queue.finish_many(items) == [False, False, False]
    assert len(db.store.list_history()) == 2


def test_a_job_with_a_cancel_request_is_not_finished_by_its_batch(db: Db) -> None:
    batch = claims(db, 2)
    assert db.queue.request_cancel(batch[0].job.id, T0)
    items = [(c, completed(c.job)) for c in batch]
    assert db.queue.finish_many(items) == [False, True]
    assert db.store.get(batch[0].job.id) is None


# SQLite's finish is one local transaction: it has no round trip to save.
@pytest.mark.parametrize("db", ["postgresql"], indirect=True)
def test_on_postgresql_a_batch_finish_is_one_statement(db: Db) -> None:
    batch = claims(db, 20)
    statements: list[str] = []

    def seen(conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
        statements.append(statement)

    sa_event.listen(db.engine, "before_cursor_execute", seen)
    try:
        assert db.queue.finish_many([(c, completed(c.job)) for c in batch]) == [True] * 20
    finally:
        sa_event.remove(db.engine, "before_cursor_execute", seen)
    assert len(statements) == 1, statements
    assert len(db.store.list_history()) == 20
