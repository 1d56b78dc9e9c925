"""Tasks the scenario adds to the example shop through `OPTIONS["MODULES"]`
(`SHOP_TASK_MODULES`): they report what a task sees of the worker around it."""

from __future__ import annotations

from typing import Any

try:
    from django.tasks import task
except ImportError:
    from django_tasks import task

#: The DBAPI connection each run of the probe used, held so that none is closed by
#: being collected: only Django (or nothing) closes them.
_USED: list[Any] = []


@task()
def previous_connection_closed() -> bool | None:
    """Whether the database connection the previous run used has been closed since, as
    Django closes a request's connection (`CONN_MAX_AGE` 0) when the request ends;
    None on the first run."""
    from django.db import connection

    connection.ensure_connection()
    previous = _USED[-1] if _USED else None
    _USED.append(connection.connection)
    return None if previous is None else _closed(previous)


def _closed(raw: Any) -> bool:
    closed = getattr(raw, "closed", None)  # psycopg
    if closed is not None:
        return bool(closed)
    try:  # sqlite3
        raw.execute("SELECT 1")
    except Exception:
        return True
    return False
