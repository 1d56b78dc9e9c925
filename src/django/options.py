"""The backend's `OPTIONS`, read once into frozen data, and the Conveyor config made
from them and Django's settings.

    TASKS = {
        "default": {
            "BACKEND": "conveyor.django.ConveyorBackend",
            "QUEUES": ["default", "emails"],
            "OPTIONS": {"DATABASE": "default", "RETRIES": 2, "TIMEOUT": 60},
        }
    }

* `DATABASE` (default `"default"`): the Django database alias whose database holds
  Conveyor's tables; an enqueue is written through that alias's own connection,
  inside the caller's transaction.
* `URL` (none): a separate database for Conveyor's tables instead (a SQLAlchemy URL);
  enqueues there are not part of the caller's transaction.
* `RETRIES` (default 0): retries of a failed task before it is FAILED.
* `TIMEOUT` (none): seconds one attempt may run before it is a `Timeout` failure.
* `CONFIG` (`{}`): further Conveyor config keys (docs/configuration.md), such as
  `{"workers": {"count": 4}}`.
* `MODULES` (`[]`): modules holding tasks besides each installed app's `tasks`.
"""

from __future__ import annotations

import json
import math
import os
import re
import threading
from collections.abc import Mapping
from typing import Any

import attrs
from sqlalchemy.engine import URL, make_url

from ..core import FieldError, check_name

KNOWN = frozenset({"DATABASE", "URL", "RETRIES", "TIMEOUT", "CONFIG", "MODULES"})
#: Config keys the backend sets itself: the tasks it runs and the queues it polls.
OWNED_CONFIG = frozenset({"provider", "url", "handlers", "entry_points"})
#: The handler mapping every Django worker registers (`conveyor.django.handlers`).
HANDLERS_SPEC = "conveyor.django.handlers:project_tasks"


@attrs.frozen(slots=True)
class BackendOptions:
    """One backend's settings, checked. `problems` lists what is wrong (the key and
    why); a backend with problems refuses to enqueue and `check()` reports them."""

    queues: tuple[str, ...]
    database: str | None = "default"
    url: str | None = None
    retries: int = 0
    timeout: float | None = None
    config: Mapping[str, Any] = attrs.field(factory=dict)
    modules: tuple[str, ...] = ()
    problems: tuple[FieldError, ...] = ()

    @property
    def transactional(self) -> bool:
        """Whether an enqueue joins the caller's transaction (tables in a Django database)."""
        return self.url is None


#: The test runner that gives each test database Conveyor's tables.
TEST_RUNNER = "conveyor.django.testing.ConveyorTestRunner"


def read_options(queues: Any, options: Any) -> BackendOptions:
    """`QUEUES` and `OPTIONS` of a `TASKS` entry, checked; never raises."""
    problems: list[FieldError] = []
    listed = list(queues) if isinstance(queues, set | list | tuple | frozenset) else []
    # Only the names are kept (and sorted): another value is reported, not compared.
    names = tuple(sorted(name for name in listed if isinstance(name, str)))
    if isinstance(queues, str):
        problems.append(FieldError("QUEUES", "must be a list of queue names, not a string"))
    elif not isinstance(queues, set | list | tuple | frozenset):
        kind = type(queues).__name__
        problems.append(FieldError("QUEUES", f"must be a list of queue names, got {kind}"))
    elif not listed:
        problems.append(FieldError("QUEUES", "must name at least one queue"))
    for name in listed:
        problem = check_name("QUEUES", name) if isinstance(name, str) else None
        if not isinstance(name, str):
            problem = FieldError("QUEUES", f"must hold queue names, got {name!r}")
        if problem is not None:
            problems.append(problem)
    if not isinstance(options, Mapping):
        problems.append(FieldError("OPTIONS", f"must be a mapping, got {type(options).__name__}"))
        return BackendOptions(names, problems=tuple(problems))
    for key in sorted(set(options) - KNOWN, key=str):
        problems.append(FieldError(f"OPTIONS[{key!r}]", f"is not an option; use {sorted(KNOWN)}"))
    url = options.get("URL")
    database = options.get("DATABASE", None if url is not None else "default")
    if url is not None and "DATABASE" in options:
        problems.append(FieldError("OPTIONS", "give DATABASE or URL, not both"))
    if url is not None and not isinstance(url, str):
        problems.append(FieldError("OPTIONS['URL']", "must be a database URL string"))
    elif isinstance(url, str) and _url_problem(url) is not None:
        problems.append(FieldError("OPTIONS['URL']", str(_url_problem(url))))
    if database is not None and not isinstance(database, str):
        problems.append(FieldError("OPTIONS['DATABASE']", "must be a database alias"))
    retries = options.get("RETRIES", 0)
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        problems.append(
            FieldError("OPTIONS['RETRIES']", f"must be an integer >= 0, got {retries!r}")
        )
        retries = 0
    timeout = options.get("TIMEOUT")
    if timeout is not None and (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not math.isfinite(timeout)
        or timeout <= 0
    ):
        problems.append(FieldError("OPTIONS['TIMEOUT']", f"must be seconds > 0, got {timeout!r}"))
        timeout = None
    config = options.get("CONFIG", {})
    if not isinstance(config, Mapping):
        problems.append(
            FieldError("OPTIONS['CONFIG']", "must be a mapping of Conveyor config keys")
        )
        config = {}
    for key in sorted(OWNED_CONFIG & set(config)):
        problems.append(FieldError(f"OPTIONS['CONFIG'][{key!r}]", "is set by the backend itself"))
    workers = config.get("workers")
    if workers is not None and not isinstance(workers, Mapping):
        problems.append(FieldError("OPTIONS['CONFIG']['workers']", "must be a mapping"))
        config = {k: v for k, v in config.items() if k != "workers"}
    elif workers is not None and "queues" in workers and _not_queue_names(workers["queues"]):
        # A string is a sequence too: read as one, it names a queue per letter.
        polled = workers["queues"]
        problems.append(
            FieldError(
                "OPTIONS['CONFIG']['workers']['queues']",
                f"must be a list of queue names, got {polled!r}",
            )
        )
    modules = options.get("MODULES", ())
    if not isinstance(modules, list | tuple) or not all(isinstance(m, str) for m in modules):
        problems.append(FieldError("OPTIONS['MODULES']", "must be a list of module names"))
        modules = ()
    return BackendOptions(
        names,
        database=database if isinstance(database, str) else None,
        url=url if isinstance(url, str) else None,
        retries=retries,
        timeout=timeout,
        config=dict(config),
        modules=tuple(modules),
        problems=tuple(problems),
    )


