"""`enqueue_in_tx` with a connection to another database than the queue's is refused
with a `ValidationError` naming `conn`, before anything is written, on SQLite and
PostgreSQL; a connection to the queue's database through another engine is taken;
and the check costs no round trip once an engine is known."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import conveyor
import pytest
import sqlalchemy as sa
from conveyor.core import ValidationError
from conveyor.shell.adapters.sql import make_engine
from conveyor.shell.adapters.sql_schema import SCHEMA, create_tables
from conveyor.shell.runtime import Runtime


class Site:
    """A queue on one backend, and ways to reach other databases beside it."""

    def __init__(self, name: str, folder: Path) -> None:
        self.name, self.folder = name, folder
        self.dropped: list[str] = []
        self.engines: list[sa.Engine] = []
        self.url = self.other_url("queue")
        self.runtime: Runtime = conveyor.build(
            {"provider": "db", "url": self.url, "auto_migrate": True, "entry_points": False}
        )

    def other_url(self, label: str) -> str:
        if self.name == "sqlite":
            return f"sqlite:///{self.folder / f'{label}.db'}"
        from conveyor.testing.postgres_server import fresh_database

        url = fresh_database(prefix=f"conveyor_outbox_{label}")
        self.dropped.append(url)
        return url

    def engine(self, url: str) -> sa.Engine:
        made = make_engine(url)
        self.engines.append(made)
        return made

    def queued(self, engine: sa.Engine) -> int:
        with engine.connect() as conn:
            return int(
                conn.execute(sa.select(sa.func.count()).select_from(SCHEMA.job_queue)).one()[0]
            )

    def close(self) -> None:
        self.runtime.close()
        for engine in self.engines:
            engine.dispose()
        if self.dropped:
            from conveyor.testing.postgres_server import drop_database

            for url in self.dropped:
                drop_database(url)


@pytest.fixture(params=["sqlite", "postgresql"])
def site(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Site]:
    made = Site(request.param, tmp_path)
    yield made
    made.close()


def _refused(site: Site, engine: sa.Engine) -> ValidationError:
    with pytest.raises(ValidationError) as info, engine.begin() as conn:
        site.runtime.enqueue_in_tx(conn, "x", {})
    assert info.value.fields == ("conn",)
    return info.value


def test_a_connection_to_the_applications_own_database_is_refused(site: Site) -> None:
    app = site.engine(site.other_url("app"))
    error = _refused(site, app)
    assert "not to the queue's database" in str(error)
    assert site.queued(site.runtime.queue.engine) == 0


def test_another_queues_database_with_the_tables_is_refused_and_gets_nothing(site: Site) -> None:
    other = site.engine(site.other_url("staging"))
    create_tables(other)
    _refused(site, other)
    assert site.queued(other) == 0, "nothing was written to the other queue"
    assert site.queued(site.runtime.queue.engine) == 0


def test_the_message_names_both_databases_without_passwords(site: Site) -> None:
    if site.name == "sqlite":
        app_url = site.other_url("app")
        expected = [str(site.folder / "app.db"), str(site.folder / "queue.db")]
    else:
        # The test server trusts local connections: the password is only carried.
        with_password = sa.make_url(site.other_url("app")).set(password="s3cr3t-pw")
        app_url = with_password.render_as_string(hide_password=False)
        expected = [str(with_password.database), str(sa.make_url(site.url).database)]
    message = str(_refused(site, site.engine(app_url)))
    for name in expected:
        assert name in message, message
    assert "s3cr3t-pw" not in message


def test_a_sqlite_connection_to_a_postgresql_queue_is_refused() -> None:
    from conveyor.testing.postgres_server import drop_database, fresh_database

    url = fresh_database(prefix="conveyor_outbox_pg")
    runtime = conveyor.build({"provider": "db", "url": url, "auto_migrate": True})
    app = sa.create_engine("sqlite://")
    try:
        with pytest.raises(ValidationError) as info, app.begin() as conn:
            runtime.enqueue_in_tx(conn, "x", {})
        assert info.value.fields == ("conn",)
        assert "sqlite" in str(info.value) and "postgresql" in str(info.value)
    finally:
        app.dispose()
        runtime.close()
        drop_database(url)


def _same_database_other_url(site: Site) -> str:
    if site.name == "sqlite":
        return site.url.replace(str(site.folder), str(site.folder / "." / "sub" / ".."))
    # Another spelling of the same socket folder: the URLs differ, the server is one.
    url = sa.make_url(site.url)
    return url.update_query_dict({"host": url.query["host"] + "/"}).render_as_string(
        hide_password=False
    )


def test_a_connection_to_the_queues_database_through_another_engine_is_taken(
    site: Site,
) -> None:
    (site.folder / "sub").mkdir()
    same = site.engine(_same_database_other_url(site))
    with same.begin() as conn:
        job = site.runtime.enqueue_in_tx(conn, "x", {})
    view = site.runtime.get(job.id)
    assert view is not None and view.job.id == job.id


def test_once_an_engine_is_known_the_check_costs_no_round_trip(site: Site) -> None:
    (site.folder / "sub").mkdir()
    same = site.engine(_same_database_other_url(site))
    statements: list[str] = []
    checkouts: list[Any] = []

    @sa.event.listens_for(same, "before_cursor_execute")
    def seen(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        statements.append(statement)

    with same.begin() as conn:
        site.runtime.enqueue_in_tx(conn, "x", {})
    queue_engine = site.runtime.queue.engine
    sa.event.listen(queue_engine.pool, "checkout", lambda *a: checkouts.append(a))
    first = len(statements)
    with same.begin() as conn:
        site.runtime.enqueue_in_tx(conn, "y", {})
    later = statements[first:]
    assert not any("database_list" in s or "pg_postmaster" in s for s in later), later
    assert checkouts == [], "the queue's own engine was not asked again"


# ---- the application's own engine, however its driver is set up -----------------


def _autocommit_engines(site: Site) -> dict[str, sa.Engine]:
    """Engines on the queue's database whose driver commits each statement itself."""
    made = {"engine isolation_level": sa.create_engine(site.url, isolation_level="AUTOCOMMIT")}
    if site.name == "sqlite":
        made["sqlite3 isolation_level=None"] = sa.create_engine(
            site.url, connect_args={"isolation_level": None}
        )
    else:
        made["psycopg autocommit"] = sa.create_engine(site.url, connect_args={"autocommit": True})
    site.engines.extend(made.values())
    return made


