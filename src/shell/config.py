"""Configuration: one value that says how to build everything.

From a dict, a TOML file (`conveyor.toml`, or `[tool.conveyor]` in
pyproject.toml) and environment overrides (`CONVEYOR_*`). Every problem names
the key and the reason, all at once.

The file's shape is a set of private attrs classes (`_File`, `_Workers`, ...)
whose field names are the TOML keys. One cattrs converter structures a raw
mapping into them; its hooks for the constrained types (`_NonNegative`,
`_QueueName`, ...) raise `_Bad` with today's wording, and the path of every
failure comes from cattrs' detailed validation, so a problem anywhere reads
`dotted.key: reason`.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, NewType, TypeVar, cast

import attrs
import cattrs
from cattrs.errors import (
    AttributeValidationNote,
    ClassValidationError,
    ForbiddenExtraKeysError,
    IterableValidationError,
)
from cattrs.gen import make_dict_structure_fn

from ..core import (
    FieldError,
    Priority,
    RequeuePolicy,
    RetentionPolicy,
    RetryPolicy,
    ValidationError,
)
from ..core.cron import CronEntry, check_entry, parse_missed
from ..core.limits import Cap, QueueLimits, Rate
from ..core.timeouts import MAX_TIMEOUT_MS
from ..core.validation import MAX_RETRIES_LIMIT, check_name, freeze_args, parse_priority
from .config_paths import anchored, with_default_database
from .config_rules import redis_url, url_problems, warn_unused
from .cron import expression_problem, timezone_problem
from .redact import mask_url

PROVIDERS = ("memory", "db", "redis")
DEFAULT_URL = "sqlite:///conveyor.db"


def _masked(url: str | None) -> str:
    """A URL field's repr, password masked: configs end up in logs and tracebacks."""
    return repr(mask_url(url))


@attrs.frozen(slots=True)
class WorkersConfig:
    """`count` workers per pool, one pool per queue. `count = 0` on a web node."""

    count: int = 1
    queues: tuple[str, ...] = ("default",)
    poll_interval_ms: int = 1000
    promote_interval_ms: int = 5000
    grace_ms: int = 30_000
    #: Jobs per claim: "auto" (batches sized to run in about 100 ms, from the jobs'
    #: running time; see `conveyor.core.prefetch`) or a fixed number (1: one at a time).
    prefetch: int | str = "auto"
    #: How many `async def` handlers each worker runs at once on the event loop.
    async_concurrency: int = 10


@attrs.frozen(slots=True)
class TenancyConfig:
    """How tenant jobs are scoped. `resolver` is "table" or "package.module:attr"
    (a `TenantResolver`, or a callable of the engine returning one)."""

    strategy: str = "shared"
    resolver: str = "table"
    table: str = "tenants"
    id_column: str = "id"
    schema_column: str | None = "schema_name"
    url: str | None = attrs.field(default=None, repr=_masked)


STRATEGIES = ("shared", "schema")


@attrs.frozen(slots=True)
class DashboardConfig:
    """`conveyor dashboard`'s defaults (`[dashboard]`); its flags and
    `CONVEYOR_DASHBOARD_BASIC_AUTH` win over them."""

    host: str = "127.0.0.1"
    port: int = 8000
    read_only: bool = False
    #: "USER:PASSWORD" for HTTP basic auth; None: no authentication.
    basic_auth: str | None = attrs.field(
        default=None, repr=lambda v: "None" if v is None else "***"
    )


