"""Tenant jobs run inside their tenant, or fail explicitly: SQLite and real PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import conveyor
import pytest
import sqlalchemy as sa
from conveyor.shell.adapters.memory import MemoryJobQueue, MemoryJobStore
from conveyor.shell.registry import Registry
from conveyor.shell.tenancy import SchemaPerTenant, SharedTables, TableTenantResolver, TenantScope
from conveyor.shell.worker.loop import Worker
from conveyor.testing.clock import ManualClock
from helpers import T0, make_job


@pytest.fixture(scope="module")
def pg_url() -> Iterator[str]:
    from conveyor.testing.postgres_server import drop_database, fresh_database

    url = fresh_database(prefix="conveyor_tenancy")
    yield url
    drop_database(url)


def _setup_postgres(url: str) -> sa.Engine:
    engine = sa.create_engine(url, pool_size=1, max_overflow=0)
    with engine.begin() as conn:
        conn.execute(sa.text("DROP TABLE IF EXISTS public.tenants"))
        conn.execute(sa.text("CREATE TABLE public.tenants (id text primary key, schema_name text)"))
        for t in ("a", "b", "c"):
            conn.execute(sa.text(f"DROP SCHEMA IF EXISTS tenant_{t} CASCADE"))
            conn.execute(sa.text(f"CREATE SCHEMA tenant_{t}"))
            conn.execute(sa.text(f"CREATE TABLE tenant_{t}.notes (body text)"))
            conn.execute(
                sa.text("INSERT INTO public.tenants VALUES (:id, :schema)"),
                {"id": t, "schema": f"tenant_{t}"},
            )
    return engine


def _setup_sqlite(path: str) -> sa.Engine:
    engine = sa.create_engine(f"sqlite:///{path}", poolclass=sa.pool.StaticPool)
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE tenants (id text primary key, schema_name text)"))
        conn.execute(sa.text("CREATE TABLE notes (tenant_id text, body text)"))
        for t in ("a", "b", "c"):
            conn.execute(sa.text("INSERT INTO tenants VALUES (:id, NULL)"), {"id": t})
    return engine


@pytest.fixture(params=["sqlite", "postgresql"])
def tenant_db(request, tmp_path) -> Iterator[tuple[str, sa.Engine, TenantScope]]:
    if request.param == "postgresql":
        engine = _setup_postgres(request.getfixturevalue("pg_url"))
        strategy: Any = SchemaPerTenant()
    else:
        engine = _setup_sqlite(str(tmp_path / "tenants.db"))
        strategy = SharedTables()
    yield request.param, engine, TenantScope(engine, TableTenantResolver(engine), strategy)
    engine.dispose()


def _write_note(kind: str):
    seen: list[tuple[str, list[str]]] = []

    def handler(args, ctx) -> list[str]:
        if kind == "postgresql":
            path = ctx.conn.execute(sa.text("SHOW search_path")).scalar()
            assert str(path).startswith(f'"tenant_{ctx.tenant_id}"')
            ctx.conn.execute(sa.text("INSERT INTO notes VALUES (:b)"), {"b": args["body"]})
            visible = ctx.conn.execute(sa.text("SELECT body FROM notes ORDER BY body")).scalars()
        else:
            ctx.conn.execute(
                sa.text("INSERT INTO notes VALUES (:t, :b)"),
                {"t": ctx.tenant_id, "b": args["body"]},
            )
            visible = ctx.conn.execute(
                sa.text("SELECT body FROM notes WHERE tenant_id = :t ORDER BY body"),
                {"t": ctx.tenant_id},
            ).scalars()
        bodies = list(visible)
        seen.append((ctx.tenant_id, bodies))
        if args.get("fail"):
            raise RuntimeError("the business rule said no")
        return bodies

    return handler, seen


def _notes(kind: str, engine: sa.Engine, tenant: str) -> list[str]:
    with engine.connect() as conn:
        if kind == "postgresql":
            q = sa.text(f"SELECT body FROM tenant_{tenant}.notes ORDER BY body")
            return list(conn.execute(q).scalars())
        q = sa.text("SELECT body FROM notes WHERE tenant_id = :t ORDER BY body")
        return list(conn.execute(q, {"t": tenant}).scalars())


def _worker(scope: TenantScope, registry: Registry):
    queue, store = MemoryJobQueue(), MemoryJobStore()
    worker = Worker(queue, store, registry, clock=ManualClock(T0), tenancy=scope)
    return worker, queue, store


def test_interleaved_tenants_each_see_only_their_own_data(tenant_db) -> None:
    kind, engine, scope = tenant_db
    handler, seen = _write_note(kind)
    registry = Registry()
    registry.register("note", handler, tenant_scoped=True)
    worker, queue, store = _worker(scope, registry)
    for tenant, body, fail in (("a", "a1", 0), ("b", "b1", 0), ("a", "a2", 1), ("b", "b2", 0)):
        queue.enqueue(
            make_job("note", args={"body": body, "fail": fail}, tenant_id=tenant, max_retries=0)
        )
    for _ in range(4):
        assert worker.drain(max_jobs=1) == 1
        if kind == "postgresql":
            with engine.connect() as conn:  # the same pooled connection (pool_size=1)
                assert conn.execute(sa.text("SHOW search_path")).scalar() == '"$user", public'
    assert seen == [("a", ["a1"]), ("b", ["b1"]), ("a", ["a1", "a2"]), ("b", ["b1", "b2"])]
    assert _notes(kind, engine, "a") == ["a1"], "the failed job's write was rolled back"
    assert _notes(kind, engine, "b") == ["b1", "b2"]
    [dead] = store.list_dead(tenant_id="a")
    assert dead.args["body"] == "a2" and dead.last_error.type == "RuntimeError"
    assert store.list_dead(tenant_id="b") == []


def test_a_job_for_a_deleted_tenant_is_dead_lettered_and_never_runs(tenant_db) -> None:
    kind, engine, scope = tenant_db
    handler, seen = _write_note(kind)
    registry = Registry()
    registry.register("note", handler, tenant_scoped=True)
    worker, queue, store = _worker(scope, registry)
    with engine.begin() as conn:
        conn.execute(sa.text("DELETE FROM tenants WHERE id = 'c'"))
    job = make_job("note", args={"body": "c1"}, tenant_id="c")
    queue.enqueue(job)
    worker.drain()
    assert seen == [], "the handler never ran"
    [dead] = store.list_dead(tenant_id="c")
    assert dead.id == job.id
    assert (dead.last_error.type, dead.last_error.retryable) == ("tenant-not-found", False)
    assert _notes(kind, engine, "c") == [], "its business effect is absent"


def test_a_tenant_handler_given_no_tenant_fails_explicitly(tenant_db) -> None:
    _, _, scope = tenant_db
    handler, seen = _write_note("sqlite")
    registry = Registry()
    registry.register("note", handler, tenant_scoped=True)
    worker, queue, store = _worker(scope, registry)
    queue.enqueue(make_job("note", args={"body": "x"}))
    worker.drain()
    assert seen == []
    [dead] = store.list_dead()
    assert dead.last_error.type == "missing-tenant"


def test_a_plain_handler_for_a_vanished_tenant_also_fails_safe(tenant_db) -> None:
    _, _, scope = tenant_db
    ran: list[int] = []
    worker, queue, store = _worker(scope, Registry({"plain": lambda a: ran.append(1)}))
    queue.enqueue(make_job("plain", tenant_id="nobody"))
    worker.drain()
    assert ran == [] and store.list_dead()[0].last_error.type == "tenant-not-found"


def test_tenancy_is_configured_from_the_runtime_config(tmp_path) -> None:
    db = tmp_path / "app.db"
    _setup_sqlite(str(db)).dispose()
    rt = conveyor.build(
        {"url": f"sqlite:///{db}", "entry_points": False, "tenancy": {"strategy": "shared"}}
    )
    handler, seen = _write_note("sqlite")
    rt.registry.register("note", handler, tenant_scoped=True)
    rt.enqueue("note", {"body": "hello"}, tenant_id="a")
    rt.enqueue("note", {"body": "lost"}, tenant_id="zzz")
    rt.drain()
    assert seen == [("a", ["hello"])]
    assert [j.tenant_id for j in rt.list_dead(tenant_id="zzz")] == ["zzz"]
    assert rt.list_dead(tenant_id="a") == []
    assert rt.status(tenant_id="zzz").queues[0].dead == 1


def test_schema_per_tenant_refuses_sqlite(tmp_path) -> None:
    with pytest.raises(conveyor.ValidationError):
        conveyor.build({"provider": "memory", "tenancy": {"strategy": "schema"}})
    # Taken at build, then every tenant-scoped job was dead-lettered at its first attempt.
    for config in (
        {"url": f"sqlite:///{tmp_path / 'jobs.db'}", "tenancy": {"strategy": "schema"}},
        {
            "provider": "memory",
            "tenancy": {"strategy": "schema", "url": f"sqlite:///{tmp_path / 'app.db'}"},
        },
    ):
        with pytest.raises(conveyor.ValidationError) as refused:
            conveyor.build({**config, "entry_points": False}, env={})
        assert str(refused.value).startswith(
            "tenancy.strategy: schema-per-tenant needs PostgreSQL"
        ), refused.value