def test_an_engine_whose_driver_autocommits_is_refused_not_taken(site: Site) -> None:
    # Only the connection's own execution option was looked at: an engine (or driver)
    # in autocommit mode was taken, and the job committed although the caller's
    # transaction rolled back.
    for how, engine in _autocommit_engines(site).items():
        error = _refused(site, engine)
        assert "AUTOCOMMIT" in str(error), (how, error)
    assert site.queued(site.runtime.queue.engine) == 0


def test_sqlites_savepoint_recipe_is_a_transaction_and_is_taken(tmp_path: Path) -> None:
    # SQLAlchemy's recipe for SQLite savepoints: the driver in autocommit mode, BEGIN
    # sent on each begin. That is a transaction: a rollback takes the job with it.
    site = Site("sqlite", tmp_path)
    engine = sa.create_engine(site.url, connect_args={"isolation_level": None})
    sa.event.listen(engine, "begin", lambda conn: conn.exec_driver_sql("BEGIN"))
    site.engines.append(engine)
    with pytest.raises(RuntimeError, match="the order failed"), engine.begin() as conn:
        site.runtime.enqueue_in_tx(conn, "x", {}, unique_key="order-1")
        raise RuntimeError("the order failed")
    assert site.queued(site.runtime.queue.engine) == 0
    site.close()


