"""Tenant-scoped execution: a tenant job's database work runs inside its tenant.

A handler registered with `tenant_scoped=True` receives `(args, ctx)` where
`ctx.tenant` is the resolved tenant and `ctx.conn` a SQLAlchemy `Connection`
inside a transaction opened for that tenant: committed when the handler
succeeds, rolled back when it fails or raises. A job whose tenant cannot be
resolved fails explicitly (`tenant-not-found`) and its handler never runs:
there is no fallback to an unscoped run.

Scoping strategies:

* `SchemaPerTenant` (PostgreSQL): `set_config('search_path', ..., true)`, the
  function form of `SET LOCAL`, so the setting ends with the transaction and
  cannot leak to the next user of a pooled connection.
* `SharedTables`: one set of tables with a tenant column; the context hands the
  tenant id to your queries (and, on PostgreSQL, sets `conveyor.tenant_id`
  locally for row-level security policies that want it).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

import attrs
import sqlalchemy as sa

from ..core import ErrorInfo, Failed, Outcome, Succeeded, ValidationError, check_name
from .registry import run_handler

log = logging.getLogger("conveyor.tenancy")


@attrs.frozen(slots=True)
class Tenant:
    """A resolved tenant. `schema` is its PostgreSQL schema (schema-per-tenant)."""

    id: str
    schema: str | None = None


@attrs.frozen(slots=True)
class TenantContext:
    """What a tenant-scoped handler gets besides its args."""

    tenant: Tenant
    conn: sa.Connection

    @property
    def tenant_id(self) -> str:
        return self.tenant.id


class TenantResolver(Protocol):
    """Finds a tenant by id; None when it does not exist (any more)."""

    def resolve(self, tenant_id: str) -> Tenant | None: ...


class TableTenantResolver:
    """Reads tenants from a table (default `tenants(id, schema_name)`).

    The default example: point it at your own table and column names.
    """

    def __init__(
        self,
        engine: sa.Engine,
        *,
        table: str = "tenants",
        id_column: str = "id",
        schema_column: str | None = "schema_name",
    ) -> None:
        for field, name in (("table", table), ("id_column", id_column)):
            if (problem := check_name(field, name)) is not None:
                raise ValidationError((problem,))
        self.engine = engine
        columns: list[sa.ColumnClause[Any]] = [sa.column(id_column)]
        if schema_column:
            columns.append(sa.column(schema_column))
        self._table = sa.table(table, *columns)
        self._id, self._schema = id_column, schema_column

    def resolve(self, tenant_id: str) -> Tenant | None:
        query = sa.select(self._table).where(self._table.c[self._id] == tenant_id)
        with self.engine.connect() as conn:
            row = conn.execute(query).mappings().first()
        if row is None:
            return None
        schema = row.get(self._schema) if self._schema else None
        return Tenant(str(row[self._id]), None if schema is None else str(schema))


class ScopingStrategy(Protocol):
    """Puts an open transaction into a tenant's scope."""

    def enter(self, conn: sa.Connection, tenant: Tenant) -> None: ...


class SharedTables:
    """Tenants share tables; queries filter on the tenant id from the context."""

    def enter(self, conn: sa.Connection, tenant: Tenant) -> None:
        if conn.dialect.name == "postgresql":
            conn.execute(
                sa.text("SELECT set_config('conveyor.tenant_id', :t, true)"), {"t": tenant.id}
            )


class SchemaPerTenant:
    """Each tenant has its own PostgreSQL schema, first on a transaction-local search_path."""

    def __init__(self, *, fallback: str = "public") -> None:
        self.fallback = fallback

    def enter(self, conn: sa.Connection, tenant: Tenant) -> None:
        if conn.dialect.name != "postgresql":
            raise ValidationError.of(
                "tenancy.strategy", "schema-per-tenant needs PostgreSQL; use shared tables"
            )
        schema = tenant.schema or tenant.id
        if (problem := check_name("tenant schema", schema)) is not None:
            raise ValidationError((problem,))
        quote = conn.dialect.identifier_preparer.quote_identifier
        path = f"{quote(schema)}, {quote(self.fallback)}"
        # is_local = true: the same as SET LOCAL, undone at commit or rollback.
        conn.execute(sa.text("SELECT set_config('search_path', :p, true)"), {"p": path})


class TenantScope:
    """Resolves tenants and runs tenant-scoped handlers in a tenant transaction."""

    def __init__(
        self, engine: sa.Engine, resolver: TenantResolver, strategy: ScopingStrategy
    ) -> None:
        self.engine, self.resolver, self.strategy = engine, resolver, strategy

    def resolve(self, tenant_id: str) -> Tenant | None:
        return self.resolver.resolve(tenant_id)

    def run(self, handler: Callable[..., Any], args: Any, tenant: Tenant) -> Outcome:
        """Run `handler(args, ctx)` in a transaction for `tenant`; commit only on success."""
        with self.engine.connect() as conn:
            tx = conn.begin()
            try:
                self.strategy.enter(conn, tenant)
            except Exception as exc:
                tx.rollback()
                return Failed(ErrorInfo("tenant-scope", str(exc)[:500], retryable=False))
            outcome = run_handler(handler, args, TenantContext(tenant, conn))
            if isinstance(outcome, Succeeded):
                tx.commit()
            else:
                # A raised or returned failure leaves nothing of the handler's writes.
                tx.rollback()
            return outcome
