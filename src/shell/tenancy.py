"""Tenant-scoped execution: a tenant job's database work runs inside its tenant.

A handler registered with `tenant_scoped=True` receives `(args, ctx)` where
`ctx.tenant` is the resolved tenant, `ctx.conn` a SQLAlchemy `Connection`
inside a transaction opened for that tenant (committed when the handler
succeeds, rolled back when it fails, raises, or runs past its timeout), and
`ctx.job` the attempt's `JobContext`. A job whose tenant cannot be
resolved, or whose scope does not exist, fails explicitly (`tenant-not-found`)
and its handler never runs: there is no fallback to an unscoped run.

The scope is set on the session before the handler's transaction opens and
holds for every statement the handler runs on `ctx.conn`, even after it
commits or rolls back itself. When the run ends the session gets its own
settings back and loses its temporary tables; a connection that cannot be
reset is invalidated rather than returned to the pool.

Scoping strategies:

* `SchemaPerTenant` (PostgreSQL): `search_path` is the tenant's schema and
  `pg_temp` only, so an unqualified name resolves in that schema or not at all:
  a table the schema lacks is an error, never a row in `public`, `"$user"` or
  another tenant. A schema that does not exist is `tenant-not-found`.
* `SharedTables`: one set of tables with a tenant column; the context hands the
  tenant id to your queries (and, on PostgreSQL, sets `conveyor.tenant_id`
  for row-level security policies that want it).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

import attrs
import sqlalchemy as sa

from ..core import (
    ErrorInfo,
    Failed,
    Outcome,
    Succeeded,
    TenantNotFound,
    ValidationError,
    check_name,
)
from .attempt_gate import AttemptGate
from .context import JobContext
from .registry import error_from_exception, run_handler

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
    #: The attempt being run (job id, attempt, deadline, cancel check).
    job: JobContext | None = None

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


class TenantUnavailable(Exception):
    """The tenant resolved, but its scope (its schema) does not exist."""


class ScopingStrategy(Protocol):
    """Puts a connection's session into a tenant's scope for one run, and takes it out.

    `enter` runs in a transaction of its own that the caller commits; `leave`
    runs after the handler's work has ended, whatever became of it. `enter`
    raises `TenantUnavailable` when the tenant has no scope to enter.
    """

    def enter(self, conn: sa.Connection, tenant: Tenant) -> None: ...

    def leave(self, conn: sa.Connection) -> None: ...


class SharedTables:
    """Tenants share tables; queries filter on the tenant id from the context."""

    def enter(self, conn: sa.Connection, tenant: Tenant) -> None:
        if conn.dialect.name == "postgresql":
            conn.execute(
                sa.text("SELECT set_config('conveyor.tenant_id', :t, false)"), {"t": tenant.id}
            )

    def leave(self, conn: sa.Connection) -> None:
        if conn.dialect.name == "postgresql":
            # Back to '', which a policy comparing tenant ids matches to no row.
            conn.exec_driver_sql("RESET conveyor.tenant_id")


#: Where `SchemaPerTenant` keeps the session's own search_path during a run: the
#: pool's per-connection info, so it follows the connection, not the thread.
_PRIOR_SEARCH_PATH = "conveyor.tenancy.search_path"


class SchemaPerTenant:
    """Each tenant has its own PostgreSQL schema, the only one on the search_path."""

    def enter(self, conn: sa.Connection, tenant: Tenant) -> None:
        if conn.dialect.name != "postgresql":
            raise ValidationError.of(
                "tenancy.strategy", "schema-per-tenant needs PostgreSQL; use shared tables"
            )
        schema = tenant.schema or tenant.id
        if (problem := check_name("tenant schema", schema)) is not None:
            raise ValidationError((problem,))
        prior, exists = conn.execute(
            sa.text(
                "SELECT current_setting('search_path'),"
                " EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = :s)"
            ),
            {"s": schema},
        ).one()
        if not exists:
            # A path naming a missing schema silently skips it: the lookup would
            # then go on to whatever else the session can see.
            raise TenantUnavailable(f"tenant {tenant.id!r}: schema {schema!r} does not exist")
        conn.info[_PRIOR_SEARCH_PATH] = prior
        # pg_temp named last: otherwise PostgreSQL searches it first, and a temporary
        # table would shadow the tenant's own table of the same name.
        path = f"{conn.dialect.identifier_preparer.quote_identifier(schema)}, pg_temp"
        conn.execute(sa.text("SELECT set_config('search_path', :p, false)"), {"p": path})

    def leave(self, conn: sa.Connection) -> None:
        prior = conn.info.pop(_PRIOR_SEARCH_PATH, None)
        if prior is not None:  # else `enter` stopped before it changed anything
            conn.execute(sa.text("SELECT set_config('search_path', :p, false)"), {"p": prior})


class TenantScope:
    """Resolves tenants and runs tenant-scoped handlers in a tenant transaction."""

    def __init__(
        self, engine: sa.Engine, resolver: TenantResolver, strategy: ScopingStrategy
    ) -> None:
        self.engine, self.resolver, self.strategy = engine, resolver, strategy

    def resolve(self, tenant_id: str) -> Tenant | None:
        return self.resolver.resolve(tenant_id)

    def run(
        self,
        handler: Callable[..., Any],
        args: Any,
        tenant: Tenant,
        *,
        job: JobContext | None = None,
        gate: AttemptGate | None = None,
    ) -> Outcome:
        """Run `handler(args, ctx)` in a transaction for `tenant`; commit only on success,
        and only while `gate` says the attempt was not abandoned at its deadline."""
        with self.engine.connect() as conn:
            try:
                return self._run_scoped(conn, handler, args, tenant, job, gate)
            finally:
                self._leave(conn)

    def _run_scoped(
        self,
        conn: sa.Connection,
        handler: Callable[..., Any],
        args: Any,
        tenant: Tenant,
        job: JobContext | None,
        gate: AttemptGate | None,
    ) -> Outcome:
        try:
            self.strategy.enter(conn, tenant)
            # Committed apart from the handler's work, so that neither a commit nor a
            # rollback the handler issues on ctx.conn takes the session out of scope.
            conn.commit()
        except TenantUnavailable as exc:
            log.warning("%s; the job fails as tenant-not-found", exc)
            return TenantNotFound(str(exc)[:500])
        except sa.exc.DBAPIError as exc:
            # The database failed, not the tenant: like a failing resolver, retryable.
            return Failed(ErrorInfo("tenant-scope", str(exc)[:500], retryable=True))
        except Exception as exc:
            return Failed(ErrorInfo("tenant-scope", str(exc)[:500], retryable=False))
        conn.begin()
        outcome = run_handler(handler, args, TenantContext(tenant, conn, job))
        if not conn.in_transaction():
            return outcome
        if not isinstance(outcome, Succeeded) or (gate is not None and not gate.finish()):
            # A raised or returned failure leaves nothing of the handler's writes; nor
            # does an attempt the worker already recorded as timed out.
            conn.rollback()
            return outcome
        try:
            conn.commit()
        except Exception as exc:
            return Failed(error_from_exception(exc))
        return outcome

    def _leave(self, conn: sa.Connection) -> None:
        """Give the session its own settings back before the pool has it again."""
        try:
            if conn.in_transaction():
                conn.rollback()
            self.strategy.leave(conn)
            if conn.dialect.name == "postgresql":
                # A temporary table lives as long as the session, so the next
                # tenant on this connection would see it.
                conn.exec_driver_sql("DISCARD TEMP")
            conn.commit()
        except Exception:
            log.exception("could not reset a tenant's connection; discarding it")
            try:
                conn.invalidate()
            except Exception:
                log.exception("could not invalidate a tenant's connection")
