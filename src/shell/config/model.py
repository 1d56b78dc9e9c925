"""The configuration's one model: `Config` and the tables it holds.

These classes are what a config file, a mapping or Python code gives: the file is
structured straight into them (`conveyor.shell.config.converter`), and each field's
validator is the rule the file's key is checked by. A default is written once: here,
or, for what the core decides with (the lease, retry and requeue policies,
retention, limits, periodic jobs), in the core's own classes.
"""

from __future__ import annotations

from typing import Any

import attrs

from ...core import (
    DEFAULT_MAX_RESULT_BYTES,
    DEFAULT_STALL_LEASES,
    LeasePolicy,
    RequeuePolicy,
    RetentionPolicy,
    RetryPolicy,
)
from ...core.cron import CronEntry
from ...core.limits import QueueLimits
from ..redact import mask_url
from .checks import (
    Rule,
    credentials,
    database_url,
    duration_ms,
    host_names,
    integer_at_least,
    name,
    one_of,
    optional,
    port,
    prefetch,
    redis_server,
    resolver,
)

PROVIDERS = ("memory", "db", "redis")
#: The `sqlite_synchronous` values (SQLite's own names).
SQLITE_SYNCHRONOUS = ("OFF", "NORMAL", "FULL", "EXTRA")
STRATEGIES = ("shared", "schema")
DEFAULT_PROVIDER = "db"
DEFAULT_URL = "sqlite:///conveyor.db"
#: The Redis server when no URL names one: `[redis]`'s host, port and db.
REDIS_HOST = "127.0.0.1"
REDIS_PORT = 6379
REDIS_DB = 0

#: The lease's defaults are the core's `LeasePolicy`'s.
_LEASE = attrs.fields(LeasePolicy)
_NON_NEGATIVE = Rule(integer_at_least(0))
_POSITIVE = Rule(integer_at_least(1))
_NAME = Rule(name)
_DURATION = Rule(duration_ms(0))
_POSITIVE_DURATION = Rule(duration_ms(1))


def _masked(url: str | None) -> str:
    """A URL field's repr, password masked: configs end up in logs and tracebacks."""
    return repr(mask_url(url))


@attrs.frozen(slots=True)
class WorkersConfig:
    """`count` workers per pool, one pool per queue. `count = 0` on a web node."""

    count: int = attrs.field(default=1, validator=_NON_NEGATIVE)
    queues: tuple[str, ...] = ("default",)
    poll_interval_ms: int = attrs.field(default=1000, validator=_POSITIVE_DURATION)
    promote_interval_ms: int = attrs.field(default=5000, validator=_POSITIVE_DURATION)
    grace_ms: int = attrs.field(default=30_000, validator=_DURATION)
    #: Jobs per claim: "auto" (batches sized to run in about 100 ms, from the jobs'
    #: running time; see `conveyor.core.prefetch`) or a fixed number (1: one at a time).
    prefetch: int | str = attrs.field(default="auto", validator=Rule(prefetch))
    #: How many `async def` handlers each worker runs at once on the event loop.
    async_concurrency: int = attrs.field(default=10, validator=_POSITIVE)
    #: Leases a worker loop may go without progress before the watchdog counts it
    #: stalled (`conveyor.core.watchdog`); 0 turns the watchdog off.
    stall_leases: int = attrs.field(default=DEFAULT_STALL_LEASES, validator=_NON_NEGATIVE)


@attrs.frozen(slots=True)
class TenancyConfig:
    """How tenant jobs are scoped. `resolver` is "table" or "package.module:attr"
    (a `TenantResolver`, or a callable of the engine returning one)."""

    strategy: str = attrs.field(default="shared", validator=Rule(one_of(STRATEGIES)))
    resolver: str = attrs.field(default="table", validator=Rule(resolver))
    table: str = attrs.field(default="tenants", validator=_NAME)
    id_column: str = attrs.field(default="id", validator=_NAME)
    schema_column: str | None = "schema_name"
    url: str | None = attrs.field(default=None, repr=_masked)


def _listed(value: Any) -> Any:
    """A list as a tuple (a frozen config holds no list); anything else as given, for
    its check to name."""
    return tuple(value) if isinstance(value, list) else value


