"""The SQL backend's engines under the name earlier versions gave them.

The code lives in the `sql` package now: `make_engine`, `configure_sqlite` and the
time conversions in `sql.engine`, the unit of work and its retries (`Database`) in
`sql.database`. This module re-exports them.
"""

from __future__ import annotations

from .sql.database import Database, is_transient
from .sql.engine import (
    SQLITE_BEGIN_OPTION,
    configure_sqlite,
    from_micros,
    make_engine,
    normalize_url,
    to_micros,
)

__all__ = [
    "SQLITE_BEGIN_OPTION",
    "Database",
    "configure_sqlite",
    "from_micros",
    "is_transient",
    "make_engine",
    "normalize_url",
    "to_micros",
]
