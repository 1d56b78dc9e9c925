"""Enqueues for asyncio code on the Redis backend, through `redis.asyncio`.

The write is the sync adapter's: the same Lua script (`enqueue.lua`) with the same
arguments (`arguments.placement`), run by redis-py's asyncio client,
so a job enqueued here is indistinguishable from one enqueued by `RedisJobQueue`.
A dropped connection is retried within the same budget, with `asyncio.sleep`
between tries.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar, cast
from urllib.parse import urlsplit

import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import NoScriptError

from ....core import Job
from .arguments import placement
from .client import DEFAULT_RETRY_BUDGET_S, RedisKeys, retrier
from .cluster import MAX_CONNECTIONS
from .scripts import QUEUE, source

__all__ = ["AsyncRedisQueue"]

T = TypeVar("T")


class AsyncRedisQueue:
    """Enqueues through a `redis.asyncio` client of its own; one per event loop (its
    connections belong to the loop that opened them). `aclose` releases them.

    With `cluster_urls` (seed nodes, `url` among them or not) the client is a
    `redis.asyncio` `RedisCluster`; every key of the deployment is in one slot, so
    each script and pipeline goes to that slot's master."""

    driver = "redis.asyncio"

    def __init__(
        self,
        url: str,
        prefix: str = "conveyor",
        *,
        retry_budget_s: float = DEFAULT_RETRY_BUDGET_S,
        cluster_urls: Sequence[str] = (),
    ) -> None:
        # redis-py's own retries are off, as in `connect`: the budget here is the one.
        self._client: aioredis.Redis | RedisCluster
        if cluster_urls:
            seeds = [urlsplit(u) for u in cluster_urls if u != url]
            self._client = RedisCluster.from_url(
                url,
                startup_nodes=[ClusterNode(p.hostname or "", p.port or 6379) for p in seeds],
                decode_responses=False,
                retry=Retry(NoBackoff(), 0),
                max_connections=MAX_CONNECTIONS,
            )
        else:
            self._client = aioredis.Redis.from_url(
                url,
                decode_responses=False,
                retry=Retry(NoBackoff(), 0),
                max_connections=MAX_CONNECTIONS,
            )
        self.keys = RedisKeys.for_prefix(prefix)
        self.retry_budget_s = retry_budget_s
        self._anchor = [self.keys.queues()]
        self._enqueue = self._client.register_script(source(*QUEUE, "enqueue"))

    def _argv(self, job: Job, nonce: str) -> list[Any]:
        return [self.keys.base, *placement(job), nonce]

    async def enqueue(self, job: Job) -> None:
        """`RedisJobQueue.enqueue`, awaiting the server instead of blocking."""
        argv = self._argv(job, uuid.uuid4().hex)
        await self._retrying(lambda: self._enqueue(keys=self._anchor, args=argv))

    async def enqueue_many(self, jobs: Sequence[Job]) -> None:
        """`RedisJobQueue.enqueue_many`: one pipelined round trip, each job its own
        atomic script."""
        if not jobs:
            return
        nonce = uuid.uuid4().hex  # one per item: a later duplicate id must win
        argvs = [self._argv(job, f"{nonce}:{n}") for n, job in enumerate(jobs)]

        async def send(argvs: list[list[Any]]) -> list[Any]:
            async with self._client.pipeline(transaction=False) as pipe:
                for argv in argvs:
                    # redis-py types `client` as a client, yet takes (and means) pipelines.
                    await self._enqueue(keys=self._anchor, args=argv, client=cast(Any, pipe))
                return list(await pipe.execute(raise_on_error=False))

        async def send_all() -> None:
            # As `RedisQueueBase._pipelined`: a cluster's pipeline sends EVALSHA alone, so
            # a master that lacks the script is given it and the refused sends go again.
            replies = await send(argvs)
            refused = [at for at, reply in enumerate(replies) if isinstance(reply, NoScriptError)]
            if refused:
                await self._client.script_load(self._enqueue.script)
                replies[refused[0] :] = await send(argvs[refused[0] :])
            for reply in replies:
                if isinstance(reply, Exception):
                    raise reply

        await self._retrying(send_all)

    async def aclose(self) -> None:
        """Close the client's connections (on the loop that opened them)."""
        await self._client.aclose()

    async def _retrying(self, call: Callable[[], Awaitable[T]]) -> T:
        return await retrier(self.retry_budget_s).acall(call)
