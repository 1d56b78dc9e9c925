"""The SQL backend on SQLAlchemy 2 Core: one code path for SQLite and PostgreSQL.

The public names live here; the code lives in modules named for their one job:

* `engine`: `make_engine`, SQLite configuration, the time conversions;
* `database`: the unit of work and its retries, and the ordering values it hands out;
* `schema`: the tables; `postgres_ddl`: PostgreSQL's claim function, trigger and
  table settings; `upgrade`: columns added since the first version; `ddl`: the schema
  as SQL text and its mark; `migration`: `migrate` and `schema_problem`;
* `statements`: the hot statements, built once per schema and dialect;
* `queue`: `SqlJobQueue`, put together from its roles over a shared `base`:
  `enqueue` (placements), `claims` (claims and promotion), `limits` (claims under
  limits), `holder` (the claim holder's writes), `cancel`, `reads`, and `wakeups`
  (the one wake-up listener per process and database);
* `unique`: `enqueue_new` under unique keys; `bulk_copy`: many rows by `COPY`;
* `store`: `SqlJobStore` (history and dead letters);
* `async_queue`: enqueues for asyncio code on PostgreSQL (loaded only when asked for).
"""

from __future__ import annotations

from ...ports import BadClaim
from .engine import (
    SQLITE_BEGIN_OPTION,
    configure_sqlite,
    from_micros,
    make_engine,
    normalize_url,
    to_micros,
)
from .queue import SqlJobQueue
from .store import SqlJobStore
from .wakeups import SQLITE_WATCH_S

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
