"""Configuration: one value that says how to build everything.

From a dict, a TOML file (`conveyor.toml`, or `[tool.conveyor]` in
pyproject.toml) and environment overrides (`CONVEYOR_*`). Every problem names
the key and the reason, all at once.

The model is `Config` and the tables it holds (`conveyor.shell.config.model`), each
field's rule a validator (`config_checks`); one cattrs converter structures a
mapping straight into it (`config_converter`); keys tied to one another, and keys
a provider does not read, are `config_rules`; relative SQLite paths are read from
the file's folder (`config_paths`). This module finds, reads and loads.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from cattrs.errors import ClassValidationError

from ...core import FieldError, ValidationError
from ...core.limits import QueueLimits
from .converter import converter, problems, queue_limits
from .hooks import Bad
from .model import (
    DEFAULT_PROVIDER,
    DEFAULT_URL,
    PROVIDERS,
    STRATEGIES,
    Config,
    DashboardConfig,
    TenancyConfig,
    WorkersConfig,
)
from .paths import anchored, with_default_database
from .rules import tied_problems, warn_unused

__all__ = [
    "DEFAULT_URL",
    "ENV",
    "PROVIDERS",
    "STRATEGIES",
    "Config",
    "DashboardConfig",
    "TenancyConfig",
    "WorkersConfig",
    "apply_env",
    "find_file",
    "load_config",
    "parse_config",
    "parse_limits",
    "read_file",
]

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
    "CONVEYOR_SQLITE_SYNCHRONOUS": ("sqlite_synchronous", str),
    "CONVEYOR_STARTUP_TIMEOUT_MS": ("startup_timeout_ms", int),
    "CONVEYOR_MAX_RESULT_BYTES": ("max_result_bytes", int),
}


def parse_config(raw: Mapping[str, Any]) -> Config:
    """Validate a config mapping; raise `ValidationError` naming every bad key."""
    return _parse(raw, ())


def parse_limits(value: Any) -> tuple[tuple[str, QueueLimits], ...]:
    """`build`'s `limits`, read as the file's `[limits.<queue>]` tables are (a value
    may be a `QueueLimits` already); `ValidationError` naming every bad key."""
    try:
        return queue_limits(value, None)
    except (ClassValidationError, Bad) as exc:
        raise ValidationError(list(problems(exc, "limits"))) from None


def _parse(raw: Mapping[str, Any], env_errors: Sequence[FieldError]) -> Config:
    """`parse_config`, reporting the bad `CONVEYOR_*` variables with the mapping's own
    problems. A key a bad variable names is that variable's to report: once it is
    fixed, it replaces the mapping's value there, whose problems would never matter."""
    overridden = {e.field for e in env_errors}
    errors = list(env_errors)
    config: Config | None = None
    try:
        config = converter.structure(raw, Config)
    except (ClassValidationError, Bad) as exc:
        errors.extend(e for e in problems(exc) if e.field not in overridden)
    errors.extend(e for e in tied_problems(raw) if e.field not in overridden)
    if errors or config is None:
        raise ValidationError(errors)
    warn_unused(raw)
    return config


