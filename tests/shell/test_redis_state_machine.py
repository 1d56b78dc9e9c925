"""The reusable adapter model check, run on the Redis backend against a real server.

A server that cannot start fails this test; it never skips.
"""

from __future__ import annotations

from collections.abc import Callable

import redis
from conveyor.shell.adapters.redis_queue import RedisJobQueue, RedisJobStore
from conveyor.shell.ports import JobQueue
from conveyor.testing.redis_server import redis_url
from conveyor.testing.state_machine import queue_machine

TEST_DB = 14


def fresh_queue() -> tuple[JobQueue, Callable[[], None], RedisJobStore]:
    """An empty queue on the dedicated test database (flushed first)."""
    client = redis.Redis.from_url(redis_url(TEST_DB))
    client.flushdb()
    return RedisJobQueue(client), client.close, RedisJobStore(client)


TestRedisQueueMachine = queue_machine(fresh_queue).TestCase
