"""How `Runtime.aenqueue` writes without blocking the event loop, per backend.

* memory: in the loop's thread (a dict update under a lock, no I/O), then a yield.
* PostgreSQL: SQLAlchemy's asyncio extension with asyncpg (`adapters.sql.async_queue`).
* Redis: `redis.asyncio` (`adapters.redis.async_queue`), a cluster client on a
  Redis Cluster; with a replica wait, `enqueue` in a thread (its WAIT needs the
  connection that wrote, which the sync adapter keeps).
* SQLite, and any backend whose asyncio driver is not installed (the `asyncio`
  extra brings asyncpg and greenlet): `enqueue` itself, in a worker thread
  (`asyncio.to_thread`). For SQLite this is a choice, not a fallback: the
  asyncio driver there, aiosqlite, is sqlite3 on a thread with a hand-off per
  statement, slower and with longer stalls of the loop than one hand-off per
  enqueue (docs/asyncio.md has the figures).

An async client's connections belong to the event loop that opened them, so there
is one writer per loop, made on first use in it; `aclose` releases the current
loop's.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import weakref
from collections.abc import Sequence
from typing import Protocol

from ..core import Job
from .endpoints import BackendSettings, retry_budget_s
from .ports import JobQueue

log = logging.getLogger("conveyor.runtime")

#: The `driver` when `aenqueue` runs the sync enqueue in a worker thread.
THREAD = "thread"


class AsyncWriter(Protocol):
    """What `aenqueue` writes through."""

    @property
    def driver(self) -> str: ...

    async def enqueue(self, job: Job) -> None: ...

    async def enqueue_many(self, jobs: Sequence[Job]) -> None: ...

    async def aclose(self) -> None: ...


class InlineWriter:
    """The memory backend: its enqueue does no I/O, so it runs in the caller's thread,
    then yields to the loop (an await that never suspends would let a loop of
    enqueues starve every other task)."""

    driver = "memory"

    def __init__(self, queue: JobQueue) -> None:
        self._queue = queue

    async def enqueue(self, job: Job) -> None:
        self._queue.enqueue(job)
        await asyncio.sleep(0)

    async def enqueue_many(self, jobs: Sequence[Job]) -> None:
        self._queue.enqueue_many(jobs)
        await asyncio.sleep(0)

    async def aclose(self) -> None:
        return None


def native_driver(config: BackendSettings) -> str | None:
    """The asyncio driver `aenqueue` uses for the backend `config` names, or None when
    it runs the sync enqueue in a thread (SQLite, or a driver not installed)."""
    if config.provider == "memory":
        return InlineWriter.driver
    if config.provider == "redis":
        if config.redis_replica_wait:
            return None  # the sync enqueue waits for the replicas (see adapters.redis.replicas)
        if config.redis_shards > 1:
            return None  # the sync enqueue routes each job to its queue's shard
        try:
            import redis.asyncio  # noqa: F401
        except ImportError:
            return None
        return "redis.asyncio"
    if config.provider == "db":
        from .adapters.sql.engine import normalize_url

        if normalize_url(config.url).get_backend_name() != "postgresql":
            return None  # SQLite: the thread, by choice (see the module's docstring)
        try:
            from .adapters.sql.async_queue import async_driver_installed, async_url
        except ImportError:
            # SQLAlchemy's asyncio extension without greenlet raises a plain ImportError
            # (not ModuleNotFoundError) at import: the sync enqueue in a thread serves.
            return None
        if not async_driver_installed(config.url):
            return None
        return async_url(config.url).drivername
    return None


class AsyncWriters:
    """One writer per event loop for a runtime's backend.

    Nothing of asyncio's drivers is imported until `driver` is first read (by the
    first `aenqueue`): a runtime that never enqueues from asyncio code runs on an
    install without them."""

    def __init__(self, config: BackendSettings, queue: JobQueue, *, native: bool = True) -> None:
        """`config` says where the backend is (a `Config` does); `native=False` always
        takes the thread path (to compare, or to test it)."""
        self._config, self._queue = config, queue
        self._native = native
        self._by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, AsyncWriter] = (
            weakref.WeakKeyDictionary()
        )

    @functools.cached_property
    def driver(self) -> str:
        """The asyncio driver `aenqueue` writes through, or `THREAD`."""
        return (native_driver(self._config) if self._native else None) or THREAD

    def current(self) -> AsyncWriter:
        """The running loop's writer, made on first use."""
        loop = asyncio.get_running_loop()
        writer = self._by_loop.get(loop)
        if writer is None:
            writer = self._by_loop[loop] = self._make()
        return writer

    def _make(self) -> AsyncWriter:
        cfg = self._config
        if self.driver == THREAD:
            raise RuntimeError("no asyncio driver: aenqueue runs enqueue in a thread")
        if cfg.provider == "memory":
            return InlineWriter(self._queue)
        if cfg.provider == "redis":
            from .adapters.redis.async_queue import AsyncRedisQueue

            return AsyncRedisQueue(
                cfg.redis_url,
                cfg.redis_prefix,
                retry_budget_s=retry_budget_s(cfg),
                cluster_urls=[cfg.redis_url, *cfg.redis_urls] if cfg.redis_cluster else (),
            )
        from .adapters.sql.async_queue import AsyncSqlQueue

        # As for the sync adapters: a quarter of the lease.
        return AsyncSqlQueue(cfg.url, lock_retry_s=retry_budget_s(cfg), pool_size=cfg.pool_size)

    async def aclose(self) -> None:
        """Release the running loop's connections (its writer is made again on next use)."""
        writer = self._by_loop.pop(asyncio.get_running_loop(), None)
        if writer is not None:
            await writer.aclose()
