"""One cattrs converter: a config mapping structured straight into `Config`.

Every table of the file becomes the class that holds it (`[workers]` a `WorkersConfig`,
`[retry]` the core's `RetryPolicy`, ...). How each key is read is configured here, once:

* a field whose validator is a `Rule` gets its value checked by that rule as given,
  never coerced (`"3"` is not 3);
* other text and flag keys are type-checked (`str`, `bool`);
* the core's classes get their keys' checks here, and their file names where those
  differ (`prune_interval_ms`): the core knows no file;
* keys whose written shape differs from the value kept (arrays, tables of tables,
  `[[cron]]`) get a hook from `conveyor.shell.config.hooks`.

A hook that refuses a value raises `Bad`; cattrs' detailed validation puts the key
on it, and `problems` reads the tree back as `dotted.key: reason`, all at once."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar, cast

import attrs
import cattrs
from cattrs.errors import (
    AttributeValidationNote,
    ClassValidationError,
    ForbiddenExtraKeysError,
    IterableValidationError,
)
from cattrs.gen import make_dict_structure_fn_from_attrs, override

from ...core import FieldError, RequeuePolicy, RetentionPolicy, RetryPolicy, ValidationError
from ...core.cron import CronEntry
from ...core.limits import Cap, QueueLimits, Rate
from .checks import (
    Rule as checks_Rule,
)
from .checks import (
    duration_ms,
    handler_spec,
    integer_at_least,
    optional,
    redis_server,
    retries,
)
from .checks import (
    name as checks_name,
)
from .checks import (
    schedule as checks_schedule,
)
from .checks import (
    timezone as checks_timezone,
)
from .hooks import (
    Bad,
    Hook,
    checked,
    list_of,
    seconds,
    string,
    timeouts,
)
from .hooks import (
    args as hooks_args,
)
from .hooks import (
    flag as hooks_flag,
)
from .hooks import (
    missed as hooks_missed,
)
from .hooks import (
    priority as hooks_priority,
)
from .hooks import (
    weights as hooks_weights,
)
from .model import (
    REDIS_DB,
    REDIS_HOST,
    REDIS_PORT,
    Config,
    DashboardConfig,
    TenancyConfig,
    WorkersConfig,
)
from .rules import redis_url, table

_T = TypeVar("_T")

converter = cattrs.Converter(detailed_validation=True, forbid_extra_keys=True)
#: The keys of each table as the file spells them: attribute name -> key.
_KEYS: dict[type, dict[str, str]] = {}


def _table(
    cls: type[_T],
    order: Sequence[str] = (),
    required: Sequence[str] = (),
    renamed: Mapping[str, str] | None = None,
    omitted: Sequence[str] = (),
    **fields: Hook,
) -> Callable[[Any, Any], _T]:
    """The hook of a TOML table that is a `cls`, its fields read in the file's
    `order` (problems are reported in it), `required` ones even where `cls` has a
    default, `renamed` ones under another key, `omitted` ones not at all, and those
    named in `fields` by their hook. A missing (None) table takes the defaults;
    anything but a table is one problem."""
    renamed = renamed or {}
    attributes = sorted(
        attrs.fields(attrs.resolve_types(cast(Any, cls))),
        key=lambda a: order.index(a.name) if a.name in order else len(order),
    )
    attributes = [a.evolve(default=attrs.NOTHING) if a.name in required else a for a in attributes]
    overrides: dict[str, Any] = {name: override(omit=True) for name in omitted}
    for attribute in (a for a in attributes if a.name not in omitted):
        hook = fields.get(attribute.name)
        if hook is None and isinstance(attribute.validator, checks_Rule):
            hook = checked(attribute.validator.check)
        if hook is not None or attribute.name in renamed:
            overrides[attribute.name] = override(
                rename=renamed.get(attribute.name), struct_hook=hook
            )
    _KEYS[cls] = {a.name: renamed.get(a.name, a.name) for a in attributes if a.name not in omitted}
    structure_fields = make_dict_structure_fn_from_attrs(attributes, cls, converter, **overrides)

    def structure(value: Any, _: Any) -> _T:
        if value is None:
            value = {}
        if not isinstance(value, Mapping):
            raise Bad(f"must be a table, got {type(value).__name__}")
        return structure_fields(value, cls)

    return structure


def _tables(cls: type[_T], what: str) -> Hook:
    """`[[what]]` entries, each a `cls`."""

    def structure(value: Any, _: Any) -> tuple[_T, ...]:
        if not isinstance(value, list | tuple):
            raise Bad(f"must be a list of tables ([[{what}]] entries)")
        entries: tuple[_T, ...] = converter.structure(value, tuple[cls, ...])  # type: ignore[valid-type]
        return entries

    return structure


def queue_limits(value: Any, _: Any) -> tuple[tuple[str, QueueLimits], ...]:
    """`[limits.<queue>]` tables (or `QueueLimits`): problems named under each key."""
    if not isinstance(value, Mapping):
        raise Bad(f"must be a table of queue = limits, got {type(value).__name__}")
    found: list[tuple[str, QueueLimits]] = []
    bad: list[Exception] = []
    for queue, limits in value.items():
        try:
            if not isinstance(limits, QueueLimits):
                limits = converter.structure(limits, QueueLimits)
            found.append((_name(queue, None), limits))
        except (ClassValidationError, Bad) as exc:
            key = str(queue) or '""'  # an empty key, as TOML writes it
            exc.__notes__ = [AttributeValidationNote(key, key, QueueLimits)]
            bad.append(exc)
    if bad:
        raise ClassValidationError("invalid limits", bad, dict)
    return tuple(found)


def _register(cls: type[_T], hook: Callable[[Any, Any], _T]) -> None:
    converter.register_structure_hook(cls, hook)


_non_negative = checked(integer_at_least(0))
_positive = checked(integer_at_least(1))
_duration = checked(duration_ms(0))
_name = checked(checks_name)
_optional_name = checked(optional(checks_name))

_register(str, string)
_register(bool, hooks_flag)
# A table's field hooks are looked up when its hook is made: the tables inside first.
_register(RetryPolicy, _table(RetryPolicy, initial_delay_ms=_duration, max_delay_ms=_duration))
_register(
    RequeuePolicy,
    _table(
        RequeuePolicy,
        requeue_delay_ms=_duration,
        max_requeue_age_ms=_duration,
        max_requeues=_non_negative,
    ),
)
_register(
    RetentionPolicy,
    _table(
        RetentionPolicy,
        order=("completed_ms", "dead_ms", "max_completed", "max_dead", "interval_ms", "batch"),
        renamed={"interval_ms": "prune_interval_ms"},
        completed_ms=_duration,
        remember_pruned_ms=_duration,
        dead_ms=_duration,
        max_completed=_non_negative,
        max_dead=_non_negative,
        interval_ms=_duration,
        batch=_positive,
    ),
)
_register(TenancyConfig, _table(TenancyConfig))
_register(DashboardConfig, _table(DashboardConfig))
_register(
    CronEntry,
    _table(
        CronEntry,
        order=("name", "schedule", "job_type", "timezone", "args"),
        name=_name,
        schedule=checked(checks_schedule),
        job_type=_name,
        timezone=checked(checks_timezone),
        args=hooks_args,
        queue=_name,
        priority=hooks_priority,
        max_retries=checked(retries),
        missed=hooks_missed,
    ),
)
_register(Cap, _table(Cap, max_running=_positive, job_type=_optional_name))
_register(
    Rate,
    _table(
        Rate,
        required=("per_seconds",),
        starts=_positive,
        per_seconds=seconds,
        job_type=_optional_name,
    ),
)
_register(
    QueueLimits,
    _table(
        QueueLimits,
        weights=hooks_weights,
        max_running=checked(optional(integer_at_least(1))),
        caps=_tables(Cap, "limits.<queue>.caps"),
        rates=_tables(Rate, "limits.<queue>.rates"),
    ),
)


# Two tables of the file are not the class of a `Config` field: `[redis]` gives
# `redis_url` and `redis_prefix`, and `[workers]` also holds `retry`, which wins over
# the top-level `[retry]`. Each is checked where it is written, then read into
# `Config`'s fields.
@attrs.frozen
class _RedisTable:
    url: str | None = attrs.field(default=None, validator=checks_Rule(optional(redis_server)))
    host: str = REDIS_HOST
    port: int = attrs.field(default=REDIS_PORT, validator=checks_Rule(integer_at_least(1)))
    db: int = attrs.field(default=REDIS_DB, validator=checks_Rule(integer_at_least(0)))
    #: None: `Config`'s default.
    prefix: str | None = None
    cluster: bool = False
    #: A cluster's seed nodes besides `url`; `url_problems` checks them against `cluster`.
    urls: tuple[str, ...] = ()
    replica_wait: int = attrs.field(default=0, validator=checks_Rule(integer_at_least(0)))
    replica_wait_timeout_ms: int = attrs.field(default=1000, validator=checks_Rule(duration_ms(1)))
    shards: int = attrs.field(default=1, validator=checks_Rule(integer_at_least(1)))
    #: `[redis.queue_shards]`: queue name = shard index; `shard_problems` checks them.
    queue_shards: tuple[tuple[str, int], ...] = ()


@attrs.frozen
class _WorkersTable(WorkersConfig):
    retry: RetryPolicy | None = None


def _redis_server(value: Any, _: Any) -> str:
    """The server `[redis]` names: its url, else its host, port and db."""
    redis: _RedisTable = converter.structure(value, _RedisTable)
    return redis.url or f"redis://{redis.host}:{redis.port}/{redis.db}"


def _redis_options(redis: Mapping[str, Any], config: Config) -> dict[str, Any]:
    """`Config`'s cluster and replica-wait fields from `[redis]` (already checked as
    `_RedisTable`'s keys)."""
    return {
        "redis_cluster": redis.get("cluster", config.redis_cluster),
        "redis_urls": tuple(redis.get("urls", config.redis_urls)),
        "redis_replica_wait": redis.get("replica_wait", config.redis_replica_wait),
        "redis_replica_wait_timeout_ms": redis.get(
            "replica_wait_timeout_ms", config.redis_replica_wait_timeout_ms
        ),
        "redis_shards": redis.get("shards", config.redis_shards),
        "redis_queue_shards": _queue_shards(redis.get("queue_shards"), None)
        if "queue_shards" in redis
        else config.redis_queue_shards,
    }