def _not_queue_names(value: Any) -> bool:
    return (
        not isinstance(value, list | tuple)
        or not value
        or not all(isinstance(name, str) for name in value)
    )


def _url_problem(url: str) -> str | None:
    """Why Conveyor's tables cannot live at `url`, or None."""
    try:
        backend = make_url(url).get_backend_name()
    except Exception as exc:
        return f"is not a database URL: {exc}"
    if backend not in ("sqlite", "postgresql", "postgres"):
        return f"names {backend!r}; Conveyor's tables live in SQLite or PostgreSQL"
    return None


#: libpq's connection parameters (PostgreSQL's "Parameter Key Words") that may stand in
#: Django's `OPTIONS`: psycopg takes each as a URL query parameter, so Conveyor's own
#: connections (migrate, the checks, the worker, `get_result`) reach the same database,
#: schema and TLS setup as Django's, which enqueue through.
LIBPQ_PARAMETERS = frozenset(
    {
        "application_name", "channel_binding", "client_encoding", "connect_timeout",
        "fallback_application_name", "gssdelegation", "gssencmode", "gsslib",
        "hostaddr", "keepalives", "keepalives_count", "keepalives_idle",
        "keepalives_interval", "krbsrvname", "load_balance_hosts", "options", "passfile",
        "require_auth", "requiressl", "requirepeer", "service", "ssl_max_protocol_version",
        "ssl_min_protocol_version", "sslcert", "sslcertmode", "sslcompression", "sslcrl",
        "sslcrldir", "sslkey", "sslnegotiation", "sslmode", "sslpassword", "sslrootcert",
        "sslsni", "target_session_attrs", "tcp_user_timeout",
    }
)  # fmt: skip
#: Django's own `OPTIONS` of PostgreSQL: how its connections behave (their isolation
#: level, binding, pool), nothing about which database or schema they reach.
DJANGO_ONLY_OPTIONS = frozenset({"isolation_level", "server_side_binding", "pool"})


#: libpq parameters Django has a `DATABASES` field of its own for.
DJANGO_FIELDS = {"host": "HOST", "port": "PORT", "dbname": "NAME", "user": "USER"}
DJANGO_FIELDS["password"] = "PASSWORD"


def database_options_problems(alias: str, settings: Mapping[str, Any]) -> list[FieldError]:
    """The `OPTIONS` entries of Django's `DATABASES[alias]` that Conveyor's own
    connections cannot carry (PostgreSQL only: SQLite's are about Django's connection)."""
    if not str(settings.get("ENGINE", "")).endswith("postgresql"):
        return []
    problems = []
    for key, value in (settings.get("OPTIONS") or {}).items():
        if key in DJANGO_ONLY_OPTIONS or (key in LIBPQ_PARAMETERS and _scalar(value)):
            continue
        where = f"DATABASES[{alias!r}]['OPTIONS'][{key!r}]"
        if key in DJANGO_FIELDS:
            why = f"give it as DATABASES[{alias!r}][{DJANGO_FIELDS[key]!r}]"
        elif key == "assume_role":
            why = (
                "Conveyor's own connections (migrate, the worker) would not take the role; "
                "give it as libpq's startup option instead: "
                '"options": "-c role=..."'
            )
        elif key in LIBPQ_PARAMETERS:
            why = f"must be a string or a number, got {type(value).__name__}"
        else:
            why = (
                "is not a libpq connection parameter, so Conveyor's own connections "
                "(migrate, the worker, get_result) cannot use it; remove it, or give "
                "Conveyor its own database with TASKS OPTIONS['URL']"
            )
        problems.append(FieldError(where, why))
    return problems