@attrs.frozen(slots=True)
class Config:
    """Everything `build` needs."""

    provider: str = "db"
    url: str = attrs.field(default=DEFAULT_URL, repr=_masked)
    redis_url: str = attrs.field(default="redis://127.0.0.1:6379/0", repr=_masked)
    redis_prefix: str = "conveyor"
    lease_ms: int = 60_000
    workers: WorkersConfig = WorkersConfig()
    retry: RetryPolicy = RetryPolicy()
    requeue: RequeuePolicy = RequeuePolicy()
    handlers: tuple[str, ...] = ()
    entry_points: bool = True
    tenancy: TenancyConfig | None = None
    max_reclaims: int = 3
    pool_size: int = 10
    #: Per-job-type attempt timeouts in ms (`[timeouts_ms]`), as (job type, ms) pairs.
    timeouts_ms: tuple[tuple[str, int], ...] = ()
    #: How long a starting worker waits for an unreachable server before giving up.
    startup_timeout_ms: int = 30_000
    retention: RetentionPolicy = RetentionPolicy()
    #: Whether starting a process migrates the SQL schema; None: only on SQLite.
    auto_migrate: bool | None = None
    #: Periodic jobs (`[[cron]]` tables); see `conveyor.shell.cron`.
    cron: tuple[CronEntry, ...] = ()
    #: Run each job at enqueue, in the caller's thread (tests; see `conveyor.shell.inline`).
    inline: bool = False
    #: Fair shares, caps and rates per queue (`[limits.<queue>]`), as (queue, limits)
    #: pairs; see `conveyor.core.limits`.
    limits: tuple[tuple[str, QueueLimits], ...] = ()
    #: `conveyor dashboard`'s host, port, read-only mode and basic-auth credentials.
    dashboard: DashboardConfig = DashboardConfig()


ENV = {
    "CONVEYOR_PROVIDER": ("provider", str),
    "CONVEYOR_URL": ("url", str),
    "CONVEYOR_REDIS_URL": ("redis.url", str),
    "CONVEYOR_LEASE_MS": ("lease_ms", int),
    "CONVEYOR_WORKERS": ("workers.count", int),
    "CONVEYOR_QUEUES": ("workers.queues", list),
    "CONVEYOR_HANDLERS": ("handlers", list),
    "CONVEYOR_MAX_RECLAIMS": ("max_reclaims", int),
    "CONVEYOR_POOL_SIZE": ("pool_size", int),
    "CONVEYOR_STARTUP_TIMEOUT_MS": ("startup_timeout_ms", int),
}


