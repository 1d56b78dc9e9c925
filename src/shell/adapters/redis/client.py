"""The client, the key names and the retry budget every Redis call runs under.

Transient failures (a dropped connection, a timeout, a server still loading its
AOF) are retried here and nowhere else: `connect` builds clients with redis-py's
own retries off, and `retrying` retries within `retry_budget_s` through the shell's
one retry helper (`shell.retrying.Retrier`).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import TypeVar

import attrs
import redis
from redis.backoff import NoBackoff
from redis.exceptions import AuthenticationError, AuthorizationError
from redis.retry import Retry

from ....core import Priority, WriteRetryPolicy
from ...outage import refuses_writes
from ...retrying import Retrier
from .cluster import MAX_CONNECTIONS, Client, node_client

log = logging.getLogger("conveyor.redis")

#: The default for `retry_budget_s`: a quarter of the default 60 s lease, so a claim
#: whose renewal is being retried is still held when the retry lands.
DEFAULT_RETRY_BUDGET_S = 15.0
_FIRST_BACKOFF_S = 0.05
_MAX_BACKOFF_S = 1.0

_T = TypeVar("_T")


def text(value: bytes | str) -> str:
    """A reply's bytes as text (bytes that are not UTF-8 are replaced, never raised)."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


@attrs.frozen(slots=True)
class RedisKeys:
    """The key names (the Lua scripts derive the same ones; `docs/redis.md` lists them).

    `base` is the hash tag: `prefix` wrapped in braces unless it already has some.
    """

    base: str

    @classmethod
    def for_prefix(cls, prefix: str) -> RedisKeys:
        """Keys for `prefix`; `"conveyor"` gives `{conveyor}:...`."""
        return cls(prefix if "{" in prefix else "{" + prefix + "}")

    def job(self, job_id: str) -> str:
        return f"{self.base}:job:{job_id}"

    def ready(self, queue: str, priority: Priority) -> str:
        return f"{self.base}:queue:{queue}:{priority.value}"

    def scheduled(self, queue: str | None = None) -> str:
        return f"{self.base}:scheduled" + (f":{queue}" if queue else "")

    def inflight(self, queue: str | None = None) -> str:
        return f"{self.base}:inflight" + (f":{queue}" if queue else "")

    def ready_at(self, queue: str) -> str:
        return f"{self.base}:ready_at:{queue}"

    def queues(self) -> str:
        return f"{self.base}:queues"

    def waiting(self, queue: str) -> str:
        """A queue's jobs waiting for others (see `workflows`)."""
        return f"{self.base}:waiting:{queue}"

    def edges(self, job_id: str) -> str:
        """The edges `job_id` waits on, in order."""
        return f"{self.base}:edges:{job_id}"

    def workflow(self, workflow_id: str) -> str:
        return f"{self.base}:workflow:{workflow_id}"

    def member(self, job_id: str) -> str:
        """The id of the workflow `job_id` was written in."""
        return f"{self.base}:member:{job_id}"

    def pruned(self, job_id: str) -> str:
        """The tombstone of a record retention pruned: its value is when, in µs."""
        return f"{self.base}:pruned:{job_id}"

    def waiters(self, job_id: str) -> str:
        """The names of the inboxes of the processes waiting for `job_id`'s record
        (see `finishes`)."""
        return f"{self.base}:waiters:{job_id}"

    def inbox(self, name: str) -> str:
        """The list a written record's job id (and the record) is pushed onto for one
        waiting process (see `finishes`)."""
        return f"{self.base}:inbox:{name}"

    def wake(self, queue: str) -> str:
        return f"{self.base}:wake:{queue}"

    def waits_ended(self, queue: str, waiter: str) -> str:
        """The list one process's queue pushes to, to end its own idle waits on `queue`
        (`waiter` names that queue object); beside the wake list, in its slot."""
        return f"{self.base}:wake:{queue}:ended:{waiter}"

    def store(self, job_id: str) -> str:
        return f"{self.base}:store:{job_id}"

    def dead(self) -> str:
        return f"{self.base}:dead"

    def history(self) -> str:
        return f"{self.base}:history"


def connect(url: str) -> redis.Redis:
    """A client for `redis://` or `rediss://` (TLS) URLs, password and DB included:
    `rediss://:secret@host:6380/0`. Responses stay bytes: see `RedisJobQueue`.

    redis-py's own retries are off: the queue and store retry within their budget,
    and two layers of retries would multiply each other's waits past it. The pool
    opens up to `MAX_CONNECTIONS` (redis-py's own cap is 100) unless the URL's
    `max_connections` says otherwise.
    """
    return redis.Redis.from_url(
        url, decode_responses=False, retry=Retry(NoBackoff(), 0), max_connections=MAX_CONNECTIONS
    )


