"""What PostgreSQL writes per job: a claim rewrites its row on its own page, and a row
enters only the queue index of its status.

The figures themselves (WAL bytes per job) are the benchmark's; what a test can pin is
the mechanism behind them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from backends import Backend, make_backend
from conveyor.shell.adapters.sql.schema import SCHEMA
from conveyor.shell.ports import Claim
from helpers import T0, make_job


@pytest.fixture
def pg() -> Iterator[Backend]:
    made = make_backend("postgresql")
    yield made
    made.cleanup()


def _pages(engine: sa.Engine) -> dict[str, int]:
    """Each queued row's heap page, from its ctid `(page,item)`."""
    query = sa.text(f"SELECT id, ctid::text FROM {SCHEMA.job_queue.name}")
    with engine.connect() as conn:
        return {str(i): int(ctid.strip("()").split(",")[0]) for i, ctid in conn.execute(query)}


def test_a_claim_on_postgresql_rewrites_its_row_on_the_same_page(pg: Backend) -> None:
    # On the same page, the WAL record of the update holds only the changed bytes.
    engine: sa.Engine = pg.queue.engine
    with engine.begin() as conn:
        conn.execute(sa.text(f"TRUNCATE {SCHEMA.job_queue.name}"))  # fresh pages
    pg.queue.enqueue_many([make_job(args={"i": i, "pad": "x" * 200}) for i in range(200)])
    before = _pages(engine)
    claims = pg.queue.dequeue_many("default", T0, 200)
    assert len(claims) == 200 and all(isinstance(c, Claim) for c in claims)
    after = _pages(engine)
    moved = [job_id for job_id, page in before.items() if after[job_id] != page]
    assert moved == []


def _until_listening(pg: Backend, timeout_s: float = 30.0) -> None:
    """Return once the process's wake-up listener is heard from: connected (which
    wakes every waiter) or passing on a probe job's NOTIFY. Under load it may still be
    connecting, or reconnecting after an earlier test cut its session."""
    pg.queue.wait_for_work("probe", 0.01)  # the first wait starts the listener
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        pg.queue.enqueue(make_job(queue="probe"))
        if pg.queue.wait_for_work("probe", 1.0):
            return
    raise AssertionError(f"the wake-up listener was not heard from in {timeout_s} s")


def test_a_bulk_enqueue_wakes_the_waiters_of_every_queue_it_wrote_to(pg: Backend) -> None:
    woke: dict[str, Any] = {}
    waiting = threading.Barrier(3)
    _until_listening(pg)

    def waiter(queue: str) -> None:
        pg.queue.wait_for_work(queue, 0.01)  # what this thread has seen so far
        waiting.wait(5)
        began = time.monotonic()
        woke[queue] = (pg.queue.wait_for_work(queue, 5.0), time.monotonic() - began)

    threads = [threading.Thread(target=waiter, args=(q,)) for q in ("default", "other")]
    for thread in threads:
        thread.start()
    waiting.wait(5)
    time.sleep(0.2)
    jobs = [make_job(queue="default" if i % 2 else "other") for i in range(1000)]
    pg.queue.enqueue_many(jobs)
    for thread in threads:
        thread.join(timeout=10)
    assert woke["default"][0] is True and woke["default"][1] < 2
    assert woke["other"][0] is True and woke["other"][1] < 2


PARTIAL = {
    "conveyor_job_queue_claim": "ready",
    "conveyor_job_queue_due": "scheduled",
    "conveyor_job_queue_due_by_queue": "scheduled",
    "conveyor_job_queue_lease": "processing",
}


def _predicates(engine: sa.Engine) -> dict[str, str | None]:
    query = sa.text(
        "SELECT c.relname, pg_get_expr(i.indpred, i.indrelid) FROM pg_index i"
        " JOIN pg_class c ON c.oid = i.indexrelid WHERE c.relname = ANY(:names)"
    )
    with engine.connect() as conn:
        return {str(n): p for n, p in conn.execute(query, {"names": list(PARTIAL)})}


@pytest.fixture
def pg_url() -> Iterator[str]:
    from conveyor.testing.postgres_server import drop_database, fresh_database

    url = fresh_database(prefix="conveyor_partial")
    yield url
    drop_database(url)


def test_each_postgresql_queue_index_holds_only_the_rows_of_its_status(pg_url: str) -> None:
    from conveyor.shell.adapters.sql import make_engine
    from conveyor.shell.adapters.sql.migration import migrate

    engine = make_engine(pg_url)
    try:
        migrate(engine)
        found = _predicates(engine)
    finally:
        engine.dispose()
    assert {name: f"'{status}'" in (found[name] or "") for name, status in PARTIAL.items()} == {
        name: True for name in PARTIAL
    }


def test_migrate_rebuilds_whole_queue_indexes_an_earlier_version_made_as_partial_ones(
    pg_url: str,
) -> None:
    from conveyor.shell.adapters.sql import make_engine
    from conveyor.shell.adapters.sql.migration import migrate

    engine = make_engine(pg_url)
    try:
        migrate(engine)
        with engine.begin() as conn:  # as an earlier version left them: whole, unmarked
            for name in PARTIAL:
                conn.execute(sa.text(f"DROP INDEX {name}"))
            conn.execute(
                sa.text(
                    "CREATE INDEX conveyor_job_queue_claim ON conveyor_job_queue (queue, status, priority, seq)"
                )
            )
            conn.execute(
                sa.text(
                    "CREATE INDEX conveyor_job_queue_due ON conveyor_job_queue (status, run_at)"
                )
            )
            conn.execute(
                sa.text(
                    "CREATE INDEX conveyor_job_queue_lease ON conveyor_job_queue (status, locked_at)"
                )
            )
            conn.execute(sa.text("COMMENT ON TABLE conveyor_job_queue IS NULL"))
        assert _predicates(engine)["conveyor_job_queue_claim"] is None
        assert migrate(engine) is True
        found = _predicates(engine)
    finally:
        engine.dispose()
    assert set(found) == set(PARTIAL)
    assert all(found[name] is not None for name in PARTIAL), found
