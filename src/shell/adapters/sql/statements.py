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
    exists,
    func,
    or_,
    select,
    text,
)
from sqlalchemy import update as sql_update
from sqlalchemy.dialects.postgresql import JSON
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from .postgres_ddl import claim_function_name
from .schema import PROCESSING, READY, SCHEDULED, Schema

#: How many due parked jobs one claim promotes at most, so a claim stays cheap when a
#: large batch comes due at once (the next claims promote the rest).
PROMOTE_PER_CLAIM = 100

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
    "job_type",
    "partition_key",
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
        #: What a claim returns for each row it took: enough to sort them into claim order.
        taken = (t.c.id, t.c.locked_by, t.c.payload, t.c.priority, t.c.seq)
        self.take_one: Executable = (
            sql_update(t)
            .where(t.c.id == bindparam("job_id"), t.c.status == READY)
            .values(status=PROCESSING, locked_by=bindparam("token"), locked_at=bindparam("at"))
            .returning(*taken)
        )
        # `status || ''`, not `status`: given `status = ?` SQLite's planner picks the
        # (status, ...) indexes over the primary key for `id IN (...)` and walks every
        # ready row (100 ms a claim with 100,000 queued); as an expression the status
        # test is checked on the rows the key finds.
        self.take_many: Executable = (
            sql_update(t)
            .where(t.c.id.in_(bindparam("ids", expanding=True)), t.c.status.concat("") == READY)
            .values(
                status=PROCESSING,
                locked_by=bindparam("base", type_=String) + t.c.id,
                locked_at=bindparam("at"),
            )
            .returning(*taken)
        )
        # A re-sent claim's first look: the rows its token took (locked at its `at`, so
        # the lease index finds them). Batch tokens share the call's base as a prefix,
        # which holds no LIKE wildcard (hex digits, "p-" and ":").
        resent = (t.c.status == PROCESSING, t.c.locked_at == bindparam("at"))
        self.held_one: Select[str, str, str, int, int] = select(*taken).where(
            *resent, t.c.locked_by == bindparam("token")
        )
        self.held_many: Select[str, str, str, int, int] = select(*taken).where(
            *resent, t.c.locked_by.startswith(bindparam("token", type_=String))
        )

        def due(*where: ColumnElement[bool]) -> Select[str]:
            return (
                select(t.c.id)
                .where(t.c.status == SCHEDULED, t.c.run_at <= bindparam("at"), *where)
                .order_by(t.c.run_at, t.c.seq)
                .limit(bindparam("limit", type_=Integer))
                .with_for_update(skip_locked=True)
            )

        #: Due parked jobs in promotion order: of one queue (a claim's), or of all.
        self.due_in_queue: Select[str] = due(t.c.queue == bindparam("in_queue"))
        self.due_any: Select[str] = due()
        self.promote_one: Update = (
            sql_update(t)
            .where(t.c.id == bindparam("job_id"), t.c.status == SCHEDULED)
            .values(status=READY, seq=bindparam("seq"))
        )
        self.next_due: Select[int | None] = select(func.min(t.c.run_at)).where(
            t.c.queue == bindparam("in_queue"), t.c.status == SCHEDULED
        )
        held = (
            t.c.id == bindparam("job_id"),
            t.c.locked_by == bindparam("token"),
            t.c.status == PROCESSING,
        )
        #: The lease keeper's guard: still locked (or last renewed) before the cutoff.
        stale = (*held, t.c.locked_at < bindparam("cut"))
        self.release: Delete = delete(t).where(*held)
        self.release_abandoned: Delete = delete(t).where(*stale)
        # An outcome write of a holder is refused while a cancel request stands for its
        # job (see `core.cancellation`); the request is probed in the same statement.
        requests = schema.cancel_requests
        no_cancel = ~exists().where(requests.c.job_id == t.c.id)
        self.no_cancel: ColumnElement[bool] = no_cancel
        # The plain finish takes only a row no job waits for; a row with dependents is
        # finished by `settle_release*`, which settles them in the same transaction.
        plain = t.c.dependents.is_(None)
        self.finish_release: Delete = delete(t).where(*held, no_cancel, plain)
        self.finish_release_abandoned: Delete = delete(t).where(*stale, no_cancel, plain)
        self.settle_release: Delete = delete(t).where(*held, no_cancel, ~plain)
        self.settle_release_abandoned: Delete = delete(t).where(*stale, no_cancel, ~plain)
        self.cancel_requested: Select[str] = select(requests.c.job_id).where(
            requests.c.job_id == bindparam("job_id")
        )
        self.clear_cancel: Delete = delete(requests).where(requests.c.job_id == bindparam("job_id"))
        self.extend: Update = sql_update(t).where(*held).values(locked_at=bindparam("at"))
        self.extend_with_progress: Update = (
            sql_update(t).where(*held).values(locked_at=bindparam("at"), progress=bindparam("note"))
        )
        self.progress_note: Select[str] = select(t.c.progress).where(t.c.id == bindparam("job_id"))
        # Fenced by the old token. A rerun (its first answer lost with the connection,
        # perhaps after the commit) accepts the new one too, finding its work done.
        starting = (t.c.id == bindparam("job_id"), t.c.status == PROCESSING)
        restart: dict[str, object] = {"locked_by": bindparam("new"), "locked_at": bindparam("at")}
        self.start: Update = (
            sql_update(t).where(*starting, t.c.locked_by == bindparam("old")).values(restart)
        )
        self.start_again: Update = (
            sql_update(t)
            .where(
                *starting,
                or_(t.c.locked_by == bindparam("old"), t.c.locked_by == bindparam("new")),
            )
            .values(restart)
        )
        self.store_status: Select[str] = (
            select(store.c.status).where(store.c.id == bindparam("job_id")).with_for_update()
        )
        self.store_payload: Select[str] = select(store.c.payload).where(
            store.c.id == bindparam("job_id")
        )
        self.held_row: Select[str] = select(t.c.id).where(*held)
        #: PostgreSQL only: one statement (and so one round trip in autocommit) each.
        self.claim: Executable | None = None
        self.finish: Executable | None = None
        self.finish_abandoned: Executable | None = None
        self.finish_many: Executable | None = None
        self.server_time: Executable | None = None
        if dialect == "postgresql":
            self.claim = text(
                "SELECT job_id AS id, job_token AS locked_by, job_payload AS payload,"
                " job_priority AS priority, job_seq AS seq"
                f" FROM {claim_function_name(schema)}(CAST(:in_queue AS text),"
                " CAST(:at AS bigint), CAST(:limit AS integer), CAST(:token AS text),"
                " CAST(:per_job AS boolean), CAST(:promote AS integer),"
                " CAST(:resend AS boolean))"
            )
            self.finish = _finish(schema, (*held, no_cancel, plain))
            self.finish_abandoned = _finish(schema, (*stale, no_cancel, plain))
            self.finish_many = _finish_many(schema)
            self.server_time = select(func.clock_timestamp())
        self.release_many: Executable = (
            delete(t)
            .where(
                t.c.status == PROCESSING,
                t.c.locked_by.in_(bindparam("tokens", expanding=True)),
                no_cancel,
                plain,
            )
            .returning(t.c.id, t.c.locked_by)
        )


