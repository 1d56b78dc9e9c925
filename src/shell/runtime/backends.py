"""Building the backend a config names: its queue, store and presence, and tenancy.

`open_backend` makes the provider's queue, store and presence (memory, SQL
through SQLAlchemy, or Redis), waiting for a server that is not up yet for the
start-up timeout, and checks (or, where configured, migrates) the SQL schema.
Every error it raises names the config key and holds no password. The adapters
retry a transient storage error for a quarter of the lease
(`endpoints.retry_budget_s`), through the one retry layer.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from ...core import ValidationError
from .. import outage
from ..endpoints import BackendSettings, backend_label, backend_url, retry_budget_s, tenancy_url
from ..migrate import SchemaNotCurrent, auto_migrates, prepare_schema
from ..presence import MemoryPresence, Presence
from ..redact import guarded, mask_url

if TYPE_CHECKING:
    from ..config import Config, TenancyConfig
    from ..ports import JobQueue, JobStore
    from ..tenancy import TenantResolver, TenantScope

T = TypeVar("T")


def make_backend(settings: BackendSettings) -> tuple[JobQueue, JobStore, Presence]:
    """The provider's queue, store and presence, connected (no DDL, no waiting)."""
    if settings.provider == "memory":
        from ..adapters.memory import MemoryJobQueue, MemoryJobStore

        store = MemoryJobStore()
        return MemoryJobQueue(store), store, MemoryPresence()
    if settings.provider == "db":
        return _sql_backend(settings)
    if settings.provider == "redis":
        return _redis_backend(settings)
    raise ValidationError.of("provider", f"unknown provider {settings.provider!r}")


def _sql_backend(settings: BackendSettings) -> tuple[JobQueue, JobStore, Presence]:
    from ..adapters.sql import SqlJobQueue, SqlJobStore, make_engine
    from ..config.paths import sqlite_file
    from ..presence import SqlPresence

    url = settings.url
    file = sqlite_file(url)
    if file is not None:
        file.parent.mkdir(parents=True, exist_ok=True)
    try:
        engine = make_engine(
            url, pool_size=settings.pool_size, synchronous=settings.sqlite_synchronous
        )
    except ModuleNotFoundError as exc:
        if not (exc.name or "").startswith("psycopg"):
            raise
        # The driver is an extra: say which one, not just what failed to import.
        raise ModuleNotFoundError(
            "PostgreSQL needs the psycopg driver: pip install 'conveyor-jobs[postgres]'",
            name=exc.name,
        ) from None
    # No DDL here: `open_backend` checks the schema mark (or migrates, where configured).
    # The one retry layer: a quarter lease, so a retried write lands while the
    # claim it writes for is still live.
    budget = retry_budget_s(settings)
    queue = SqlJobQueue(engine, lock_retry_s=budget)
    return queue, SqlJobStore(engine, lock_retry_s=budget), SqlPresence(engine)


def _redis_backend(settings: BackendSettings) -> tuple[JobQueue, JobStore, Presence]:
    try:
        from ..adapters.redis import (
            RedisJobQueue,
            RedisJobStore,
            ReplicaWait,
            connect,
            connect_cluster,
        )
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] != "redis":
            raise
        raise ModuleNotFoundError(
            "the Redis backend needs redis-py: pip install 'conveyor-jobs[redis]'",
            name=exc.name,
        ) from None
    from ..presence import RedisPresence

    client = (
        connect_cluster([settings.redis_url, *settings.redis_urls])
        if settings.redis_cluster
        else connect(settings.redis_url)
    )
    # Reached now, as a SQL backend's schema check reaches its server: a server that is
    # down is then waited for up to the caller's start-up timeout (an operator command
    # tries once), not met by the first command, which retries for the write budget.
    # The layout is checked too (a prefix laid out in another number of shards).
    budget = retry_budget_s(settings)
    prefix = settings.redis_prefix
    wait = ReplicaWait(settings.redis_replica_wait, settings.redis_replica_wait_timeout_ms)
    queue: JobQueue
    store: JobStore
    try:
        client.ping()
        if settings.redis_shards > 1:
            from ...core.shards import ShardMap
            from ..adapters.redis.shard_tags import open_shards

            shard_map = ShardMap(settings.redis_shards, dict(settings.redis_queue_shards))
            queue, store = open_shards(
                client, prefix, shard_map, retry_budget_s=budget, replica_wait=wait
            )
        else:
            from ..adapters.redis.shard_tags import refuse_other_layout

            refuse_other_layout(client, prefix, budget)
            queue = RedisJobQueue(client, prefix=prefix, retry_budget_s=budget, replica_wait=wait)
            store = RedisJobStore(client, prefix=prefix, retry_budget_s=budget, replica_wait=wait)
    except BaseException:
        client.close()
        raise
    return queue, store, RedisPresence(client, prefix=prefix, owns_client=True)


