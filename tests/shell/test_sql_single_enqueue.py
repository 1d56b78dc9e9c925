"""The single enqueue on the SQL backend: its upsert goes straight to the pooled
driver connection (`single_put`), and keeps every guarantee of a unit of work."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from backends import Backend, make_backend
from conveyor.shell.ports import Claim
from helpers import T0, make_job


@pytest.fixture
def pg() -> Iterator[Backend]:
    made = make_backend("postgresql")
    yield made
    made.cleanup()


@pytest.fixture(params=["sqlite", "postgresql"])
def sql(request: pytest.FixtureRequest) -> Iterator[Backend]:
    made = make_backend(request.param)
    yield made
    made.cleanup()


def _engine(b: Backend) -> sa.Engine:
    engine: sa.Engine = b.queue.engine
    return engine


def _messages_sent(b: Backend, action: Any) -> list[str]:
    """The protocol messages libpq sent while `action` ran, by name (its own trace of
    every connection checked out meanwhile)."""
    import psycopg.pq

    traced: list[Any] = []
    with tempfile.TemporaryFile("w+") as out:

        def on_checkout(dbapi_connection: Any, *_: Any) -> None:
            pgconn = dbapi_connection.pgconn
            pgconn.trace(out.fileno())
            pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS)
            traced.append(pgconn)

        pool = _engine(b).pool
        sa.event.listen(pool, "checkout", on_checkout)
        try:
            action()
        finally:
            sa.event.remove(pool, "checkout", on_checkout)
            for pgconn in traced:
                pgconn.untrace()
        out.flush()
        os.fsync(out.fileno())
        out.seek(0)
        lines = out.read().splitlines()
    return [line.split("\t")[2] for line in lines if line.startswith("F\t")]


def test_a_single_enqueue_on_postgresql_is_one_statement_in_one_round_trip(pg: Backend) -> None:
    for _ in range(2):
        pg.queue.enqueue(make_job())  # a pooled connection, its statement prepared
    sent = _messages_sent(pg, lambda: pg.queue.enqueue(make_job()))
    # One Bind/Execute of the prepared upsert, one Sync: no BEGIN or COMMIT of its own.
    assert sent.count("Sync") == 1, sent
    assert sent.count("Bind") == 1 and "Query" not in sent, sent
    assert pg.queue.counts(T0)["default"].ready == 3


def test_a_single_enqueue_after_the_server_dropped_its_connection_is_rerun(
    pg: Backend,
) -> None:
    pg.queue.enqueue(make_job())
    with _engine(pg).connect() as conn:
        conn.execute(
            sa.text(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        )
    job = make_job()
    pg.queue.enqueue(job)
    assert pg.queue.counts(T0)["default"].ready == 2
    ids = {c.job.id for c in pg.queue.dequeue_many("default", T0, 10) if isinstance(c, Claim)}
    assert job.id in ids


def test_single_enqueues_take_their_places_in_order(sql: Backend) -> None:
    jobs = [make_job(args={"n": n}) for n in range(5)]
    for job in jobs:
        sql.queue.enqueue(job)
    sql.queue.enqueue(jobs[1])  # again: an upsert, to the tail
    taken = [c for c in sql.queue.dequeue_many("default", T0, 10) if isinstance(c, Claim)]
    assert [c.job.args["n"] for c in taken] == [0, 2, 3, 4, 1]
