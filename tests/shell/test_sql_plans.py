"""The claim's statements use the indexes meant for them on SQLite, whatever the depth.

Timings are for the benchmarks; what a test can pin is the query plan. A batch claim
that let SQLite's planner walk the status index instead of the primary key cost 100 ms
a claim with 100,000 jobs queued.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from backends import Backend, make_backend
from helpers import T0, make_job


@pytest.fixture
def sqlite_backend() -> Iterator[Backend]:
    made = make_backend("sqlite")
    yield made
    made.cleanup()


def _statements_while(engine: sa.Engine, action: Any) -> list[tuple[str, Any]]:
    seen: list[tuple[str, Any]] = []

    def record(conn: Any, cursor: Any, statement: str, params: Any, *rest: Any) -> None:
        seen.append((statement, params))

    sa.event.listen(engine, "before_cursor_execute", record)
    try:
        action()
    finally:
        sa.event.remove(engine, "before_cursor_execute", record)
    return seen


def test_a_batch_claim_takes_its_rows_by_primary_key(sqlite_backend: Backend) -> None:
    queue: Any = sqlite_backend.queue
    for _ in range(20):
        queue.enqueue(make_job())
    engine = queue._db.engine
    seen = _statements_while(engine, lambda: queue.dequeue_many("default", T0, 10))
    takes = [(s, p) for s, p in seen if s.lstrip().upper().startswith("UPDATE") and " IN (" in s]
    assert takes, "the batch claim's UPDATE ... WHERE id IN (...) ran"
    statement, params = takes[0]
    with engine.connect() as conn:
        plan = conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, params).all()
    detail = " ".join(str(row[-1]) for row in plan)
    assert "sqlite_autoindex" in detail, detail  # the primary key's index
    assert "_due" not in detail and "_lease" not in detail, detail
