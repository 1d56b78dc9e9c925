"""Configuration: one value that says how to build everything.

From a dict, a TOML file (`conveyor.toml`, or `[tool.conveyor]` in
pyproject.toml) and environment overrides (`CONVEYOR_*`). Every problem names
the key and the reason, all at once.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from ..core import FieldError, RequeuePolicy, RetentionPolicy, RetryPolicy, ValidationError
from ..core.validation import check_name
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
    prefetch: int = 1


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
    #: How long a starting worker waits for an unreachable server before giving up.
    startup_timeout_ms: int = 30_000
    retention: RetentionPolicy = RetentionPolicy()
    #: Whether starting a process migrates the SQL schema; None: only on SQLite.
    auto_migrate: bool | None = None


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


def _int(errors: list[FieldError], key: str, value: Any, minimum: int = 0) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        errors.append(FieldError(key, f"must be an integer, got {value!r}"))
        return None
    if value < minimum:
        errors.append(FieldError(key, f"must be >= {minimum}, got {value}"))
        return None
    return value


def _table(errors: list[FieldError], key: str, value: Any) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        errors.append(FieldError(key, f"must be a table, got {type(value).__name__}"))
        return {}
    return value


def _unknown(
    errors: list[FieldError], prefix: str, table: Mapping[str, Any], known: set[str]
) -> None:
    for key in table:
        if key not in known:
            errors.append(
                FieldError(f"{prefix}{key}", f"unknown key; expected one of {sorted(known)}")
            )


def parse_config(raw: Mapping[str, Any]) -> Config:
    """Validate a config mapping; raise `ValidationError` naming every bad key."""
    errors: list[FieldError] = []
    _unknown(
        errors,
        "",
        raw,
        {
            "provider",
            "url",
            "redis",
            "lease_ms",
            "workers",
            "retry",
            "requeue",
            "handlers",
            "entry_points",
            "tenancy",
            "max_reclaims",
            "pool_size",
            "startup_timeout_ms",
            "retention",
            "auto_migrate",
        },
    )
    provider = raw.get("provider", "db")
    if provider not in PROVIDERS:
        errors.append(
            FieldError("provider", f"must be one of {', '.join(PROVIDERS)}, got {provider!r}")
        )
    url = raw.get("url", DEFAULT_URL)
    if not isinstance(url, str) or not url:
        errors.append(FieldError("url", "must be a database URL such as sqlite:///conveyor.db"))
    elif "://" not in url and provider == "db":
        # A bare path is the usual slip: say what it should have been.
        errors.append(
            FieldError("url", f"{url!r} is not a database URL; a SQLite file is sqlite:///{url}")
        )
    redis = _table(errors, "redis", raw.get("redis"))
    _unknown(errors, "redis.", redis, {"url", "host", "port", "db", "prefix"})
    redis_url = redis.get("url")
    if redis_url is None:
        host, port, db = redis.get("host", "127.0.0.1"), redis.get("port", 6379), redis.get("db", 0)
        _int(errors, "redis.port", port, 1)
        _int(errors, "redis.db", db)
        redis_url = f"redis://{host}:{port}/{db}"
    elif not isinstance(redis_url, str) or not redis_url.startswith(
        ("redis://", "rediss://", "unix://")
    ):
        errors.append(FieldError("redis.url", "must start with redis://, rediss:// or unix://"))
    prefix = redis.get("prefix", "conveyor")
    lease = _int(errors, "lease_ms", raw.get("lease_ms", 60_000), 1)
    max_reclaims = _int(errors, "max_reclaims", raw.get("max_reclaims", 3))
    pool_size = _int(errors, "pool_size", raw.get("pool_size", 10), 1)
    startup_timeout = _int(errors, "startup_timeout_ms", raw.get("startup_timeout_ms", 30_000))

    workers = _table(errors, "workers", raw.get("workers"))
    _unknown(
        errors,
        "workers.",
        workers,
        {
            "count",
            "queues",
            "poll_interval_ms",
            "promote_interval_ms",
            "grace_ms",
            "retry",
            "prefetch",
        },
    )
    count = _int(errors, "workers.count", workers.get("count", 1))
    queues = workers.get("queues", ["default"])
    if isinstance(queues, str) or not isinstance(queues, list | tuple) or not queues:
        errors.append(FieldError("workers.queues", "must be a non-empty list of queue names"))
        queues = ["default"]
    for i, name in enumerate(queues):
        problem = check_name(f"workers.queues[{i}]", name)
        if problem is not None:
            errors.append(problem)
    poll = _int(errors, "workers.poll_interval_ms", workers.get("poll_interval_ms", 1000), 1)
    promote = _int(
        errors, "workers.promote_interval_ms", workers.get("promote_interval_ms", 5000), 1
    )
    grace = _int(errors, "workers.grace_ms", workers.get("grace_ms", 30_000))
    prefetch = _int(errors, "workers.prefetch", workers.get("prefetch", 1), 1)

    retry_raw = _table(errors, "workers.retry", workers.get("retry", raw.get("retry")))
    _unknown(errors, "workers.retry.", retry_raw, {"initial_delay_ms", "max_delay_ms", "jitter"})
    initial = _int(
        errors, "workers.retry.initial_delay_ms", retry_raw.get("initial_delay_ms", 1000)
    )
    max_delay = _int(errors, "workers.retry.max_delay_ms", retry_raw.get("max_delay_ms", 60_000))
    jitter = retry_raw.get("jitter", True)
    if not isinstance(jitter, bool):
        errors.append(FieldError("workers.retry.jitter", "must be true or false"))

    requeue_raw = _table(errors, "requeue", raw.get("requeue"))
    _unknown(
        errors, "requeue.", requeue_raw, {"requeue_delay_ms", "max_requeue_age_ms", "max_requeues"}
    )
    rq_delay = _int(errors, "requeue.requeue_delay_ms", requeue_raw.get("requeue_delay_ms", 1000))
    rq_age = _int(
        errors, "requeue.max_requeue_age_ms", requeue_raw.get("max_requeue_age_ms", 300_000)
    )
    rq_max = _int(errors, "requeue.max_requeues", requeue_raw.get("max_requeues", 10_000))

    handlers = raw.get("handlers", [])
    if isinstance(handlers, str) or not isinstance(handlers, list | tuple):
        errors.append(FieldError("handlers", 'must be a list of "package.module:attr" strings'))
        handlers = []
    for i, spec in enumerate(handlers):
        if not isinstance(spec, str) or spec.count(":") != 1 or not all(spec.split(":")):
            errors.append(
                FieldError(f"handlers[{i}]", f'must look like "package.module:attr", got {spec!r}')
            )
    auto_migrate = raw.get("auto_migrate")
    if auto_migrate is not None and not isinstance(auto_migrate, bool):
        errors.append(FieldError("auto_migrate", "must be true or false"))
    keep = RetentionPolicy()
    retention_raw = _table(errors, "retention", raw.get("retention"))
    _unknown(
        errors,
        "retention.",
        retention_raw,
        {"completed_ms", "dead_ms", "max_completed", "max_dead", "prune_interval_ms", "batch"},
    )
    retention_values = {
        field: _int(errors, f"retention.{key}", retention_raw.get(key, getattr(keep, field)), low)
        for key, field, low in (
            ("completed_ms", "completed_ms", 0),
            ("dead_ms", "dead_ms", 0),
            ("max_completed", "max_completed", 0),
            ("max_dead", "max_dead", 0),
            ("prune_interval_ms", "interval_ms", 0),
            ("batch", "batch", 1),
        )
    }
    entry_points = raw.get("entry_points", True)
    if not isinstance(entry_points, bool):
        errors.append(FieldError("entry_points", "must be true or false"))

    tenancy = None
    if raw.get("tenancy") is not None:
        t = _table(errors, "tenancy", raw.get("tenancy"))
        _unknown(
            errors,
            "tenancy.",
            t,
            {"strategy", "resolver", "table", "id_column", "schema_column", "url"},
        )
        strategy = t.get("strategy", "shared")
        if strategy not in STRATEGIES:
            errors.append(
                FieldError(
                    "tenancy.strategy", f"must be one of {', '.join(STRATEGIES)}, got {strategy!r}"
                )
            )
        resolver = t.get("resolver", "table")
        if not isinstance(resolver, str) or (resolver != "table" and resolver.count(":") != 1):
            errors.append(
                FieldError("tenancy.resolver", 'must be "table" or "package.module:attr"')
            )
        for key in ("table", "id_column"):
            if (
                problem := check_name(
                    f"tenancy.{key}", t.get(key, "tenants" if key == "table" else "id")
                )
            ) is not None:
                errors.append(problem)
        tenancy = TenancyConfig(
            strategy=str(strategy),
            resolver=str(resolver),
            table=str(t.get("table", "tenants")),
            id_column=str(t.get("id_column", "id")),
            schema_column=t.get("schema_column", "schema_name"),
            url=t.get("url"),
        )
        if tenancy.url is None and provider != "db":
            errors.append(
                FieldError(
                    "tenancy.url",
                    "is required unless provider is 'db' (then the job database is used)",
                )
            )

    if errors:
        raise ValidationError(errors)
    assert None not in (
        lease,
        count,
        poll,
        promote,
        grace,
        initial,
        max_delay,
        rq_delay,
        rq_age,
        rq_max,
        max_reclaims,
        pool_size,
        startup_timeout,
    )
    return Config(
        provider=provider,
        url=url,
        redis_url=str(redis_url),
        redis_prefix=str(prefix),
        lease_ms=lease,  # type: ignore[arg-type]
        workers=WorkersConfig(
            count=count,  # type: ignore[arg-type]
            queues=tuple(queues),
            poll_interval_ms=poll,  # type: ignore[arg-type]
            promote_interval_ms=promote,  # type: ignore[arg-type]
            grace_ms=grace,  # type: ignore[arg-type]
            prefetch=prefetch,  # type: ignore[arg-type]
        ),
        retry=RetryPolicy(initial, max_delay, jitter),  # type: ignore[arg-type]
        requeue=RequeuePolicy(rq_delay, rq_age, rq_max),  # type: ignore[arg-type]
        handlers=tuple(handlers),
        entry_points=entry_points,
        tenancy=tenancy,
        max_reclaims=max_reclaims,  # type: ignore[arg-type]
        pool_size=pool_size,  # type: ignore[arg-type]
        startup_timeout_ms=startup_timeout,  # type: ignore[arg-type]
        retention=RetentionPolicy(**retention_values),  # type: ignore[arg-type]
        auto_migrate=auto_migrate,
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
    then apply `CONVEYOR_*` environment overrides."""
    if isinstance(source, Config):
        return source
    env = os.environ if env is None else env
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
    return parse_config(apply_env(raw, env))