def _scalar(value: Any) -> bool:
    return isinstance(value, str | int | float) and not isinstance(value, bool)


def database_url(
    settings: Mapping[str, Any], *, driver: str = "psycopg", alias: str = "default"
) -> str:
    """The SQLAlchemy URL of one entry of Django's `DATABASES` (SQLite or PostgreSQL),
    the libpq parameters of its `OPTIONS` included; `driver` is the PostgreSQL driver
    module ("psycopg" or "psycopg2"). `ValueError` when it cannot be made, an `OPTIONS`
    entry it cannot carry among the reasons (`database_options_problems`)."""
    engine = str(settings.get("ENGINE", ""))
    name = settings.get("NAME")
    if engine.endswith("sqlite3"):
        text = str(name or "")
        if text in ("", ":memory:") or "mode=memory" in text:
            raise ValueError(
                "Conveyor's tables need a SQLite file: an in-memory database is one per "
                "connection, so no worker would see the jobs (`manage.py test` makes one "
                f'unless TEST_RUNNER = "{TEST_RUNNER}")'
            )
        return f"sqlite:///{text}"
    if engine.endswith("postgresql"):
        problems = database_options_problems(alias, settings)
        if problems:
            raise ValueError("; ".join(str(p) for p in problems))
        host = str(settings.get("HOST") or "") or None
        query = {
            key: str(value)
            for key, value in (settings.get("OPTIONS") or {}).items()
            if key in LIBPQ_PARAMETERS
        }
        if host is not None and host.startswith("/"):
            query, host = {**query, "host": host}, None
        port = settings.get("PORT")
        url = URL.create(
            f"postgresql+{driver}",
            username=settings.get("USER") or None,
            password=settings.get("PASSWORD") or None,
            host=host,
            port=int(port) if port else None,
            database=str(name) if name else None,
            query=query,
        )
        return url.render_as_string(hide_password=False)
    raise ValueError(
        f"Django database engine {engine!r} is not supported for Conveyor's tables; "
        "use SQLite or PostgreSQL, or give OPTIONS['URL']"
    )


def conveyor_config(options: BackendOptions, url: str) -> dict[str, Any]:
    """The Conveyor config of a backend: its database, its queues, the project's tasks
    as handlers, and the `CONFIG` keys on top."""
    config: dict[str, Any] = {
        "auto_migrate": False,  # `manage.py conveyor migrate` makes the tables, on purpose
        **options.config,
        "provider": "db",
        "url": url,
        "handlers": [HANDLERS_SPEC],
        "entry_points": False,
    }
    workers = dict(config.get("workers") or {})
    workers.setdefault("queues", list(options.queues))
    config["workers"] = workers
    return config


_checked_lock = threading.Lock()
_checked: dict[str, tuple[FieldError, ...]] = {}


def config_problems(config: Mapping[str, Any]) -> tuple[FieldError, ...]:
    """What the worker would refuse in the Conveyor config of a backend
    (`conveyor_config`), each named as the key of `OPTIONS['CONFIG']` that holds it.
    Read as the worker reads it, `CONVEYOR_*` variables included; once per config."""
    from ..core import ValidationError
    from ..shell.config import load_config

    # The variables are read too: a config checked under others is checked again.
    variables = {k: v for k, v in os.environ.items() if k.startswith("CONVEYOR_")}
    key = json.dumps([config, variables], sort_keys=True, default=str)
    with _checked_lock:
        found = _checked.get(key)
    if found is None:
        try:
            load_config(config, env=os.environ)
            found = ()
        except ValidationError as exc:
            found = tuple(FieldError(_config_key(e.field), e.reason) for e in exc.errors)
        with _checked_lock:
            _checked[key] = found
    return found


def _config_key(field: str) -> str:
    """`workers.count` or `cron[0].name` (a Conveyor config field) as the key of the
    backend's `OPTIONS` holding it; a field the backend sets, or a variable, as is."""
    parts = re.findall(r"\[\d+\]|[^.\[\]]+", field)
    if not parts or parts[0] in OWNED_CONFIG or parts[0].startswith("CONVEYOR_"):
        return field
    return "OPTIONS['CONFIG']" + "".join(p if p.startswith("[") else f"[{p!r}]" for p in parts)
