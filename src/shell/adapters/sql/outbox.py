"""Writes in the caller's transaction (the outbox): what is checked before one, and how
its driver errors are told.

`enqueue_in_tx` and its siblings write with the caller's connection, so the job commits
or rolls back with the caller's own change. That holds only for a `Connection` with a
transaction the database itself has begun (`check_outbox`), and a driver error of such a
write must not carry the job's args (`parameters_hidden`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from sqlalchemy import Connection
from sqlalchemy.exc import StatementError

from ....core import ValidationError


def check_outbox(conn: Any) -> None:
    """Refuse anything but a Connection with a transaction begun: the job would
    otherwise commit apart from the caller's change (the dual-write window)."""
    if not isinstance(conn, Connection):
        raise ValidationError.of(
            "conn",
            f"must be a sqlalchemy Connection with a transaction begun, got "
            f"{type(conn).__name__}{_HOW.get(type(conn).__name__, _HOW['Engine'])}",
        )
    if not conn.in_transaction():
        raise ValidationError.of(
            "conn",
            "has no transaction begun; use `with engine.begin() as conn` or "
            "conn.begin(), so the job commits together with your change",
        )
    if conn.get_execution_options().get("isolation_level") == "AUTOCOMMIT" or _autocommits(conn):
        raise ValidationError.of(
            "conn", "is in AUTOCOMMIT mode; the job would commit apart from your change"
        )
    if conn.dialect.name == "sqlite":
        _begin_now(conn)


@contextlib.contextmanager
def parameters_hidden() -> Iterator[None]:
    """A driver error of a write through the caller's connection, told without the
    statement's parameters: its engine may show them (Conveyor's own hide them), and
    they hold the job's args, secrets included, bound for logs and error trackers."""
    try:
        yield
    except StatementError as exc:
        exc.hide_parameters = True
        raise


#: What to pass instead of what was given, by the given object's class name.
_HOW = {
    "Session": "; pass session.connection(), the Session's own, inside its transaction",
    "AsyncConnection": "; call it through conn.run_sync(lambda c: ...enqueue_in_tx(c, ...))",
    "AsyncSession": "; call it through session.run_sync(lambda s: ...(s.connection(), ...))",
    "Engine": "; an Engine would commit the job on its own, apart from your change",
}


def _autocommits(conn: Connection) -> bool:
    """Whether `conn`'s driver commits each statement itself, however that was set up
    (the engine's `isolation_level`, the driver's own `autocommit` or `isolation_level`
    argument): SQLAlchemy's transaction is then only a name."""
    raw = conn.connection.dbapi_connection
    if conn.dialect.name != "sqlite":
        return bool(getattr(raw, "autocommit", False))
    mode = getattr(raw, "autocommit", None)  # Python 3.12's sqlite3: True, False or legacy
    if isinstance(mode, bool):
        return mode
    # Legacy control with no isolation level: autocommit, unless a BEGIN was sent by hand
    # (SQLAlchemy's recipe for SQLite savepoints), which the driver reports.
    return getattr(raw, "isolation_level", "") is None and not getattr(raw, "in_transaction", True)


def _begin_now(conn: Connection) -> None:
    """Begin the caller's SQLite transaction in the database if the driver has not yet.

    sqlite3 in its default mode sends BEGIN only before the first INSERT, UPDATE or
    DELETE: a SAVEPOINT sent first (a keyed enqueue's) would begin a transaction of its
    own, and its RELEASE commit the job whatever the caller does next."""
    raw = conn.connection.dbapi_connection
    if raw is not None and not getattr(raw, "in_transaction", True):
        conn.exec_driver_sql("BEGIN")