def client_for(client_or_url: Client | str, retry_budget_s: float = 0.0) -> tuple[Client, bool]:
    """The client to use and whether this adapter owns (and closes) it; the retry
    budget is checked here, once for the queue and the store alike."""
    if retry_budget_s < 0:
        raise ValueError("retry_budget_s must be >= 0")
    if isinstance(client_or_url, str):
        return connect(client_or_url), True
    if client_or_url.get_encoder().decode_responses:
        # A body that is not UTF-8 (a pickle, say) would then blow up inside redis-py
        # instead of coming back as a BadClaim.
        raise ValueError("give RedisJobQueue/RedisJobStore a client with decode_responses=False")
    return client_or_url, False


def _retryable(exc: Exception) -> bool:
    # Wrong credentials arrive as a ConnectionError too; waiting will not fix them.
    return not isinstance(exc, (AuthenticationError, AuthorizationError))


#: What a failover of a cluster's master answers for a while: the slot is down or
#: moved (redis-py learns the new master on the next try), or busy migrating.
_FAILING_OVER = (
    redis.exceptions.ClusterDownError,
    redis.exceptions.MovedError,
    redis.exceptions.TryAgainError,
    redis.exceptions.SlotNotCoveredError,
)


def _transient(exc: Exception) -> bool:
    if isinstance(exc, _FAILING_OVER):
        return True
    return isinstance(exc, (redis.ConnectionError, redis.TimeoutError)) and _retryable(exc)


def _told(exc: Exception, failures: int, wait: float) -> None:
    # DEBUG: an outage that outlasts the budget is told once by the worker loop.
    log.debug("redis unavailable (%s); retrying in %.2f s", exc, wait)


@functools.lru_cache(maxsize=16)
def retrier(budget_s: float) -> Retrier:
    """Tries a call again after a dropped connection or a timeout, doubling its waits,
    until `budget_s` has passed since the first try; the last error then propagates."""
    policy = WriteRetryPolicy(
        initial_s=_FIRST_BACKOFF_S,
        max_s=_MAX_BACKOFF_S,
        max_attempts=None,
        give_up_after_s=budget_s,
        last_try_at_deadline=True,
    )
    return Retrier(policy, transient=_transient, on_retry=_told)


def retrying(budget_s: float, call: Callable[[], _T]) -> _T:
    """`call()` under the retry budget `budget_s` (see `retrier`). A script refused for
    want of memory raises `OutOfMemoryError`, as a plain command does, rather than the
    script error naming its hash and line."""
    try:
        return retrier(budget_s).call(call)
    except redis.exceptions.ResponseError as exc:
        if isinstance(exc, redis.exceptions.OutOfMemoryError) or not refuses_writes(exc):
            raise
        raise redis.exceptions.OutOfMemoryError(
            "the Redis server refused a write: it is out of memory (used memory > "
            "'maxmemory', under noeviction); free memory or raise maxmemory"
        ) from exc


def check_server(client: Client, key: str = "") -> list[str]:
    """Warnings about server settings that lose jobs; empty when all is well. On a
    cluster, the server checked is the master of `key`'s slot.

    An evicting `maxmemory-policy` silently deletes job keys under memory
    pressure; without AOF a restart loses every change since the last snapshot.
    """
    try:
        client = node_client(client, key)
        client.ping()
    except (AuthenticationError, AuthorizationError, redis.ResponseError):
        raise  # a wrong password, user or database: this URL cannot be used at all
    except redis.RedisError:
        return []  # the server is away: whoever uses it next tells the outage
    try:
        memory = client.info("memory")
        persistence = client.info("persistence")
    except redis.RedisError as exc:
        return [
            f"could not read the Redis server's settings ({exc}); check by hand that "
            "maxmemory-policy is noeviction and AOF is on"
        ]
    warnings: list[str] = []
    policy = memory.get("maxmemory_policy")
    if policy != "noeviction":
        warnings.append(
            f"maxmemory-policy is {policy!r}, not 'noeviction': under memory pressure the "
            "server deletes keys, and an evicted job key is a lost job"
        )
    if not persistence.get("aof_enabled"):
        try:
            save = text(client.config_get("save").get("save") or b"")
        except redis.RedisError:
            save = None
        if save == "":
            warnings.append("persistence is off (no AOF, no RDB save): a restart loses every job")
        else:
            warnings.append(
                "AOF is off: a crash loses every job changed since the last RDB snapshot; "
                "set appendonly yes (appendfsync everysec or always)"
            )
    return warnings
