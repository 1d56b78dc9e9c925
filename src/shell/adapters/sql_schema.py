"""The SQL backend's schema under the name earlier versions gave it.

The code lives in the `sql` package now: the tables in `sql.schema`, PostgreSQL's
functions, trigger and table settings in `sql.postgres_ddl`, the columns added since
the first version in `sql.upgrade`, the schema as SQL text and its mark in `sql.ddl`,
and `migrate` with `schema_problem` in `sql.migration`. This module re-exports them.
"""

from __future__ import annotations

from .sql.ddl import ddl_text, schema_mark, schema_version
from .sql.migration import create_tables, migrate, schema_is_current, schema_problem
from .sql.postgres_ddl import (
    AUTOVACUUM_SETTINGS,
    NOTIFY_CHANNEL,
    QUEUE_FILLFACTOR,
    claim_ddl,
    claim_function_name,
    notify_ddl,
    partial_index_ddl,
    storage_ddl,
)
from .sql.schema import (
    DEFAULT_PREFIX,
    JOB_COUNTER,
    PROCESSING,
    READY,
    SCHEDULED,
    SCHEMA,
    STORE_COUNTER,
    Schema,
    make_schema,
    metadata,
)
from .sql.statements import PROMOTE_PER_CLAIM
from .sql.upgrade import ADDED_COLUMNS, add_limit_columns, fill_limit_columns_sql

__all__ = [
    "ADDED_COLUMNS",
    "AUTOVACUUM_SETTINGS",
    "DEFAULT_PREFIX",
    "JOB_COUNTER",
    "NOTIFY_CHANNEL",
    "PROCESSING",
    "PROMOTE_PER_CLAIM",
    "QUEUE_FILLFACTOR",
    "READY",
    "SCHEDULED",
    "SCHEMA",
    "STORE_COUNTER",
    "Schema",
    "add_limit_columns",
    "claim_ddl",
    "claim_function_name",
    "create_tables",
    "ddl_text",
    "fill_limit_columns_sql",
    "make_schema",
    "metadata",
    "migrate",
    "notify_ddl",
    "partial_index_ddl",
    "schema_is_current",
    "schema_mark",
    "schema_problem",
    "schema_version",
    "storage_ddl",
]
