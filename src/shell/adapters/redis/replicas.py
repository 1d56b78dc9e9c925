"""Waiting for replicas: each enqueue and outcome write followed by `WAIT`.

Redis replicates asynchronously, so a write the master acknowledged and then lost in
a crash, before any replica had it, is gone once a replica takes over. With
`ReplicaWait(replicas=N)` each enqueue and outcome write (finish, ack, replace,
reclaim, cancel, revive, a store record) is sent together with `WAIT N timeout` on
one connection to the master that takes it (WAIT counts the writes of its own
connection), and the call returns once N replicas hold it, or the timeout passed.

A wait that timed out does not undo the write (Redis has no such thing): it is told
as a WARNING on the `conveyor.redis` logger and counted in `timeouts`, and that
write is the only kind a failover may still lose. See `docs/redis.md`.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from typing import Any

import attrs
import redis

from .cluster import Client, node_client, refresh

log = logging.getLogger("conveyor.redis")


def _at_least(minimum: int) -> Callable[[Any, attrs.Attribute[int], int], None]:
    def check(_: Any, field: attrs.Attribute[int], value: int) -> None:
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            raise ValueError(f"{field.name} must be an integer >= {minimum}, got {value!r}")

    return check


@attrs.frozen(slots=True)
class ReplicaWait:
    """How many replicas must hold a write before it returns (0: none, the default),
    and how long to wait for them, in ms."""

    replicas: int = attrs.field(default=0, validator=_at_least(0))
    timeout_ms: int = attrs.field(default=1000, validator=_at_least(1))

    @property
    def on(self) -> bool:
        return self.replicas > 0


NO_WAIT = ReplicaWait()


class ReplicaWaiter:
    """Sends writes with a `WAIT` behind them to the master of `key`'s slot."""

    def __init__(self, client: Client, key: str, wait: ReplicaWait) -> None:
        self._client, self._key, self.wait = client, key, wait
        self._lock = threading.Lock()
        #: Writes whose wait ended with fewer replicas than asked.
        self.timeouts = 0

    def send(self, queue_writes: Callable[[Any], None], what: str) -> list[Any]:
        """The replies of the writes `queue_writes(pipe)` queues on a pipeline of one
        connection to the master, sent with the WAIT behind them."""
        node = node_client(self._client, self._key)
        try:
            with node.pipeline(transaction=False) as pipe:
                queue_writes(pipe)
                wait = ("WAIT", self.wait.replicas, self.wait.timeout_ms)
                pipe.execute_command(*wait)  # type: ignore[no-untyped-call]
                *replies, acked = pipe.execute()
        except (redis.ConnectionError, redis.TimeoutError, redis.exceptions.MovedError):
            # The master went away or the slot moved (a failover): learn the slots
            # again, so that the retry goes to the new master.
            with contextlib.suppress(redis.RedisError):
                refresh(self._client)
            raise
        if int(acked) < self.wait.replicas:
            with self._lock:
                self.timeouts += 1
            log.warning(
                "redis %s was acknowledged by %d of %d replicas within %d ms: a failover "
                "before they catch up loses it",
                what,
                int(acked),
                self.wait.replicas,
                self.wait.timeout_ms,
            )
        return replies
