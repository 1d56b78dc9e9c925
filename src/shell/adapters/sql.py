"""The SQL backend on SQLAlchemy 2 Core: one code path for SQLite and PostgreSQL.

The public names live here; the code lives in rooms named for what they hold:

* `sql_engine`: `make_engine`, SQLite configuration, the unit of work and its retries,
  the time conversions;
* `sql_queue`: `SqlJobQueue` (claims, leases, promotion, finishing, revive);
* `sql_store`: `SqlJobStore` (history and dead letters);
* `sql_wakeup`: the one wake-up listener per process and database;
* `sql_schema` and `sql_statements`: the tables and the prebuilt statements.
"""

from __future__ import annotations

from ..ports import BadClaim
from .sql_engine import (
    SQLITE_BEGIN_OPTION,
    configure_sqlite,
    from_micros,
    make_engine,
    normalize_url,
    to_micros,
)
from .sql_queue import SqlJobQueue
from .sql_store import SqlJobStore
from .sql_wakeup import SQLITE_WATCH_S

__all__ = [
    "SQLITE_BEGIN_OPTION",
    "SQLITE_WATCH_S",
    "BadClaim",
    "SqlJobQueue",
    "SqlJobStore",
    "configure_sqlite",
    "from_micros",
    "make_engine",
    "normalize_url",
    "to_micros",
]