class _Bad(ValueError):
    """A value a structure hook rejects; `reason` is the message after the key."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


# The constrained types of the file. Each has one structure hook below; a field's
# type says which check it gets, so the classes read as the file's schema.
_NonNegative = NewType("_NonNegative", int)
_Positive = NewType("_Positive", int)
_Prefetch = NewType("_Prefetch", object)
_Flag = NewType("_Flag", bool)
_Provider = NewType("_Provider", str)
_Strategy = NewType("_Strategy", str)
_Resolver = NewType("_Resolver", str)
_Name = NewType("_Name", str)
_DatabaseUrl = NewType("_DatabaseUrl", str)
_RedisUrl = NewType("_RedisUrl", str)
_HandlerSpec = NewType("_HandlerSpec", str)
_Queues = NewType("_Queues", tuple[str, ...])
_Handlers = NewType("_Handlers", tuple[str, ...])
_CronExpr = NewType("_CronExpr", str)
_TimeZone = NewType("_TimeZone", str)
_Priority = NewType("_Priority", str)
_Missed = NewType("_Missed", str)
_Retries = NewType("_Retries", int)
_Args = NewType("_Args", dict[str, Any])
_Timeouts = NewType("_Timeouts", tuple[tuple[str, int], ...])
_Port = NewType("_Port", int)
_Credentials = NewType("_Credentials", str)

_KEEP = RetentionPolicy()


@attrs.frozen
class _Retry:
    initial_delay_ms: _NonNegative = _NonNegative(1000)
    max_delay_ms: _NonNegative = _NonNegative(60_000)
    jitter: _Flag = _Flag(True)


@attrs.frozen
class _Workers:
    count: _NonNegative = _NonNegative(1)
    queues: _Queues = _Queues(("default",))
    poll_interval_ms: _Positive = _Positive(1000)
    promote_interval_ms: _Positive = _Positive(5000)
    grace_ms: _NonNegative = _NonNegative(30_000)
    prefetch: _Prefetch = _Prefetch("auto")
    async_concurrency: _Positive = _Positive(10)
    retry: _Retry | None = None


@attrs.frozen
class _Redis:
    url: _RedisUrl | None = None
    host: str = "127.0.0.1"
    port: _Positive = _Positive(6379)
    db: _NonNegative = _NonNegative(0)
    prefix: str = "conveyor"


@attrs.frozen
class _Requeue:
    requeue_delay_ms: _NonNegative = _NonNegative(1000)
    max_requeue_age_ms: _NonNegative = _NonNegative(300_000)
    max_requeues: _NonNegative = _NonNegative(10_000)


@attrs.frozen
class _Retention:
    completed_ms: _NonNegative = _NonNegative(_KEEP.completed_ms)
    dead_ms: _NonNegative = _NonNegative(_KEEP.dead_ms)
    max_completed: _NonNegative = _NonNegative(_KEEP.max_completed)
    max_dead: _NonNegative = _NonNegative(_KEEP.max_dead)
    prune_interval_ms: _NonNegative = _NonNegative(_KEEP.interval_ms)
    batch: _Positive = _Positive(_KEEP.batch)


@attrs.frozen
class _Tenancy:
    strategy: _Strategy = _Strategy("shared")
    resolver: _Resolver = _Resolver("table")
    table: _Name = _Name("tenants")
    id_column: _Name = _Name("id")
    schema_column: str | None = "schema_name"
    url: str | None = None


@attrs.frozen
class _Cron:
    name: _Name
    schedule: _CronExpr
    job_type: _Name
    timezone: _TimeZone = _TimeZone("UTC")
    args: _Args = attrs.field(factory=lambda: _Args({}))
    queue: _Name = _Name("default")
    priority: _Priority = _Priority("normal")
    max_retries: _Retries = _Retries(3)
    missed: _Missed = _Missed("skip")


_CronTables = NewType("_CronTables", tuple[_Cron, ...])
_Seconds = NewType("_Seconds", float)
_Weights = NewType("_Weights", dict[str, float])


@attrs.frozen
class _Cap:
    max_running: _Positive
    job_type: _Name | None = None
    per_partition: _Flag = _Flag(False)


@attrs.frozen
class _Rate:
    starts: _Positive
    per_seconds: _Seconds
    job_type: _Name | None = None
    per_partition: _Flag = _Flag(False)


_CapTables = NewType("_CapTables", tuple[_Cap, ...])
_RateTables = NewType("_RateTables", tuple[_Rate, ...])


@attrs.frozen
class _QueueLimits:
    fair: _Flag = _Flag(False)
    weights: _Weights = attrs.field(factory=lambda: _Weights({}))
    max_running: _Positive | None = None
    caps: _CapTables = _CapTables(())
    rates: _RateTables = _RateTables(())


_LimitTables = NewType("_LimitTables", dict[str, _QueueLimits])


@attrs.frozen
class _Dashboard:
    host: str = "127.0.0.1"
    port: _Port = _Port(8000)
    read_only: _Flag = _Flag(False)
    basic_auth: _Credentials | None = None


@attrs.frozen
class _File:
    provider: _Provider = _Provider("db")
    url: _DatabaseUrl = _DatabaseUrl(DEFAULT_URL)
    redis: _Redis = _Redis()
    lease_ms: _Positive = _Positive(60_000)
    workers: _Workers = _Workers()
    retry: _Retry | None = None
    requeue: _Requeue = _Requeue()
    handlers: _Handlers = _Handlers(())
    entry_points: _Flag = _Flag(True)
    tenancy: _Tenancy | None = None
    max_reclaims: _NonNegative = _NonNegative(3)
    pool_size: _Positive = _Positive(10)
    timeouts_ms: _Timeouts = _Timeouts(())
    startup_timeout_ms: _NonNegative = _NonNegative(30_000)
    retention: _Retention = _Retention()
    auto_migrate: _Flag | None = None
    cron: _CronTables = _CronTables(())
    inline: _Flag = _Flag(False)
    limits: _LimitTables = attrs.field(factory=lambda: _LimitTables({}))
    dashboard: _Dashboard = _Dashboard()


def _integer(minimum: int) -> Callable[[Any, Any], int]:
    def structure(value: Any, _: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise _Bad(f"must be an integer, got {value!r}")
        if value < minimum:
            raise _Bad(f"must be >= {minimum}, got {value}")
        return value

    return structure


def _prefetch(value: Any, kind: Any) -> int | str:
    if value == "auto":
        return "auto"
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _Bad(f'must be "auto" or an integer >= 1, got {value!r}')
    return int(value)


def _integer_up_to(maximum: int) -> Callable[[Any, Any], int]:
    at_least_zero = _integer(0)

    def structure(value: Any, kind: Any) -> int:
        number = at_least_zero(value, kind)
        if number > maximum:
            raise _Bad(f"must be <= {maximum}, got {number}")
        return number

    return structure


def _port(value: Any, kind: Any) -> int:
    number = _integer(1)(value, kind)
    if number > 65535:
        raise _Bad(f"must be from 1 to 65535, got {number}")
    return number


def _credentials(value: Any, _: Any) -> str:
    # The password is not repeated in the message: it may be a real one mistyped.
    if not isinstance(value, str):
        raise _Bad('must be a string "USER:PASSWORD"')
    user, colon, password = value.partition(":")
    if not colon or not user or not password:
        raise _Bad('must be "USER:PASSWORD", both parts non-empty')
    return value


def _flag(value: Any, _: Any) -> bool:
    if not isinstance(value, bool):
        raise _Bad("must be true or false")
    return value


def _string(value: Any, _: Any) -> str:
    if not isinstance(value, str):
        raise _Bad(f"must be a string, got {type(value).__name__}")
    return value


def _one_of(choices: tuple[str, ...]) -> Callable[[Any, Any], str]:
    def structure(value: Any, _: Any) -> str:
        if value not in choices:
            raise _Bad(f"must be one of {', '.join(choices)}, got {value!r}")
        return str(value)

    return structure


def _name(value: Any, _: Any) -> str:
    problem = check_name("", value)
    if problem is not None:
        raise _Bad(problem.reason)
    return str(value)


def _resolver(value: Any, _: Any) -> str:
    if not isinstance(value, str) or (value != "table" and value.count(":") != 1):
        raise _Bad('must be "table" or "package.module:attr"')
    return value


def _database_url(value: Any, _: Any) -> str:
    if not isinstance(value, str) or not value:
        raise _Bad("must be a database URL such as sqlite:///conveyor.db")
    return value


def _redis_url(value: Any, _: Any) -> str:
    if not isinstance(value, str) or not value.startswith(("redis://", "rediss://", "unix://")):
        raise _Bad("must start with redis://, rediss:// or unix://")
    return value


def _handler_spec(value: Any, _: Any) -> str:
    if not isinstance(value, str) or value.count(":") != 1 or not all(value.split(":")):
        raise _Bad(f'must look like "package.module:attr", got {value!r}')
    return value


def _timeouts(value: Any, _: Any) -> tuple[tuple[str, int], ...]:
    """`[timeouts_ms]`: job type = milliseconds, each more than zero."""
    if not isinstance(value, Mapping):
        raise _Bad(f"must be a table of job type = milliseconds, got {type(value).__name__}")
    pairs = []
    for job_type, ms in value.items():
        problem = check_name("", job_type)
        if problem is not None:
            raise _Bad(f"{job_type!r} is not a job type: {problem.reason}")
        if isinstance(ms, bool) or not isinstance(ms, int) or not 0 < ms <= MAX_TIMEOUT_MS:
            raise _Bad(f"{job_type}: must be milliseconds from 1 to {MAX_TIMEOUT_MS}, got {ms!r}")
        pairs.append((job_type, ms))
    return tuple(pairs)


def _list_of(item: Any, reason: str, *, empty: bool) -> Callable[[Any, Any], tuple[str, ...]]:
    """A TOML array of `item`s: the array's own shape is checked here, each element
    by `item`'s hook, so a bad element is named by its index."""

    def structure(value: Any, _: Any) -> tuple[str, ...]:
        if (
            isinstance(value, str)
            or not isinstance(value, list | tuple)
            or (not value and not empty)
        ):
            raise _Bad(reason)
        items: tuple[str, ...] = _converter.structure(value, tuple[item, ...])
        return items

    return structure


