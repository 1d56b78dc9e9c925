"""The SQL backend's hot statements, built once per schema and dialect.

Building a SQLAlchemy statement (and its cache key) costs more CPU than SQLite takes
to run it: an `INSERT ... ON CONFLICT DO UPDATE` with its `excluded` alias is a few
dozen objects. So the statements every job passes through are built here once, with
bound parameters where the per-job values go, and executed with a parameter dict
(`conn.execute(stmt, params)`), which also lets the compiled form come straight
from the engine's cache.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Delete,
    Executable,
    Insert,
    Integer,
    Select,
    String,
    Table,
    Text,
    Update,
    bindparam,
    cast,
    column,
    delete,
    func,
    select,
)
from sqlalchemy import update as sql_update
from sqlalchemy.dialects.postgresql import JSON
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from .sql_schema import PROCESSING, READY, Schema

#: The job_queue columns an enqueue writes, `seq` apart.
JOB_COLUMNS = (
    "id",
    "status",
    "run_at",
    "locked_by",
    "locked_at",
    "priority",
    "queue",
    "tenant_id",
    "payload",
)
#: The job_store columns a record writes, `recorded_seq` apart.
RECORD_COLUMNS = ("id", "queue", "job_type", "status", "tenant_id", "finished_at", "payload")


def upsert(dialect: str, table: Table, columns: tuple[str, ...], **fixed: object) -> Insert:
    """`INSERT ... ON CONFLICT (id) DO UPDATE` of `columns` (parameters named after
    them) and of `fixed` columns (SQL expressions, the same for every row)."""
    insert = pg_insert(table) if dialect == "postgresql" else sqlite_insert(table)
    if fixed:
        insert = insert.values(fixed)
    updated = [c for c in (*columns, *fixed) if c != "id"]
    return insert.on_conflict_do_update(
        index_elements=[table.c.id], set_={c: insert.excluded[c] for c in updated}
    )


class Statements:
    """Prebuilt statements for one schema in one dialect ("sqlite" or "postgresql").

    On PostgreSQL the `*_nextval` upserts draw `seq` from the sequence inside the
    statement; elsewhere (and for parked jobs, whose `seq` is NULL) it is a parameter.
    """

    def __init__(self, schema: Schema, dialect: str) -> None:
        t, store = schema.job_queue, schema.job_store
        self.upsert_job: Executable = upsert(dialect, t, (*JOB_COLUMNS, "seq"))
        self.upsert_record: Executable = upsert(dialect, store, (*RECORD_COLUMNS, "recorded_seq"))
        self.upsert_job_nextval: Executable | None = None
        self.upsert_record_nextval: Executable | None = None
        if dialect == "postgresql":
            job_seq = schema.job_seq.next_value()
            self.upsert_job_nextval = upsert(dialect, t, JOB_COLUMNS, seq=job_seq)
            self.upsert_record_nextval = upsert(
                dialect, store, RECORD_COLUMNS, recorded_seq=schema.store_seq.next_value()
            )
        #: PostgreSQL: many rows in one statement, as one JSON parameter `rows`.
        self.upsert_jobs_many: Executable | None = None
        self.upsert_records_many: Executable | None = None
        if dialect == "postgresql":
            self.upsert_jobs_many = _recordset_upsert(t, (*JOB_COLUMNS, "seq"))
            self.upsert_records_many = _recordset_upsert(store, (*RECORD_COLUMNS, "recorded_seq"))
        counters = schema.counters
        by = bindparam("by", type_=BigInteger)
        bump = sqlite_insert(counters).values(name=bindparam("name"), value=by)
        self.bump: Executable = bump.on_conflict_do_update(
            index_elements=[counters.c.name], set_={"value": counters.c.value + by}
        ).returning(counters.c.value)

        def best(limit: object) -> Select[tuple[str]]:
            return (
                select(t.c.id)
                .where(t.c.queue == bindparam("in_queue"), t.c.status == READY)
                .order_by(t.c.priority, t.c.seq)
                .limit(limit)  # type: ignore[arg-type]
                .with_for_update(skip_locked=True)
            )

        self.best_one: Select[tuple[str]] = best(1)
        self.best_many: Select[tuple[str]] = best(bindparam("limit", type_=Integer))
        self.take_one: Executable = (
            sql_update(t)
            .where(t.c.id == bindparam("job_id"), t.c.status == READY)
            .values(status=PROCESSING, locked_by=bindparam("token"), locked_at=bindparam("at"))
            .returning(t.c.payload)
        )
        self.take_many: Executable = (
            sql_update(t)
            .where(t.c.id.in_(bindparam("ids", expanding=True)), t.c.status == READY)
            .values(
                status=PROCESSING,
                locked_by=bindparam("base", type_=String) + t.c.id,
                locked_at=bindparam("at"),
            )
            .returning(t.c.id, t.c.locked_by, t.c.payload, t.c.priority, t.c.seq)
        )
        held = (
            t.c.id == bindparam("job_id"),
            t.c.locked_by == bindparam("token"),
            t.c.status == PROCESSING,
        )
        self.release: Delete = delete(t).where(*held)
        self.extend: Update = sql_update(t).where(*held).values(locked_at=bindparam("at"))
        #: PostgreSQL only: one statement (and so one round trip in autocommit) each.
        self.claim_best: Executable | None = None
        self.finish: Executable | None = None
        if dialect == "postgresql":
            self.claim_best = (
                sql_update(t)
                .where(t.c.id == self.best_one.scalar_subquery(), t.c.status == READY)
                .values(status=PROCESSING, locked_by=bindparam("token"), locked_at=bindparam("at"))
                .returning(t.c.id, t.c.payload)
            )
            self.finish = _finish(schema, held)
        self.release_many: Executable = (
            delete(t)
            .where(t.c.status == PROCESSING, t.c.locked_by.in_(bindparam("tokens", expanding=True)))
            .returning(t.c.id, t.c.locked_by)
        )


def _finish(schema: Schema, held: tuple[ColumnElement[bool], ...]) -> Executable:
    """PostgreSQL: delete the held row and upsert its record, in one statement.

    `WITH gone AS (DELETE ... RETURNING id) INSERT INTO job_store SELECT ... FROM gone`:
    a lost claim deletes nothing, so nothing is recorded; the statement returns the
    recorded id, or no row. The record's columns are the parameters `r_<column>`."""
    t, store = schema.job_queue, schema.job_store
    gone = delete(t).where(*held).returning(t.c.id).cte("gone")
    columns = [c for c in RECORD_COLUMNS if c != "id"]
    values = [bindparam(f"r_{c}", type_=store.c[c].type) for c in columns]
    rows = select(gone.c.id, *values, schema.store_seq.next_value())
    insert = pg_insert(store).from_select(["id", *columns, "recorded_seq"], rows)
    updated = [*columns, "recorded_seq"]
    upserted = insert.on_conflict_do_update(
        index_elements=[store.c.id], set_={c: insert.excluded[c] for c in updated}
    )
    return upserted.returning(store.c.id).add_cte(gone, nest_here=True)


def _recordset_upsert(table: Table, columns: tuple[str, ...]) -> Executable:
    """PostgreSQL: `INSERT ... SELECT * FROM json_to_recordset(:rows) ON CONFLICT (id)
    DO UPDATE`: one statement for any number of rows (whose ids must be distinct),
    parsed and planned once. The rows travel as one JSON text, which the server parses
    in C; text arrays would make the driver escape every payload in Python."""
    typed = [column(c, table.c[c].type) for c in columns]
    given = func.json_to_recordset(cast(bindparam("rows", type_=Text), JSON))
    rows = given.table_valued(*typed).render_derived(name="given", with_types=True)
    insert = pg_insert(table).from_select(list(columns), select(*(rows.c[c] for c in columns)))
    return insert.on_conflict_do_update(
        index_elements=[table.c.id],
        set_={c: insert.excluded[c] for c in columns if c != "id"},
    )