@pytest.mark.parametrize("keyed", ["unique_key", "id"])
def test_a_keyed_enqueue_first_in_a_plain_engines_transaction_rolls_back_with_it(
    site: Site, keyed: str
) -> None:
    # With Python's sqlite3 in its default mode, a SAVEPOINT (the keyed enqueue's) sent
    # before any other write began a transaction of its own, and its RELEASE committed
    # the job: the caller's rollback left it queued, and it ran.
    import uuid

    engine = sa.create_engine(site.url)
    site.engines.append(engine)
    key = {"unique_key": "order-1"} if keyed == "unique_key" else {"id": uuid.uuid4()}
    with pytest.raises(RuntimeError, match="the order failed"), engine.begin() as conn:
        site.runtime.enqueue_in_tx(conn, "x", {}, **key)
        raise RuntimeError("the order failed")
    assert site.queued(site.runtime.queue.engine) == 0
    with engine.begin() as conn:
        site.runtime.enqueue_in_tx(conn, "x", {}, **key)
    assert site.queued(site.runtime.queue.engine) == 1, "a commit keeps it"


def test_a_postgresql_connection_that_finds_the_tables_in_another_schema_is_refused() -> None:
    # The same server and database, so the address check passed; but the caller's
    # search_path found another schema's tables: the committed job landed where no
    # worker of this queue looks (or, with no tables there, a raw UndefinedTable).
    from conveyor.testing.postgres_server import drop_database, fresh_database

    url = fresh_database(prefix="conveyor_outbox_schema")
    in_jobs = (
        sa.make_url(url)
        .update_query_dict({"options": "-csearch_path=jobs"})
        .render_as_string(hide_password=False)
    )
    plain, scoped = make_engine(url), make_engine(in_jobs)
    with plain.begin() as conn:
        conn.exec_driver_sql("CREATE SCHEMA jobs")
    create_tables(plain)  # public has tables of its own too: an older install
    queue = conveyor.build(
        {"provider": "db", "url": in_jobs, "auto_migrate": True, "entry_points": False}
    )
    try:
        with pytest.raises(ValidationError) as info, plain.begin() as conn:
            queue.enqueue_in_tx(conn, "x", {})
        assert info.value.fields == ("conn",)
        assert "search_path" in str(info.value) and "jobs" in str(info.value), info.value
        with scoped.begin() as conn:
            queue.enqueue_in_tx(conn, "x", {})
        with plain.connect() as conn:
            counts = [
                conn.exec_driver_sql(f"SELECT count(*) FROM {schema}.conveyor_job_queue").scalar()
                for schema in ("public", "jobs")
            ]
        assert counts == [0, 1], "nothing in public's tables; the queue's own schema taken"
    finally:
        queue.close()
        plain.dispose()
        scoped.dispose()
        drop_database(url)


def test_a_driver_error_in_the_callers_transaction_does_not_carry_the_jobs_args() -> None:
    # The caller's engine shows statement parameters in its errors (Conveyor's own
    # engines hide them): a failed outbox write put the job's args, secrets and all,
    # into the exception text and so into logs and error trackers.
    from conveyor.testing.postgres_server import drop_database, fresh_database

    url = fresh_database(prefix="conveyor_outbox_params")
    queue = conveyor.build({"provider": "db", "url": url, "auto_migrate": True})
    app = sa.create_engine(url)
    try:
        with app.begin() as conn:  # the same-database verdict, kept from here on
            queue.enqueue_in_tx(conn, "charge", {"card": "none"})
        with pytest.raises(sa.exc.DBAPIError) as failed, app.begin() as conn:
            with pytest.raises(sa.exc.DBAPIError):
                conn.exec_driver_sql("SELECT 1/0")  # the caller's transaction is aborted
            queue.enqueue_in_tx(conn, "charge", {"card": "4111-1111-1111-1111"})
        assert "4111" not in str(failed.value), str(failed.value)
    finally:
        app.dispose()
        queue.close()
        drop_database(url)