def _finish(schema: Schema, held: tuple[ColumnElement[bool], ...]) -> Executable:
    """PostgreSQL: delete the held row and upsert its record, in one statement.

    `WITH gone AS (DELETE ... RETURNING id) INSERT INTO job_store SELECT ... FROM gone`:
    a lost claim deletes nothing, so nothing is recorded; the statement returns the
    recorded id, or no row. The record's columns (its id too: a `BadClaim`'s row may
    hold an id that is not the record's) are the parameters `r_<column>`."""
    t, store = schema.job_queue, schema.job_store
    gone = delete(t).where(*held).returning(t.c.id).cte("gone")
    values = [bindparam(f"r_{c}", type_=store.c[c].type) for c in RECORD_COLUMNS]
    rows = select(*values, schema.store_seq.next_value()).select_from(gone)
    insert = pg_insert(store).from_select([*RECORD_COLUMNS, "recorded_seq"], rows)
    updated = [c for c in (*RECORD_COLUMNS, "recorded_seq") if c != "id"]
    upserted = insert.on_conflict_do_update(
        index_elements=[store.c.id], set_={c: insert.excluded[c] for c in updated}
    )
    return upserted.returning(store.c.id).add_cte(gone, nest_here=True)


def _finish_many(schema: Schema) -> Executable:
    """PostgreSQL: finish a batch in one statement (one round trip in autocommit).

    `:rows` is one JSON array of `{id, token, ord, <record columns>}`. Each row is
    deleted only while its own token holds it and no cancel request stands for it;
    only the deleted ones are recorded, with fresh `recorded_seq` values in `ord`
    order (the sorted subquery is scanned in order, so `nextval` follows it). Returns
    the recorded ids. Ids and tokens travel in the JSON, not as an `IN` list, so the
    statement's text is the same for every batch size: parsed and prepared once."""
    q, store = schema.job_queue.name, schema.job_store.name
    requests, seq = schema.cancel_requests.name, schema.store_seq.name
    typed = ", ".join(f"{c} {_PG_TYPES[c]}" for c in RECORD_COLUMNS)
    columns = ", ".join(RECORD_COLUMNS)
    updates = ", ".join(f"{c} = EXCLUDED.{c}" for c in (*RECORD_COLUMNS[1:], "recorded_seq"))
    return text(
        f"WITH given AS (SELECT * FROM json_to_recordset(CAST(:rows AS json))"
        f" AS given(token text, ord integer, {typed})),"
        f" gone AS (DELETE FROM {q} USING given"
        f" WHERE {q}.id = given.id AND {q}.locked_by = given.token"
        f" AND {q}.status = '{PROCESSING}'"
        f" AND NOT EXISTS (SELECT 1 FROM {requests} WHERE {requests}.job_id = {q}.id)"
        # A row jobs wait for is left to the settling finish (see `finish_release`).
        f" AND {q}.dependents IS NULL"
        f" RETURNING {q}.id)"
        f" INSERT INTO {store} ({columns}, recorded_seq)"
        f" SELECT {columns}, nextval('{seq}') FROM"
        f" (SELECT given.* FROM given JOIN gone ON gone.id = given.id"
        f" ORDER BY given.ord OFFSET 0) AS done"
        f" ON CONFLICT (id) DO UPDATE SET {updates}"
        f" RETURNING {store}.id"
    )


#: The server-side types of the record columns in `_finish_many`'s JSON rows.
_PG_TYPES = {
    "id": "text",
    "queue": "text",
    "job_type": "text",
    "status": "text",
    "tenant_id": "text",
    "finished_at": "bigint",
    "payload": "text",
}


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
