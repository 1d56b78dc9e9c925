"""Schema changes on purpose: `conveyor migrate`, and the check every other process makes.

Starting a process never changes the schema: DDL takes exclusive locks that queue
behind running workers (and every reader then queues behind the DDL), and it needs
rights an application role should not have. `migrate(config)` creates or upgrades
the SQL schema and records its mark; `build()` and every CLI command only read the
mark, once, and refuse to start with one line saying what to run.

The embedded default stays friendly: with `auto_migrate` unset, a SQLite database
(one host, one file, typically the demo or a developer's machine) is migrated when
a process starts; a PostgreSQL one never is. Redis and memory have no schema.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .config import Config, load_config
from .endpoints import backend_url
from .redact import BackendError, guarded, mask_url

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from .ports import JobQueue


class SchemaNotCurrent(BackendError):
    """The SQL database has no Conveyor schema, or one from another version: run
    `conveyor migrate` (or `conveyor.shell.migrate.migrate(config)`) first."""


def auto_migrates(auto_migrate: bool | None, url: str) -> bool:
    """Whether processes migrate the schema at `url` themselves: as `auto_migrate` (the
    config key) says, or, when it is unset, only for SQLite."""
    if auto_migrate is not None:
        return auto_migrate
    return url.startswith("sqlite")


def prepare_schema(queue: JobQueue, *, provider: str, migrates: bool) -> str | None:
    """At process start: migrate when `migrates` (see `auto_migrates`), else read the
    schema mark once. None when the schema is ready (or `provider` has none); else
    the one line to show (build raises it)."""
    if provider != "db":
        return None
    from .adapters.sql.migration import migrate as migrate_engine
    from .adapters.sql.migration import schema_problem

    engine: Engine = queue.engine  # type: ignore[attr-defined]
    if migrates:
        migrate_engine(engine)
        return None
    return schema_problem(engine)


def _engine(config: Config) -> Engine:
    from sqlalchemy.engine import make_url

    from .adapters.sql import make_engine

    parsed = make_url(config.url)
    if parsed.get_backend_name() == "sqlite" and parsed.database:
        # Migrating is what creates a new installation's file, folder included.
        Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
    return make_engine(config.url, pool_size=1)


def _no_schema(config: Config) -> str | None:
    if config.provider == "redis":
        return "Redis needs no migration: its keys are made as jobs arrive"
    if config.provider == "memory":
        return "the memory backend needs no migration: it keeps nothing between runs"
    return None


def migrate(
    config: Mapping[str, Any] | str | Path | Config | None = None,
    *,
    env: Mapping[str, str] | None = None,
) -> str:
    """Create or upgrade the schema of the database `config` names and record this
    version's schema mark; returns one line saying what was done. Run it once per
    deploy, with a role that may create tables; a current schema is left untouched.
    On Redis and memory there is nothing to do, and the line says so."""
    cfg = load_config(config, env=env)
    return guarded(*backend_url(cfg), lambda: migrate_unguarded(cfg))


#: PostgreSQL's SQLSTATE for a right the role lacks.
_INSUFFICIENT_PRIVILEGE = "42501"
_NEEDS_OWNER = (
    "conveyor migrate needs a role that may create tables (the tables' owner); the "
    "processes that enqueue and work need only the grants of docs/sql.md"
)


class MigrationNotPermitted(Exception):
    """The role `conveyor migrate` ran as may not change the schema."""


def migrate_unguarded(cfg: Config) -> str:
    """`migrate` whose failures are the driver's own errors, which may quote the URL's
    password: for a caller that rewrites them (`guarded`, or `reachable`, which also
    tells a server that is down as unreachable)."""
    nothing = _no_schema(cfg)
    if nothing is not None:
        return nothing
    from .adapters.sql.ddl import schema_version
    from .adapters.sql.migration import migrate as migrate_engine

    engine = _engine(cfg)
    try:
        changed = migrate_engine(engine)
        version = schema_version(engine.dialect.name)
    except Exception as exc:
        if getattr(getattr(exc, "orig", None), "sqlstate", None) == _INSUFFICIENT_PRIVILEGE:
            raise MigrationNotPermitted(f"{exc}; {_NEEDS_OWNER}") from None
        raise
    finally:
        engine.dispose()
    where = mask_url(cfg.url)
    if changed:
        return f"migrated {where} to schema version {version}"
    return f"{where} is already at schema version {version}: nothing to do"


def migration_sql(
    config: Mapping[str, Any] | str | Path | Config | None = None,
    *,
    env: Mapping[str, str] | None = None,
) -> str:
    """The SQL `migrate(config)` would apply, for the database dialect `config` names,
    written to create what is missing and upgrade what an earlier version made, mark
    included: for a DBA to apply, or to paste into an Alembic migration. On Redis and
    memory, one line saying there is nothing to apply."""
    cfg = load_config(config, env=env)
    nothing = _no_schema(cfg)
    if nothing is not None:
        return nothing
    from sqlalchemy.engine import make_url

    from .adapters.sql.ddl import ddl_text

    dialect = make_url(cfg.url).get_backend_name()
    return ddl_text("postgresql" if dialect == "postgres" else dialect, if_not_exists=True)