def _checked(problem: Callable[[Any], str | None]) -> Callable[[Any, Any], Any]:
    """A hook from a function that says why a value is wrong (None: it is right)."""

    def structure(value: Any, _: Any) -> Any:
        reason = problem(value)
        if reason is not None:
            raise _Bad(reason)
        return value

    return structure


def _priority(value: Any, _: Any) -> str:
    parsed = parse_priority(value)
    if not isinstance(parsed, Priority):
        raise _Bad(parsed.reason)
    return parsed.value


def _missed(value: Any, _: Any) -> str:
    parsed = parse_missed(value)
    if isinstance(parsed, FieldError):
        raise _Bad(parsed.reason)
    return parsed.value


def _args(value: Any, _: Any) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise _Bad(f"must be a table, got {type(value).__name__}")
    frozen = freeze_args(value)
    if isinstance(frozen, FieldError):
        raise _Bad(frozen.reason)
    return dict(value)


def _cron_tables(value: Any, _: Any) -> tuple[_Cron, ...]:
    if not isinstance(value, list | tuple):
        raise _Bad("must be a list of tables ([[cron]] entries)")
    entries: tuple[_Cron, ...] = _converter.structure(value, tuple[_Cron, ...])
    return entries


def _seconds(value: Any, _: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 1e9:
        raise _Bad(f"must be a number of seconds > 0, got {value!r}")
    return float(value)


def _weights(value: Any, _: Any) -> dict[str, float]:
    if not isinstance(value, Mapping):
        raise _Bad(f"must be a table of partition = weight, got {type(value).__name__}")
    for key, weight in value.items():
        if isinstance(weight, bool) or not isinstance(weight, int | float) or not 0 < weight < 1e9:
            raise _Bad(f"{key}: must be a number > 0, got {weight!r}")
    return {str(key): float(weight) for key, weight in value.items()}


def _tables(cls: type[_T], what: str) -> Callable[[Any, Any], tuple[_T, ...]]:
    def structure(value: Any, _: Any) -> tuple[_T, ...]:
        if not isinstance(value, list | tuple):
            raise _Bad(f"must be a list of tables ([[{what}]] entries)")
        entries: tuple[_T, ...] = _converter.structure(value, tuple[cls, ...])  # type: ignore[valid-type]
        return entries

    return structure


def _limit_tables(value: Any, _: Any) -> dict[str, _QueueLimits]:
    """`[limits.<queue>]` tables: each queue's problems are named under its key."""
    if not isinstance(value, Mapping):
        raise _Bad(f"must be a table of queue = limits, got {type(value).__name__}")
    found: dict[str, _QueueLimits] = {}
    problems: list[Exception] = []
    for queue, table in value.items():
        try:
            found[_name(queue, None)] = _converter.structure(table, _QueueLimits)
        except (ClassValidationError, _Bad) as exc:
            exc.__notes__ = [AttributeValidationNote(str(queue), str(queue), _QueueLimits)]
            problems.append(exc)
    if problems:
        raise ClassValidationError("invalid limits", problems, _QueueLimits)
    return found


def _queue_limits(table: _QueueLimits) -> QueueLimits:
    caps = [Cap(c.max_running, c.job_type, c.per_partition) for c in table.caps]
    rates = [Rate(r.starts, r.per_seconds, r.job_type, r.per_partition) for r in table.rates]
    return QueueLimits(
        fair=table.fair,
        weights=table.weights,
        max_running=table.max_running,
        caps=caps,
        rates=rates,
    )


_T = TypeVar("_T")


def _table_of(cls: type[_T]) -> Callable[[Any, Any], _T]:
    """A TOML table as `cls`: a missing (None) table takes the defaults, and anything
    but a table is one problem rather than a cattrs error about `.items()`."""
    fields = make_dict_structure_fn(cls, _converter, _cattrs_forbid_extra_keys=True)

    def structure(value: Any, _: Any) -> _T:
        if value is None:
            value = {}
        if not isinstance(value, Mapping):
            raise _Bad(f"must be a table, got {type(value).__name__}")
        return fields(value, cls)

    return structure


_converter = cattrs.Converter(detailed_validation=True, forbid_extra_keys=True)
for _type, _hook in (
    (_NonNegative, _integer(0)),
    (_Positive, _integer(1)),
    (_Prefetch, _prefetch),
    (_Flag, _flag),
    (str, _string),
    (_Provider, _one_of(PROVIDERS)),
    (_Strategy, _one_of(STRATEGIES)),
    (_Resolver, _resolver),
    (_Name, _name),
    (_DatabaseUrl, _database_url),
    (_RedisUrl, _redis_url),
    (_HandlerSpec, _handler_spec),
    (_CronExpr, _checked(expression_problem)),
    (_TimeZone, _checked(timezone_problem)),
    (_Priority, _priority),
    (_Missed, _missed),
    (_Retries, _integer_up_to(MAX_RETRIES_LIMIT)),
    (_Args, _args),
    (_CronTables, _cron_tables),
    (_Timeouts, _timeouts),
    (_Seconds, _seconds),
    (_Weights, _weights),
    (_LimitTables, _limit_tables),
    (_Port, _port),
    (_Credentials, _credentials),
    (_Queues, _list_of(_Name, "must be a non-empty list of queue names", empty=False)),
    (
        _Handlers,
        _list_of(_HandlerSpec, 'must be a list of "package.module:attr" strings', empty=True),
    ),
):
    _converter.register_structure_hook(_type, _hook)
for _cls in (_Retry, _Workers, _Redis, _Requeue, _Retention, _Tenancy, _Cron, _Dashboard, _File):
    _converter.register_structure_hook(_cls, _table_of(_cls))
# Each table's field hooks are looked up when its hook is made: lists first.
_converter.register_structure_hook(_CapTables, _tables(_Cap, "limits.<queue>.caps"))
_converter.register_structure_hook(_RateTables, _tables(_Rate, "limits.<queue>.rates"))
for _limit_cls in (_Cap, _Rate, _QueueLimits):
    _converter.register_structure_hook(_limit_cls, _table_of(_limit_cls))


def _problems(exc: BaseException, path: str) -> Iterator[FieldError]:
    """Each leaf of cattrs' exception tree as `FieldError(dotted.key, reason)`."""
    if isinstance(exc, ClassValidationError):
        with_notes, without = exc.group_exceptions()
        for inner, note in with_notes:
            yield from _problems(inner, f"{path}.{note.name}" if path else note.name)
        for inner in without:
            yield from _problems(inner, path)
    elif isinstance(exc, IterableValidationError):
        with_index, rest = exc.group_exceptions()
        for inner, index_note in with_index:
            yield from _problems(inner, f"{path}[{index_note.index}]")
        for inner in rest:
            yield from _problems(inner, path)
    elif isinstance(exc, ForbiddenExtraKeysError):
        known = sorted(field.name for field in attrs.fields(exc.cl))
        prefix = f"{path}." if path else ""
        for key in sorted(exc.extra_fields):
            yield FieldError(f"{prefix}{key}", f"unknown key; expected one of {known}")
    elif isinstance(exc, _Bad):
        yield FieldError(path, exc.reason)
    elif isinstance(exc, KeyError):
        yield FieldError(path, "is required")
    else:
        raise exc


def _across(raw: Mapping[str, Any]) -> Iterator[FieldError]:
    """Rules that tie one key to another. A hook sees one value, not its neighbours,
    and checking the raw mapping lets these join the per-key problems in one report
    even when some other key is wrong."""
    provider, url = raw.get("provider", "db"), raw.get("url", DEFAULT_URL)
    if isinstance(url, str) and url and "://" not in url and provider == "db":
        # A bare path is the usual slip: say what it should have been.
        yield FieldError("url", f"{url!r} is not a database URL; a SQLite file is sqlite:///{url}")
    yield from url_problems(raw)
    tenancy = raw.get("tenancy")
    if isinstance(tenancy, Mapping) and tenancy.get("url") is None and provider != "db":
        yield FieldError(
            "tenancy.url", "is required unless provider is 'db' (then the job database is used)"
        )
    # Slot ids derive from the entry's name: two entries of one name would share slots.
    entries = raw.get("cron")
    seen: dict[object, int] = {}
    for n, entry in enumerate(entries if isinstance(entries, list | tuple) else ()):
        name = entry.get("name") if isinstance(entry, Mapping) else None
        if isinstance(name, str) and name in seen:
            yield FieldError(f"cron[{n}].name", f"{name!r} is already cron[{seen[name]}]'s name")
        seen.setdefault(name, n)


def parse_config(raw: Mapping[str, Any]) -> Config:
    """Validate a config mapping; raise `ValidationError` naming every bad key."""
    errors: list[FieldError] = []
    file: _File | None = None
    try:
        file = _converter.structure(raw, _File)
    except (ClassValidationError, _Bad) as exc:
        errors.extend(_problems(exc, ""))
    errors.extend(_across(raw))
    if errors or file is None:
        raise ValidationError(errors)
    warn_unused(raw)
    redis = file.redis
    retry = file.workers.retry or file.retry or _Retry()
    workers = file.workers
    keep = file.retention
    tenancy = file.tenancy
    return Config(
        provider=file.provider,
        url=file.url,
        redis_url=redis_url(raw, redis.url, f"redis://{redis.host}:{redis.port}/{redis.db}"),
        redis_prefix=redis.prefix,
        lease_ms=file.lease_ms,
        workers=WorkersConfig(
            count=workers.count,
            queues=workers.queues,
            poll_interval_ms=workers.poll_interval_ms,
            promote_interval_ms=workers.promote_interval_ms,
            grace_ms=workers.grace_ms,
            prefetch=cast(int | str, workers.prefetch),
            async_concurrency=workers.async_concurrency,
        ),
        retry=RetryPolicy(retry.initial_delay_ms, retry.max_delay_ms, retry.jitter),
        requeue=RequeuePolicy(
            file.requeue.requeue_delay_ms,
            file.requeue.max_requeue_age_ms,
            file.requeue.max_requeues,
        ),
        handlers=file.handlers,
        entry_points=file.entry_points,
        tenancy=None if tenancy is None else TenancyConfig(**attrs.asdict(tenancy)),
        max_reclaims=file.max_reclaims,
        pool_size=file.pool_size,
        timeouts_ms=file.timeouts_ms,
        startup_timeout_ms=file.startup_timeout_ms,
        retention=RetentionPolicy(
            completed_ms=keep.completed_ms,
            dead_ms=keep.dead_ms,
            max_completed=keep.max_completed,
            max_dead=keep.max_dead,
            interval_ms=keep.prune_interval_ms,
            batch=keep.batch,
        ),
        auto_migrate=file.auto_migrate,
        cron=tuple(check_entry(CronEntry(**attrs.asdict(entry)))[0] for entry in file.cron),
        inline=file.inline,
        limits=tuple((queue, _queue_limits(table)) for queue, table in file.limits.items()),
        dashboard=DashboardConfig(**attrs.asdict(file.dashboard)),
    )


def _set(raw: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    node = raw
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = value


def apply_env(raw: Mapping[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
    """`raw` with `CONVEYOR_*` environment overrides applied."""
    out: dict[str, Any] = {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in raw.items()}
    for name, (key, kind) in ENV.items():
        if name not in env:
            continue
        text = env[name]
        value: Any = text
        if kind is int:
            try:
                value = int(text)
            except ValueError:
                raise ValidationError.of(key, f"{name}={text!r} is not an integer") from None
        elif kind is list:
            value = [part.strip() for part in text.split(",") if part.strip()]
        _set(out, key, value)
    return out


def find_file(start: Path | None = None) -> Path | None:
    """`conveyor.toml`, or a pyproject.toml with `[tool.conveyor]`, in `start` or above."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        candidate = folder / "conveyor.toml"
        if candidate.is_file():
            return candidate
        pyproject = folder / "pyproject.toml"
        if pyproject.is_file() and "conveyor" in tomllib.loads(pyproject.read_text()).get(
            "tool", {}
        ):
            return pyproject
    return None


def read_file(path: Path) -> dict[str, Any]:
    """The raw config table of a TOML file (the `[tool.conveyor]` table of a pyproject)."""
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ValidationError.of(str(path), f"is not valid TOML: {exc}") from None
    if path.name == "pyproject.toml":
        return dict(data.get("tool", {}).get("conveyor", {}))
    return data


def load_config(
    source: Mapping[str, Any] | str | Path | Config | None = None,
    *,
    env: Mapping[str, str] | None = None,
) -> Config:
    """Build a `Config` from a mapping, a TOML path, or (None) the nearest config file,
    then apply `CONVEYOR_*` environment overrides. A file's relative SQLite paths are
    read from the file's folder (`conveyor.shell.config_paths`)."""
    if isinstance(source, Config):
        return source
    env = os.environ if env is None else env
    path: Path | None = None
    if source is None:
        found = env.get("CONVEYOR_CONFIG")
        path = Path(found) if found else find_file()
        raw: Mapping[str, Any] = read_file(path) if path else {}
    elif isinstance(source, str | Path):
        path = Path(source)
        if not path.is_file():
            raise ValidationError.of("config", f"no such file: {path}")
        raw = read_file(path)
    else:
        raw = source
    if path is None:
        return parse_config(apply_env(raw, env))
    # A file's relative SQLite paths are read from its folder (see config_paths).
    merged = apply_env(anchored(raw, path.parent), env)
    return parse_config(with_default_database(merged, path.parent, DEFAULT_URL))