def make_tenancy(
    tenancy: TenancyConfig | None, url: str, synchronous: str = "FULL"
) -> TenantScope | None:
    """The tenant scope `tenancy` describes (None without one); its resolver reads the
    database at `tenancy.url`, else at the job tables' `url` (`synchronous`: SQLite's,
    as the job tables')."""
    if tenancy is None:
        return None
    from ..adapters.sql import make_engine
    from ..handlers import import_attr
    from ..tenancy import SchemaPerTenant, SharedTables, TableTenantResolver, TenantScope

    # The same engine settings as the job tables (WAL and busy timeout on SQLite).
    engine = make_engine(tenancy.url or url, synchronous=synchronous)
    if tenancy.strategy == "schema" and engine.dialect.name != "postgresql":
        # Told now: at a job's attempt it would dead-letter every tenant-scoped job.
        field = "tenancy.url" if tenancy.url else "url"
        raise ValidationError.of(
            "tenancy.strategy",
            f"schema-per-tenant needs PostgreSQL, and {field} is {engine.dialect.name}; "
            'use strategy = "shared"',
        )
    resolver: TenantResolver
    if tenancy.resolver == "table":
        resolver = TableTenantResolver(
            engine,
            table=tenancy.table,
            id_column=tenancy.id_column,
            schema_column=tenancy.schema_column,
        )
    else:
        found = import_attr(tenancy.resolver, "tenancy.resolver")
        resolver = found if hasattr(found, "resolve") else found(engine)
    strategy = SchemaPerTenant() if tenancy.strategy == "schema" else SharedTables()
    return TenantScope(engine, resolver, strategy)


def open_tenancy(config: Config) -> TenantScope | None:
    """`make_tenancy` for `config`, its errors told without the password."""
    sync = config.sqlite_synchronous
    return guarded(*tenancy_url(config), lambda: make_tenancy(config.tenancy, config.url, sync))


def reachable(settings: BackendSettings, timeout_s: float, make: Callable[[], T]) -> T:
    """`make()`, whose errors `guarded` rewrites without the password, tried again
    while the server is unreachable for up to `timeout_s`."""
    field, url = backend_url(settings)
    raw: list[BaseException] = []

    def attempt() -> T:
        raw.clear()
        try:
            return make()
        except Exception as exc:
            raw.append(exc)  # to classify; only the rewritten error is ever shown
            raise

    prefix = f"{field}: could not use {mask_url(url)}: "
    return outage.until_reachable(
        lambda: guarded(field, url, attempt),
        state=outage.for_server(*backend_label(settings)),
        key=field,
        timeout_s=timeout_s,
        is_down=lambda _: bool(raw) and outage.is_outage(raw[-1]),
        detail=lambda exc: str(exc).removeprefix(prefix),
    )


def open_backend(config: Config, timeout_s: float) -> tuple[JobQueue, JobStore, Presence]:
    """The queue, store and presence of `config`, with a server that is not up yet
    waited for up to `timeout_s` in all, and the SQL schema ready: checked, or
    migrated where `auto_migrate` says so, else `SchemaNotCurrent`."""
    deadline = time.monotonic() + timeout_s
    # Drivers quote the URL (or, when its password is malformed, pieces of the password).
    queue, store, presence = reachable(config, timeout_s, lambda: make_backend(config))
    migrates = auto_migrates(config.auto_migrate, config.url)
    # Raised outside `guarded`, which would wrap the line in a connection error's words.
    left = max(0.0, deadline - time.monotonic())
    problem = reachable(
        config,
        left,
        lambda: prepare_schema(queue, provider=config.provider, migrates=migrates),
    )
    if problem is not None:
        queue.close()
        store.close()
        raise SchemaNotCurrent(problem)
    return queue, store, presence
