"""The reusable adapter model check, run on the SQL backend: SQLite and PostgreSQL.

Each example gets an empty queue: a new SQLite file, or freshly truncated tables in
this module's own PostgreSQL database. When PostgreSQL cannot be started the
PostgreSQL case fails; it never skips.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from conveyor.shell.adapters.sql import SqlJobQueue, SqlJobStore, make_engine
from conveyor.shell.adapters.sql.migration import create_tables
from conveyor.shell.adapters.sql.schema import SCHEMA
from conveyor.shell.ports import JobQueue
from conveyor.testing.postgres_server import drop_database, fresh_database, postgres_url
from conveyor.testing.state_machine import queue_machine
from sqlalchemy import Engine, text


def sqlite_queue() -> tuple[JobQueue, Callable[[], None], SqlJobStore]:
    folder = Path(tempfile.mkdtemp(prefix="conveyor-sm-"))
    engine = make_engine(f"sqlite:///{folder / 'queue.db'}")
    create_tables(engine)

    def cleanup() -> None:
        engine.dispose()
        shutil.rmtree(folder, ignore_errors=True)

    return SqlJobQueue(engine), cleanup, SqlJobStore(engine)


_pg: dict[str, Engine] = {}


@pytest.fixture(scope="module", autouse=True)
def postgres_database() -> Iterator[None]:
    """One database for this module, dropped at the end."""
    yield
    engine = _pg.pop("engine", None)
    if engine is not None:
        engine.dispose()
        drop_database(engine.url.render_as_string(hide_password=False))


def postgres_queue() -> tuple[JobQueue, Callable[[], None], SqlJobStore]:
    engine = _pg.get("engine")
    if engine is None:
        engine = _pg["engine"] = make_engine(fresh_database(postgres_url()))
        create_tables(engine)
    with engine.begin() as conn:
        tables = (SCHEMA.job_queue, SCHEMA.job_store, SCHEMA.edges, SCHEMA.workflows)
        names = ", ".join(t.name for t in tables)
        conn.execute(text(f"TRUNCATE {names}"))
    return SqlJobQueue(engine), lambda: None, SqlJobStore(engine)


TestSqliteQueueMachine = queue_machine(sqlite_queue).TestCase
TestPostgresQueueMachine = queue_machine(postgres_queue).TestCase
