"""A tenant's scope never falls through to another schema, tenant or session: real PostgreSQL."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from conveyor.shell.adapters.memory import MemoryJobQueue, MemoryJobStore
from conveyor.shell.registry import Registry
from conveyor.shell.tenancy import SchemaPerTenant, SharedTables, TableTenantResolver, TenantScope
from conveyor.shell.worker.loop import Worker
from conveyor.testing.clock import ManualClock
from helpers import T0, make_job

# tenant id -> schema; "d" has a schema without the notes table, "gone" has no schema.
TENANTS = {
    "a": "tenant_a",
    "b": "tenant_b",
    "d": "tenant_d",
    "e": "Acme-Co.eu",
    "gone": "tenant_gone",
}
WITH_NOTES = ("tenant_a", "tenant_b", "Acme-Co.eu")


@pytest.fixture(scope="module")
def pg_url() -> Iterator[str]:
    from conveyor.testing.postgres_server import drop_database, fresh_database

    url = fresh_database(prefix="conveyor_tenancy_isolation")
    yield url
    drop_database(url)


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


@pytest.fixture
def engine(pg_url: str) -> Iterator[sa.Engine]:
    # One pooled connection: every job and every check below reuses the same session.
    engine = sa.create_engine(pg_url, pool_size=1, max_overflow=0)
    with engine.begin() as conn:
        user = conn.execute(sa.text("SELECT current_user")).scalar_one()
        conn.execute(sa.text("DROP TABLE IF EXISTS public.tenants, public.notes"))
        conn.execute(sa.text("CREATE TABLE public.tenants (id text primary key, schema_name text)"))
        # The trap: where an unscoped "notes" lands.
        conn.execute(sa.text("CREATE TABLE public.notes (body text)"))
        for schema in (*TENANTS.values(), user):
            conn.execute(sa.text(f"DROP SCHEMA IF EXISTS {_q(schema)} CASCADE"))
        for tenant, schema in TENANTS.items():
            if tenant != "gone":
                conn.execute(sa.text(f"CREATE SCHEMA {_q(schema)}"))
            if schema in WITH_NOTES:
                conn.execute(sa.text(f"CREATE TABLE {_q(schema)}.notes (body text)"))
            conn.execute(
                sa.text("INSERT INTO public.tenants VALUES (:id, :schema)"),
                {"id": tenant, "schema": schema},
            )
        # A second trap: the "$user" entry of the default search_path.
        conn.execute(sa.text(f"CREATE SCHEMA {_q(user)}"))
        conn.execute(sa.text(f"CREATE TABLE {_q(user)}.notes (body text)"))
    yield engine
    with engine.begin() as conn:
        conn.execute(sa.text(f"DROP SCHEMA IF EXISTS {_q(user)} CASCADE"))
    engine.dispose()


def _rows(engine: sa.Engine, schema: str) -> list[str]:
    with engine.connect() as conn:
        q = sa.text(f"SELECT body FROM {_q(schema)}.notes ORDER BY body")
        return list(conn.execute(q).scalars())


def _trapped(engine: sa.Engine) -> list[str]:
    with engine.connect() as conn:
        user = conn.execute(sa.text("SELECT current_user")).scalar_one()
    return _rows(engine, "public") + _rows(engine, user)


def _session(engine: sa.Engine) -> tuple[str, str | None]:
    with engine.connect() as conn:
        path = conn.execute(sa.text("SHOW search_path")).scalar_one()
        tenant = conn.execute(
            sa.text("SELECT current_setting('conveyor.tenant_id', true)")
        ).scalar()
    return str(path), tenant or None


def _run(
    engine: sa.Engine,
    strategy: Any,
    handler: Callable[..., Any],
    *jobs: tuple[str, dict[str, Any]],
) -> MemoryJobStore:
    scope = TenantScope(engine, TableTenantResolver(engine), strategy)
    registry = Registry()
    registry.register("work", handler, tenant_scoped=True)
    queue, store = MemoryJobQueue(), MemoryJobStore()
    worker = Worker(queue, store, registry, clock=ManualClock(T0), tenancy=scope)
    for tenant, args in jobs:
        queue.enqueue(make_job("work", args=args, tenant_id=tenant, max_retries=0))
    for _ in jobs:
        worker.drain(max_jobs=1)
    return store


def _insert(ctx: Any, body: str) -> None:
    ctx.conn.execute(sa.text("INSERT INTO notes VALUES (:b)"), {"b": body})


def test_a_table_missing_from_the_tenant_schema_is_an_error_not_a_write_elsewhere(
    engine: sa.Engine,
) -> None:
    store = _run(engine, SchemaPerTenant(), lambda args, ctx: _insert(ctx, "d1"), ("d", {}))
    assert _trapped(engine) == [], "nothing was written to public or the $user schema"
    [dead] = store.list_dead(tenant_id="d")
    assert dead.last_error is not None
    assert "notes" in dead.last_error.message and "does not exist" in dead.last_error.message
    assert _session(engine) == ('"$user", public', None)


def test_the_search_path_names_the_tenant_schema_alone(engine: sa.Engine) -> None:
    seen: list[tuple[str, list[str]]] = []

    def handler(args: Any, ctx: Any) -> None:
        path = ctx.conn.execute(sa.text("SHOW search_path")).scalar_one()
        schemas = ctx.conn.execute(sa.text("SELECT current_schemas(false)")).scalar_one()
        seen.append((path, schemas))
        _insert(ctx, ctx.tenant_id)

    store = _run(engine, SchemaPerTenant(), handler, ("a", {}), ("e", {}))
    assert store.list_dead() == []
    assert seen == [
        ('"tenant_a", pg_temp', ["tenant_a"]),
        ('"Acme-Co.eu", pg_temp', ["Acme-Co.eu"]),
    ]
    assert _rows(engine, "tenant_a") == ["a"] and _rows(engine, "Acme-Co.eu") == ["e"]
    assert _trapped(engine) == []


def test_a_tenant_whose_schema_does_not_exist_is_not_found_and_never_runs(
    engine: sa.Engine,
) -> None:
    ran: list[str] = []

    def handler(args: Any, ctx: Any) -> None:
        ran.append(ctx.tenant_id)
        _insert(ctx, "lost")

    store = _run(engine, SchemaPerTenant(), handler, ("gone", {}))
    assert ran == [], "the handler never ran"
    [dead] = store.list_dead(tenant_id="gone")
    assert dead.last_error is not None
    assert (dead.last_error.type, dead.last_error.retryable) == ("tenant-not-found", False)
    # The tenant exists: what is missing is its schema, and the record says so.
    assert dead.last_error.message == "tenant 'gone': schema 'tenant_gone' does not exist"
    assert _trapped(engine) == []
    assert _session(engine) == ('"$user", public', None)


@pytest.mark.parametrize("end", ["commit", "rollback"])
def test_a_handler_that_ends_its_transaction_stays_in_its_tenant(
    engine: sa.Engine, end: str
) -> None:
    after: list[str] = []

    def handler(args: Any, ctx: Any) -> None:
        _insert(ctx, "before")
        getattr(ctx.conn, end)()
        after.append(ctx.conn.execute(sa.text("SHOW search_path")).scalar_one())
        _insert(ctx, "after")

    store = _run(engine, SchemaPerTenant(), handler, ("a", {}))
    assert store.list_dead() == []
    assert after == ['"tenant_a", pg_temp']
    expected = ["after", "before"] if end == "commit" else ["after"]
    assert _rows(engine, "tenant_a") == expected
    assert _trapped(engine) == []
    assert _session(engine) == ('"$user", public', None)


def test_a_temporary_table_does_not_cross_to_the_next_tenant_on_the_connection(
    engine: sa.Engine,
) -> None:
    seen: list[tuple[str, list[str]]] = []

    def handler(args: Any, ctx: Any) -> None:
        if args.get("stash"):
            # Without ON COMMIT DROP a temporary table lives as long as the session.
            ctx.conn.execute(sa.text("CREATE TEMP TABLE notes (body text)"))
            ctx.conn.execute(sa.text("INSERT INTO pg_temp.notes VALUES ('a-secret')"))
            ctx.conn.execute(sa.text("CREATE TEMP TABLE scratch (body text)"))
            ctx.conn.execute(sa.text("INSERT INTO scratch VALUES ('a-scratch')"))
            return
        bodies = list(ctx.conn.execute(sa.text("SELECT body FROM notes")).scalars())
        scratch = ctx.conn.execute(sa.text("SELECT to_regclass('scratch')::text")).scalar()
        seen.append((ctx.tenant_id, [*bodies, *([scratch] if scratch else [])]))

    store = _run(engine, SchemaPerTenant(), handler, ("a", {"stash": 1}), ("b", {}), ("a", {}))
    assert store.list_dead() == []
    assert seen == [("b", []), ("a", [])]


def test_the_connection_returns_to_the_pool_with_its_own_settings(engine: sa.Engine) -> None:
    @sa.event.listens_for(engine, "connect")
    def _configure(dbapi_conn: Any, _record: Any) -> None:
        with dbapi_conn.cursor() as cur:
            cur.execute("SET search_path TO public")
        dbapi_conn.commit()

    engine.dispose()  # the next checkout is a new session, configured above

    def handler(args: Any, ctx: Any) -> None:
        _insert(ctx, args["body"])
        if args.get("fail"):
            raise RuntimeError("no")

    store = _run(
        engine,
        SchemaPerTenant(),
        handler,
        ("a", {"body": "a1"}),
        ("b", {"body": "b1", "fail": 1}),
        ("gone", {"body": "lost"}),
    )
    assert sorted(d.tenant_id or "" for d in store.list_dead()) == ["b", "gone"]
    assert _session(engine) == ("public", None)
    assert _rows(engine, "tenant_a") == ["a1"] and _rows(engine, "tenant_b") == []


def test_shared_tables_keep_the_tenant_id_for_the_whole_run_and_only_for_it(
    engine: sa.Engine,
) -> None:
    seen: list[str | None] = []

    def handler(args: Any, ctx: Any) -> None:
        current = sa.text("SELECT current_setting('conveyor.tenant_id', true)")
        seen.append(ctx.conn.execute(current).scalar())
        ctx.conn.commit()
        seen.append(ctx.conn.execute(current).scalar())

    store = _run(engine, SharedTables(), handler, ("a", {}), ("b", {}))
    assert store.list_dead() == []
    assert seen == ["a", "a", "b", "b"]
    assert _session(engine) == ('"$user", public', None)
