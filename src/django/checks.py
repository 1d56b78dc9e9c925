"""System checks of a `ConveyorBackend` (`manage.py check`).

* `conveyor.E001` (error): a bad `QUEUES` or `OPTIONS` entry (which key, and why),
  a `MODULES` entry or an installed app's `tasks` module that cannot be imported
  among them (a task on a queue `QUEUES` lacks is one): the checks import each, as
  Django imports its apps' modules;
  a `CONFIG` key the worker would refuse, named as `OPTIONS['CONFIG']['lease_ms']`;
* `conveyor.E002` (error): the database for Conveyor's tables cannot be used (an
  alias `DATABASES` lacks, an in-memory SQLite, an engine other than SQLite and
  PostgreSQL);
* `conveyor.E003` (error): `CONFIG` makes workers poll a queue `QUEUES` does not name;
* `conveyor.W001` (warning): Conveyor's tables are missing or from another version:
  run `manage.py conveyor migrate` (with `--backend ALIAS` for any but the first
  backend on Conveyor);
* `conveyor.W002` (warning): the database could not be reached to look at them (an
  outage: no migrate hint).

The tables are a warning, not an error, so that `manage.py migrate` and
`manage.py conveyor migrate` still run on a fresh database.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import create_engine

from ..shell.adapters.sql.migration import schema_problem
from .discovery import app_module_problems, module_problems
from .options import config_problems, conveyor_config

HINT = "see docs/django.md"


def backend_checks(backend: Any) -> list[Any]:
    """The check messages of one backend."""
    from django.core import checks

    where = f"TASKS[{backend.alias!r}]"
    problems = [
        *backend.settings.problems,
        *module_problems(backend.settings.modules),
        *app_module_problems(),
    ]
    found = [checks.Error(f"{where}: {p}", hint=HINT, id="conveyor.E001") for p in problems]
    if found:
        return found
    try:
        problems = backend.database_problems()
        if problems:
            return [checks.Error(f"{where}: {p}", hint=HINT, id="conveyor.E001") for p in problems]
        url = backend.database_url()
    except Exception as exc:  # an unknown alias, an engine Conveyor cannot use, ...
        why = f"{where}: the database for Conveyor's tables: {type(exc).__name__}: {exc}"
        return [checks.Error(why, hint=HINT, id="conveyor.E002")]
    problems = list(config_problems(conveyor_config(backend.settings, url)))
    if problems:
        return [checks.Error(f"{where}: {p}", hint=HINT, id="conveyor.E001") for p in problems]
    workers = backend.settings.config.get("workers") or {}
    polled = workers.get("queues") if isinstance(workers, dict) else None
    for name in polled or ():
        if name not in backend.settings.queues:
            found.append(
                checks.Error(
                    f"{where}: OPTIONS['CONFIG'] has workers poll queue {name!r}, which "
                    f"QUEUES does not name ({', '.join(backend.settings.queues)})",
                    hint="add it to QUEUES, or poll only the queues QUEUES names",
                    id="conveyor.E003",
                )
            )
    problem = _schema_problem(url)
    if problem is not None:
        level, text = problem
        command = backend.migrate_command()
        if level == "W001":
            text = text.replace('"conveyor migrate', f'"{command}')
        # An outage is not fixed by migrating: the hint is the database's to give.
        hint = f"run: python {command}" if level == "W001" else _OUTAGE_HINT
        found.append(checks.Warning(f"{where}: {text}", hint=hint, id=f"conveyor.{level}"))
    return found


_OUTAGE_HINT = (
    "check that the database is up and reachable from here with these settings; "
    "this is a warning so that commands needing no database still run"
)


def _schema_problem(url: str) -> tuple[str, str] | None:
    """("W001", what is wrong with the tables) or ("W002", why they could not be read)."""
    options: dict[str, Any] = {"hide_parameters": True}
    if url.startswith("postgresql"):
        options["connect_args"] = {"connect_timeout": 5}
    try:
        engine = create_engine(url, **options)
    except Exception as exc:
        return "W002", f"could not reach Conveyor's tables: {type(exc).__name__}: {exc}"
    try:
        problem = schema_problem(engine)
    except Exception as exc:
        return "W002", f"could not read Conveyor's tables: {type(exc).__name__}: {exc}"
    finally:
        engine.dispose()
    if problem is None:
        return None
    return "W001", problem