def _queue_shards(value: Any, _: Any) -> tuple[tuple[str, int], ...]:
    """`[redis.queue_shards]`: queue name = shard index, in name order."""
    if value is None:
        return ()
    if not isinstance(value, Mapping):
        raise Bad(f"must be a table of queue = shard index, got {type(value).__name__}")
    pins = []
    for queue, shard in sorted(value.items()):
        if isinstance(shard, bool) or not isinstance(shard, int) or shard < 0:
            raise Bad(f"{queue}: must be a shard index (0, 1, ...), got {shard!r}")
        pins.append((str(queue), shard))
    return tuple(pins)


def _workers(value: Any, _: Any) -> WorkersConfig:
    workers: _WorkersTable = converter.structure(value, _WorkersTable)
    return WorkersConfig(**{a.name: getattr(workers, a.name) for a in attrs.fields(WorkersConfig)})


_register(
    _RedisTable,
    _table(
        _RedisTable,
        prefix=string,
        urls=list_of(redis_server, "must be a list of Redis URLs (redis://host:port)", empty=False),
        queue_shards=_queue_shards,
    ),
)
_register(
    _WorkersTable,
    _table(
        _WorkersTable,
        # A queue twice would get two pools: twice the workers `count` gives it.
        queues=list_of(checks_name, "must be a non-empty list of queue names", False, True),
    ),
)
_config_fields = _table(
    Config,
    renamed={"redis_url": "redis"},
    omitted=(
        "redis_prefix",
        "redis_cluster",
        "redis_urls",
        "redis_replica_wait",
        "redis_replica_wait_timeout_ms",
        "redis_shards",
        "redis_queue_shards",
    ),
    redis_url=_redis_server,
    workers=_workers,
    handlers=list_of(handler_spec, 'must be a list of "package.module:attr" strings', empty=True),
    timeouts_ms=timeouts,
    cron=_tables(CronEntry, "cron"),
    limits=queue_limits,
)


