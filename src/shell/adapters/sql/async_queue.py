"""Enqueues for asyncio code on PostgreSQL: SQLAlchemy's asyncio extension, asyncpg.

The statements and the unit of work are the sync adapter's: a `SqlJobQueue` over
the async engine's `sync_engine` runs its own enqueue inside
`AsyncConnection.run_sync`, where each statement awaits the driver instead of
blocking (SQLAlchemy's greenlet bridge). So the SQL of an enqueue lives in one
place, `statements`; only the transaction and its retries are here, with
`asyncio.sleep` between tries instead of `time.sleep`.

SQLite is not served here, by choice: aiosqlite runs sqlite3 on a thread and
hands every statement over to it, about ten hand-offs per enqueue, where
`asyncio.to_thread` of the sync enqueue makes one (docs/asyncio.md has the
figures). The code is dialect-neutral all the same.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Sequence
from typing import TypeVar

from sqlalchemy import URL, Connection
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from ....core import Job
from .engine import normalize_url, with_connect_timeout
from .queue import SqlJobQueue
from .schema import SCHEMA, Schema

__all__ = ["ASYNC_DRIVERS", "AsyncSqlQueue", "async_driver_installed", "async_url"]

T = TypeVar("T")

#: The asyncio driver of each database served here.
ASYNC_DRIVERS = {"postgresql": "asyncpg"}


def async_url(url: str | URL) -> URL:
    """`url` with the asyncio driver of its database (`postgresql+asyncpg`)."""
    parsed = normalize_url(url)
    backend = parsed.get_backend_name()
    return parsed.set(drivername=f"{backend}+{ASYNC_DRIVERS[backend]}")


def async_driver_installed(url: str | URL) -> bool:
    """Whether the asyncio driver for `url`'s database (and the greenlet bridge
    SQLAlchemy's asyncio extension needs) can be imported here."""
    backend = normalize_url(url).get_backend_name()
    needed = ("greenlet", ASYNC_DRIVERS.get(backend, ""))
    return all(name and importlib.util.find_spec(name) is not None for name in needed)


class AsyncSqlQueue:
    """Enqueues through an async engine; one per event loop (its connections belong
    to the loop that opened them). `aclose` releases them."""

    def __init__(
        self,
        url: str | URL,
        *,
        schema: Schema = SCHEMA,
        lock_retry_s: float = 30.0,
        pool_size: int | None = None,
    ) -> None:
        options: dict[str, object] = {"hide_parameters": True}  # payloads hold secrets
        if pool_size is not None:
            options["pool_size"] = pool_size
        address, options = with_connect_timeout(async_url(url), options)
        self.engine: AsyncEngine = create_async_engine(address, **options)
        # The sync adapter over the same engine: its statements and retry policy,
        # reused as they are.
        self._queue = SqlJobQueue(self.engine.sync_engine, schema=schema, lock_retry_s=lock_retry_s)
        self._db = self._queue._db

    @property
    def driver(self) -> str:
        """The SQLAlchemy driver name, `postgresql+asyncpg`."""
        return self.engine.url.drivername

    async def enqueue(self, job: Job) -> None:
        """`SqlJobQueue.enqueue`, awaiting the database instead of blocking."""
        await self._run(lambda conn: self._queue._enqueue(conn, job), single=not self._db.sqlite)

    async def enqueue_many(self, jobs: Sequence[Job]) -> None:
        """`SqlJobQueue.enqueue_many`, awaiting the database instead of blocking."""
        if jobs:
            await self._run(lambda conn: self._queue._enqueue_many(conn, jobs))

    async def aclose(self) -> None:
        """Close the pooled connections (on the loop that opened them)."""
        await self.engine.dispose()

    async def _run(self, work: Callable[[Connection], T], *, single: bool = False) -> T:
        """`work(conn)` in one transaction (or, `single` on PostgreSQL, in autocommit),
        rerun after a transient failure as `Database.run` does, within the same budget."""

        async def once() -> T:
            async with self.engine.connect() as conn:
                return await self._once(conn, work, single)

        return await self._db.retrier.acall(once)

    async def _once(
        self, conn: AsyncConnection, work: Callable[[Connection], T], single: bool
    ) -> T:
        if single and not self._db.sqlite:
            auto = await conn.execution_options(isolation_level="AUTOCOMMIT")
            return await auto.run_sync(work)
        async with conn.begin():
            return await conn.run_sync(work)