def _set(raw: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    node = raw
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = value


def apply_env(raw: Mapping[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
    """`raw` with `CONVEYOR_*` environment overrides applied; `ValidationError` names
    every bad variable."""
    out, errors = _overridden(raw, env)
    if errors:
        raise ValidationError(errors)
    return out


def _overridden(
    raw: Mapping[str, Any], env: Mapping[str, str]
) -> tuple[dict[str, Any], list[FieldError]]:
    """`raw` with the good overrides applied, and a problem for each bad one."""
    out: dict[str, Any] = {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in raw.items()}
    errors: list[FieldError] = []
    for name, (key, kind) in ENV.items():
        if name not in env:
            continue
        text = env[name]
        value: Any = text
        if kind is int:
            try:
                value = int(text)
            except ValueError:
                errors.append(FieldError(key, f"{name}={text!r} is not an integer"))
                continue
        elif kind is list:
            value = [part.strip() for part in text.split(",") if part.strip()]
        _set(out, key, value)
    return out, errors


def find_file(start: Path | None = None) -> Path | None:
    """`conveyor.toml`, or a pyproject.toml with `[tool.conveyor]`, in `start` or above."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        candidate = folder / "conveyor.toml"
        if candidate.is_file():
            return candidate
        pyproject = folder / "pyproject.toml"
        if pyproject.is_file() and "conveyor" in _toml(pyproject).get("tool", {}):
            return pyproject
    return None


def _toml(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ValidationError.of(str(path), f"is not valid TOML: {exc}") from None


def read_file(path: Path) -> dict[str, Any]:
    """The raw config table of a TOML file (the `[tool.conveyor]` table of a pyproject)."""
    data = _toml(path)
    if path.name == "pyproject.toml":
        return dict(data.get("tool", {}).get("conveyor", {}))
    return data


#: Worker threads per pool where `workers.count` is not set: two on PostgreSQL, where
#: one thread waits on the server for about a third of a short job (its claim and its
#: outcome write) and a second overlaps those waits; one elsewhere, where a second
#: only contends for the one process (docs/workers.md).
POSTGRESQL_WORKER_COUNT = 2


def _with_backend_defaults(merged: dict[str, Any]) -> dict[str, Any]:
    """`merged` with the defaults that depend on its backend filled in."""
    workers = merged.get("workers", {})
    if not isinstance(workers, Mapping) or "count" in workers:
        return merged
    url = merged.get("url")
    on_postgresql = merged.get("provider", DEFAULT_PROVIDER) == "db" and (
        isinstance(url, str) and url.lower().startswith("postgres")
    )
    if not on_postgresql:
        return merged
    return {**merged, "workers": {**workers, "count": POSTGRESQL_WORKER_COUNT}}


def load_config(
    source: Mapping[str, Any] | str | Path | Config | None = None,
    *,
    env: Mapping[str, str] | None = None,
) -> Config:
    """Build a `Config` from a mapping, a TOML path, or (None) the nearest config file,
    then apply `CONVEYOR_*` environment overrides. A file's relative SQLite paths are
    read from the file's folder (`conveyor.shell.config.paths`)."""
    if isinstance(source, Config):
        return source
    env = os.environ if env is None else env
    path: Path | None = None
    if source is None:
        named = env.get("CONVEYOR_CONFIG")
        path = Path(named) if named else find_file()
        if named and path is not None and not path.is_file():
            raise ValidationError.of("config", f"no such file: {path} (from CONVEYOR_CONFIG)")
        raw: Mapping[str, Any] = read_file(path) if path else {}
    elif isinstance(source, str | Path):
        path = Path(source)
        if not path.is_file():
            raise ValidationError.of("config", f"no such file: {path}")
        raw = read_file(path)
    elif isinstance(source, Mapping):
        raw = source
    else:
        what = type(source).__name__
        raise ValidationError.of(
            "config", f"must be a mapping, a TOML file's path or a Config, got {what}"
        )
    if path is None:
        merged, env_errors = _overridden(raw, env)
    else:
        # A file's relative SQLite paths are read from its folder (see config_paths).
        merged, env_errors = _overridden(anchored(raw, path.parent), env)
        merged = with_default_database(merged, path.parent, DEFAULT_URL, DEFAULT_PROVIDER)
    try:
        return _parse(_with_backend_defaults(merged), env_errors)
    except ValidationError as exc:
        raise ValidationError([_by_variable(e, env) for e in exc.errors]) from None


def _by_variable(error: FieldError, env: Mapping[str, str]) -> FieldError:
    """`error`, saying which `CONVEYOR_*` variable set its key, when one did: the file
    may say otherwise, and that is where one would look first."""
    for name, (key, _) in ENV.items():
        within = error.field == key or error.field.startswith((f"{key}.", f"{key}["))
        if within and name in env and name not in error.reason:
            return FieldError(error.field, f"{error.reason} (set by {name})")
    return error