@attrs.frozen(slots=True)
class DashboardConfig:
    """`conveyor dashboard`'s defaults (`[dashboard]`); its flags and
    `CONVEYOR_DASHBOARD_BASIC_AUTH` win over them."""

    host: str = "127.0.0.1"
    port: int = attrs.field(default=8000, validator=Rule(port))
    read_only: bool = False
    #: The Host names it answers to (`*`: any); empty: the loopback names when it
    #: listens on a loopback address, any name otherwise.
    allowed_hosts: tuple[str, ...] = attrs.field(
        default=(), converter=_listed, validator=Rule(host_names)
    )
    #: "USER:PASSWORD" for HTTP basic auth; None: no authentication.
    basic_auth: str | None = attrs.field(
        default=None,
        validator=Rule(optional(credentials)),
        repr=lambda v: "None" if v is None else "***",
    )


@attrs.frozen(slots=True)
class Config:
    """Everything `build` needs."""

    provider: str = attrs.field(default=DEFAULT_PROVIDER, validator=Rule(one_of(PROVIDERS)))
    url: str = attrs.field(default=DEFAULT_URL, validator=Rule(database_url), repr=_masked)
    redis_url: str = attrs.field(
        default=f"redis://{REDIS_HOST}:{REDIS_PORT}/{REDIS_DB}",
        validator=Rule(redis_server),
        repr=_masked,
    )
    redis_prefix: str = "conveyor"
    #: Redis Cluster (`[redis] cluster`): `redis_url` is any node's, `redis_urls`
    #: more seed nodes; see docs/redis.md, "Redis Cluster".
    redis_cluster: bool = False
    redis_urls: tuple[str, ...] = ()
    #: Replicas each enqueue and outcome write waits for (`[redis] replica_wait`,
    #: WAIT), and for how long at most; 0: no wait.
    redis_replica_wait: int = attrs.field(default=0, validator=_NON_NEGATIVE)
    redis_replica_wait_timeout_ms: int = attrs.field(default=1000, validator=_POSITIVE_DURATION)
    #: Shards of the deployment's keys (`[redis] shards`; 1: all under `{prefix}`) and
    #: the queues pinned to one (`[redis.queue_shards]`); see docs/redis.md, "Shards".
    redis_shards: int = attrs.field(default=1, validator=_POSITIVE)
    redis_queue_shards: tuple[tuple[str, int], ...] = ()
    #: How long a claim lives unrenewed (`conveyor.core.LeasePolicy`).
    lease_ms: int = attrs.field(default=_LEASE.lease_ms.default, validator=_POSITIVE_DURATION)
    workers: WorkersConfig = WorkersConfig()
    retry: RetryPolicy = RetryPolicy()
    requeue: RequeuePolicy = RequeuePolicy()
    handlers: tuple[str, ...] = ()
    entry_points: bool = True
    tenancy: TenancyConfig | None = None
    #: Reclaims a started job survives before it is dead-lettered (`LeasePolicy`).
    max_reclaims: int = attrs.field(default=_LEASE.max_reclaims.default, validator=_NON_NEGATIVE)
    pool_size: int = attrs.field(default=10, validator=_POSITIVE)
    #: SQLite's `PRAGMA synchronous` (WAL mode): FULL loses no acknowledged write to
    #: an OS crash or power loss, at an fsync per commit; NORMAL only survives a
    #: process crash; see docs/sql.md.
    sqlite_synchronous: str = attrs.field(
        default="FULL", validator=Rule(one_of(SQLITE_SYNCHRONOUS))
    )
    #: Per-job-type attempt timeouts in ms (`[timeouts_ms]`), as (job type, ms) pairs.
    timeouts_ms: tuple[tuple[str, int], ...] = ()
    #: How long a starting worker waits for an unreachable server before giving up.
    startup_timeout_ms: int = attrs.field(default=30_000, validator=_DURATION)
    retention: RetentionPolicy = RetentionPolicy()
    #: The largest result a handler may return, in bytes of compact JSON
    #: (`conveyor.core.ResultPolicy`): a larger one dead-letters the job.
    max_result_bytes: int = attrs.field(default=DEFAULT_MAX_RESULT_BYTES, validator=_POSITIVE)
    #: Whether starting a process migrates the SQL schema; None: only on SQLite.
    auto_migrate: bool | None = None
    #: Periodic jobs (`[[cron]]` tables); see `conveyor.shell.cron`.
    cron: tuple[CronEntry, ...] = ()
    #: Run each job at enqueue, in the caller's thread (tests; see `conveyor.shell.worker.inline`).
    inline: bool = False
    #: Fair shares, caps and rates per queue (`[limits.<queue>]`), as (queue, limits)
    #: pairs; see `conveyor.core.limits`.
    limits: tuple[tuple[str, QueueLimits], ...] = ()
    #: `conveyor dashboard`'s host, port, read-only mode and basic-auth credentials.
    dashboard: DashboardConfig = DashboardConfig()