def _config(value: Any, cls: Any) -> Config:
    config = _config_fields(value, cls)
    retry = table(value, "workers").get("retry")
    return attrs.evolve(
        config,
        redis_url=redis_url(value, config.redis_url),
        redis_prefix=table(value, "redis").get("prefix", config.redis_prefix),
        **_redis_options(table(value, "redis"), config),
        retry=config.retry if retry is None else converter.structure(retry, RetryPolicy),
    )


_register(Config, _config)


def problems(exc: BaseException, path: str = "") -> Iterator[FieldError]:
    """Each leaf of cattrs' exception tree as `FieldError(dotted.key, reason)`."""
    if isinstance(exc, ClassValidationError):
        keys = _KEYS.get(exc.cl, {})
        with_notes, without = exc.group_exceptions()
        for inner, note in with_notes:
            key = keys.get(note.name, note.name)
            yield from problems(inner, f"{path}.{key}" if path else key)
        for inner in without:
            yield from problems(inner, path)
    elif isinstance(exc, IterableValidationError):
        with_index, rest = exc.group_exceptions()
        for inner, index_note in with_index:
            yield from problems(inner, f"{path}[{index_note.index}]")
        for inner in rest:
            yield from problems(inner, path)
    elif isinstance(exc, ForbiddenExtraKeysError):
        known = sorted(_KEYS[exc.cl].values())
        prefix = f"{path}." if path else ""
        for key in sorted(exc.extra_fields):
            yield FieldError(f"{prefix}{key}", f"unknown key; expected one of {known}")
    elif isinstance(exc, Bad):
        yield FieldError(path, exc.reason)
    elif isinstance(exc, ValidationError):  # a class's rule across its fields, at __init__
        for e in exc.errors:  # named as the class's attribute, under the file's key
            yield FieldError(".".join(filter(None, [path, e.field.split(".", 1)[-1]])), e.reason)
    elif isinstance(exc, KeyError):
        yield FieldError(path, "is required")
    else:
        raise exc
