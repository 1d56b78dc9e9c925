"""The SQL backend's tables, built with SQLAlchemy Core, for SQLite and PostgreSQL.

Two tables hold everything: `<prefix>_job_queue` (work still to do: ready,
scheduled and in-flight rows) and `<prefix>_job_store` (history and dead
letters). The authoritative job is the `payload` column, `codec.encode(job)`;
every other column is a copy kept only so that claims, promotions, reclaims and
listings are index scans.

FIFO order comes from `seq`, which every placement takes afresh, so a replaced,
promoted or reclaimed job goes to the tail like a new one; a parked job's `seq` is
its place among the jobs that come due at the same instant. On a
database with sequences (PostgreSQL) it is a `Sequence`, safe across processes
without a shared hot row. SQLite has no sequences; there a one-row-per-name
counter table is bumped in the same transaction as the placement, which is safe
because SQLite admits one writer at a time.

A third, `<prefix>_workers`, holds the heartbeats `conveyor status` shows.

Schema changes happen on purpose, never as a side effect of starting a process:
`migrate(engine)` creates or upgrades the tables and records this version's
schema mark; every other process reads the mark once (`schema_problem`) and
refuses to start on a missing or different schema, so an application role with
DML rights only can run workers. `ddl_text("postgresql")` prints the same schema,
mark included, as SQL for people who ship their own migrations.
"""

from __future__ import annotations

import hashlib
import json

import attrs
from sqlalchemy import (
    BigInteger,
    Column,
    Connection,
    Engine,
    Float,
    Index,
    MetaData,
    Sequence,
    SmallInteger,
    String,
    Table,
    Text,
    bindparam,
    inspect,
    select,
    text,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine.interfaces import Dialect
from sqlalchemy.schema import CreateIndex, CreateSequence, CreateTable

from ...core import ValidationError
from ...core.validation import check_name

#: Values of `job_queue.status`. A row is in exactly one of these places.
READY = "ready"
SCHEDULED = "scheduled"
PROCESSING = "processing"

#: Counter names in the counter table (databases without sequences only).
JOB_COUNTER = "job_seq"
STORE_COUNTER = "store_seq"

DEFAULT_PREFIX = "conveyor"


@attrs.frozen
class Schema:
    """The tables and sequences of one Conveyor installation (one table prefix)."""

    metadata: MetaData
    job_queue: Table
    job_store: Table
    counters: Table
    job_seq: Sequence
    store_seq: Sequence
    workers: Table
    cancel_requests: Table
    unique_keys: Table
    limit_state: Table

    def tables_for(self, dialect: Dialect) -> list[Table]:
        """The tables this dialect needs: the counter table only where sequences are missing."""
        tables = [self.job_queue, self.job_store, self.workers, self.cancel_requests]
        tables.extend((self.unique_keys, self.limit_state))
        if not dialect.supports_sequences:
            tables.append(self.counters)
        return tables


def make_schema(prefix: str = DEFAULT_PREFIX) -> Schema:
    """Build the schema with table, index and sequence names starting with `prefix`."""
    problem = check_name("prefix", prefix)
    if problem is not None or "." in prefix or "-" in prefix:
        # The prefix lands unquoted in DDL someone may paste into a migration.
        raise ValidationError.of("prefix", "may hold only letters, digits and '_'")
    md = MetaData()
    job_seq = Sequence(f"{prefix}_job_seq", metadata=md)
    store_seq = Sequence(f"{prefix}_store_seq", metadata=md)
    job_queue = Table(
        f"{prefix}_job_queue",
        md,
        Column("id", String(36), primary_key=True),
        Column("queue", String(128), nullable=False),
        Column("status", String(16), nullable=False),
        Column("priority", SmallInteger, nullable=False),
        # Ready: the FIFO position. Parked: the enqueue order among jobs due at the same
        # instant (NULL in rows parked by versions that gave parked jobs no seq).
        Column("seq", BigInteger, nullable=True),
        Column("run_at", BigInteger, nullable=False),
        Column("locked_by", String(64), nullable=True),
        Column("locked_at", BigInteger, nullable=True),
        Column("tenant_id", String(128), nullable=True),
        Column("payload", Text, nullable=False),
        # Copies for the claims of queues with limits (see `core.limits`): the job type
        # and the job's partition. NULL only in rows written before they existed, until
        # `migrate` fills them in.
        Column("job_type", String(128), nullable=True),
        Column("partition_key", String(200), nullable=True),
    )
    # On PostgreSQL the next four indexes are partial, each holding the rows of the one
    # status its readers ask for: a row version enters the one that matches its status
    # instead of all four, three index entries (and their WAL) fewer per placement and
    # per claim (see `partial_index_ddl`).
    Index(
        f"{prefix}_job_queue_claim",
        job_queue.c.queue,
        job_queue.c.status,
        job_queue.c.priority,
        job_queue.c.seq,
        postgresql_where=job_queue.c.status == READY,
    )
    Index(
        f"{prefix}_job_queue_due",
        job_queue.c.status,
        job_queue.c.run_at,
        postgresql_where=job_queue.c.status == SCHEDULED,
    )
    # A claim promotes its own queue's due jobs first: that probe must not read the
    # parked jobs of other queues, nor those not yet due.
    Index(
        f"{prefix}_job_queue_due_by_queue",
        job_queue.c.queue,
        job_queue.c.status,
        job_queue.c.run_at,
        job_queue.c.seq,
        postgresql_where=job_queue.c.status == SCHEDULED,
    )
    Index(
        f"{prefix}_job_queue_lease",
        job_queue.c.status,
        job_queue.c.locked_at,
        postgresql_where=job_queue.c.status == PROCESSING,
    )
    # A limited claim reads the first ready jobs of each partition of its queue (partial
    # on PostgreSQL like the claim index: only ready rows are ever read through it).
    Index(
        f"{prefix}_job_queue_partition",
        job_queue.c.queue,
        job_queue.c.status,
        job_queue.c.partition_key,
        job_queue.c.priority,
        job_queue.c.seq,
        postgresql_where=job_queue.c.status == READY,
    )
    job_store = Table(
        f"{prefix}_job_store",
        md,
        Column("id", String(36), primary_key=True),
        Column("queue", String(128), nullable=False),
        Column("job_type", String(128), nullable=False),
        Column("status", String(16), nullable=False),
        Column("tenant_id", String(128), nullable=True),
        Column("finished_at", BigInteger, nullable=True),
        # Newest first is by the order of recording, not by a clock that may step back.
        Column("recorded_seq", BigInteger, nullable=False),
        Column("payload", Text, nullable=False),
    )
    Index(
        f"{prefix}_job_store_status",
        job_store.c.status,
        job_store.c.tenant_id,
        job_store.c.recorded_seq,
    )
    Index(f"{prefix}_job_store_dead", job_store.c.status, job_store.c.recorded_seq)
    Index(f"{prefix}_job_store_recorded", job_store.c.recorded_seq)
    # Pruning by age deletes the oldest finished records of one status first.
    Index(f"{prefix}_job_store_finished", job_store.c.status, job_store.c.finished_at)
    # Listings of one status by queue or by job type, newest first (the dashboard's).
    Index(
        f"{prefix}_job_store_queue",
        job_store.c.status,
        job_store.c.queue,
        job_store.c.recorded_seq,
    )
    Index(
        f"{prefix}_job_store_type",
        job_store.c.status,
        job_store.c.job_type,
        job_store.c.recorded_seq,
    )
    counters = Table(
        f"{prefix}_counters",
        md,
        Column("name", String(32), primary_key=True),
        Column("value", BigInteger, nullable=False),
    )
    # Worker heartbeats (`presence.SqlPresence`): who polls which queue.
    workers = Table(
        f"{prefix}_workers",
        md,
        Column("worker_id", String(200), primary_key=True),
        Column("last_seen_us", BigInteger, nullable=False),
        Column("info", Text, nullable=False),
    )
    # Cancel requests of claimed jobs (see `core.cancellation`): a row per job whose
    # holder must record it cancelled; every outcome write of a holder checks it.
    cancel_requests = Table(
        f"{prefix}_cancel_requests",
        md,
        Column("job_id", String(36), primary_key=True),
        Column("requested_at", BigInteger, nullable=False),
    )
    # Unique keys (see `core.uniqueness`): which job holds each key, in which of its
    # states and until when (µs; NULL = no limit). A row whose holder has left those
    # states is stale: the next enqueue with the key takes it over.
    unique_keys = Table(
        f"{prefix}_unique",
        md,
        Column("key", String(200), primary_key=True),
        Column("job_id", String(36), nullable=False),
        Column("states", String(100), nullable=False),
        Column("expires_at", BigInteger, nullable=True),
    )
    # The stored state of queues with limits: rate buckets (kind "bucket": tokens in
    # `value` at `at_us`) and fair-share passes (kind "pass"), written by their claims.
    limit_state = Table(
        f"{prefix}_limit_state",
        md,
        Column("queue", String(128), primary_key=True),
        Column("kind", String(8), primary_key=True),
        Column("key", String(400), primary_key=True),
        Column("value", Float(precision=53), nullable=False),
        Column("at_us", BigInteger, nullable=True),
    )
    return Schema(
        md,
        job_queue,
        job_store,
        counters,
        job_seq,
        store_seq,
        workers,
        cancel_requests=cancel_requests,
        unique_keys=unique_keys,
        limit_state=limit_state,
    )


#: The default schema (`conveyor_job_queue`, `conveyor_job_store`, ...).
SCHEMA = make_schema()
#: The default schema's `MetaData`, for Alembic's `target_metadata`.
metadata = SCHEMA.metadata


#: The PostgreSQL channel on which a job becoming ready is announced (payload: its queue).
NOTIFY_CHANNEL = "conveyor_ready"


def notify_ddl(schema: Schema = SCHEMA) -> list[str]:
    """PostgreSQL only: a trigger that NOTIFYs when a row becomes ready or is parked, so
    idle workers wake at once instead of polling (a parked row changes how long they may
    sleep before it comes due). Same-transaction duplicates collapse into one."""
    table = schema.job_queue.name
    function = f"{table}_notify_ready"
    return [
        f"CREATE OR REPLACE FUNCTION {function}() RETURNS trigger AS $$\n"
        f"BEGIN\n"
        f"    PERFORM pg_notify('{NOTIFY_CHANNEL}', NEW.queue);\n"
        f"    RETURN NULL;\n"
        f"END;\n"
        f"$$ LANGUAGE plpgsql",
        f"DROP TRIGGER IF EXISTS {function} ON {table}",
        f"CREATE TRIGGER {function} AFTER INSERT OR UPDATE OF status ON {table}\n"
        f"    FOR EACH ROW WHEN (NEW.status IN ('ready', 'scheduled'))\n"
        f"    EXECUTE FUNCTION {function}()",
    ]


#: Per-table autovacuum settings (PostgreSQL): both tables churn (every job is inserted,
#: updated and deleted in the queue; recorded and later pruned in the store) while the
#: rows alive at once stay few, so the default "vacuum once a fifth of the table is
#: dead" would let them grow with the number of jobs run. Vacuum once a fixed number of
#: rows is dead instead, without the cost pauses meant for big tables.
AUTOVACUUM_SETTINGS = (
    ("autovacuum_vacuum_scale_factor", "0"),
    ("autovacuum_vacuum_threshold", "2000"),
    ("autovacuum_vacuum_cost_delay", "0"),
    ("autovacuum_analyze_scale_factor", "0"),
    ("autovacuum_analyze_threshold", "5000"),
)


#: How full PostgreSQL packs a queue page on insert (percent). A claim rewrites its row
#: (the status is indexed, so the update is never HOT); when the new version fits on the
#: same page, the WAL record carries only the bytes that changed (status, token, lease)
#: instead of the whole row and its payload: about 600 bytes less WAL per job, for twice
#: the pages per queued job.
QUEUE_FILLFACTOR = 50


def storage_ddl(schema: Schema = SCHEMA) -> list[str]:
    """PostgreSQL only: `AUTOVACUUM_SETTINGS` on the queue and store tables, so space
    freed by claims, finishes and pruning is reused and storage stays flat, and
    `QUEUE_FILLFACTOR` on the queue table (it applies to pages filled from then on)."""
    settings = ", ".join(f"{name} = {value}" for name, value in AUTOVACUUM_SETTINGS)
    return [
        *(
            f"ALTER TABLE {table.name} SET ({settings})"
            for table in (schema.job_queue, schema.job_store)
        ),
        f"ALTER TABLE {schema.job_queue.name} SET (fillfactor = {QUEUE_FILLFACTOR})",
    ]


def partial_index_ddl(schema: Schema = SCHEMA) -> list[str]:
    """PostgreSQL only: drop each index this version makes partial where an earlier
    version made it whole, so the `CREATE INDEX IF NOT EXISTS` after it builds the
    partial one. Run before the indexes are created; a no-op when they are current."""
    statements = []
    for table in schema.tables_for(_dialect("postgresql")):
        for index in sorted(table.indexes, key=lambda i: str(i.name)):
            if index.dialect_options["postgresql"]["where"] is None:
                continue
            statements.append(
                f"DO $$\n"
                f"BEGIN\n"
                f"    IF EXISTS (SELECT 1 FROM pg_index WHERE indpred IS NULL\n"
                f"            AND indexrelid = to_regclass('{index.name}')) THEN\n"
                f"        DROP INDEX {index.name};\n"
                f"    END IF;\n"
                f"END\n"
                f"$$"
            )
    return statements


#: How many due parked jobs one claim promotes at most, so a claim stays cheap when a
#: large batch comes due at once (the next claims promote the rest).
PROMOTE_PER_CLAIM = 100


def claim_function_name(schema: Schema = SCHEMA) -> str:
    """The PostgreSQL function that claims (see `claim_ddl`)."""
    return f"{schema.job_queue.name}_claim"


def claim_ddl(schema: Schema = SCHEMA) -> list[str]:
    """PostgreSQL only: the claim as one function, so it stays one round trip.

    In one transaction it (1) returns the rows `in_token` already holds when the call
    is a re-send (`in_resend`: an earlier try may have committed before its answer was
    lost); else (2) moves up to `in_promote` of the queue's due parked jobs to ready in
    promotion order (run_at, then seq), each with a fresh seq, behind the jobs already
    ready; and (3) claims up to `in_limit` ready jobs (priority, then seq). With
    `in_per_job` each claim's token is `in_token` followed by the job id.
    Its statements see each other's writes, which one SQL statement's CTEs would not.
    """
    table = schema.job_queue.name
    return [
        f"CREATE OR REPLACE FUNCTION {claim_function_name(schema)}(\n"
        f"    in_queue text, in_at bigint, in_limit integer, in_token text,\n"
        f"    in_per_job boolean, in_promote integer, in_resend boolean)\n"
        f"RETURNS TABLE (job_id varchar, job_token varchar, job_payload text,\n"
        f"    job_priority smallint, job_seq bigint) AS $$\n"
        f"DECLARE\n"
        f"    due record;\n"
        f"    ids varchar[];\n"
        f"BEGIN\n"
        f"    IF in_resend THEN\n"
        f"        RETURN QUERY SELECT q.id, q.locked_by, q.payload, q.priority, q.seq\n"
        f"            FROM {table} q\n"
        f"            WHERE q.status = 'processing' AND q.locked_at = in_at\n"
        f"            AND (q.locked_by = in_token\n"
        f"                OR (in_per_job AND left(q.locked_by, length(in_token)) = in_token));\n"
        f"        IF FOUND THEN\n"
        f"            RETURN;\n"
        f"        END IF;\n"
        f"    END IF;\n"
        f"    FOR due IN SELECT q.id FROM {table} q\n"
        f"            WHERE q.queue = in_queue AND q.status = 'scheduled' AND q.run_at <= in_at\n"
        f"            ORDER BY q.run_at, q.seq LIMIT in_promote FOR UPDATE SKIP LOCKED LOOP\n"
        f"        UPDATE {table} SET status = 'ready', seq = nextval('{schema.job_seq.name}')\n"
        f"            WHERE id = due.id;\n"
        f"    END LOOP;\n"
        f"    ids := ARRAY(SELECT q.id FROM {table} q\n"
        f"            WHERE q.queue = in_queue AND q.status = 'ready'\n"
        f"            ORDER BY q.priority, q.seq LIMIT in_limit FOR UPDATE SKIP LOCKED);\n"
        f"    RETURN QUERY UPDATE {table} AS q SET status = 'processing',\n"
        f"            locked_by = CASE WHEN in_per_job THEN in_token || q.id ELSE in_token END,\n"
        f"            locked_at = in_at\n"
        f"        WHERE q.id = ANY(ids) AND q.status = 'ready'\n"
        f"        RETURNING q.id, q.locked_by, q.payload, q.priority, q.seq;\n"
        f"END;\n"
        f"$$ LANGUAGE plpgsql",
    ]


def schema_mark(dialect: str, schema: Schema = SCHEMA) -> str:
    """A fingerprint of the DDL this version wants: recorded with the tables when they are
    created or upgraded, so a process that finds it current runs no DDL at all."""
    digest = hashlib.sha256(_ddl_body(_dialect(dialect), schema).encode()).hexdigest()
    return f"conveyor schema {digest[:16]}"


def _sqlite_mark(mark: str) -> int:
    # PRAGMA user_version holds a signed 32-bit integer.
    return int(hashlib.sha256(mark.encode()).hexdigest()[:7], 16)


def _label(found: str | int) -> str:
    """How a mark is shown to a person: the fingerprint's digits."""
    if isinstance(found, int):
        return f"{found:07x}"
    return found.removeprefix("conveyor schema ")


def schema_version(dialect: str, schema: Schema = SCHEMA) -> str:
    """This version's schema mark as messages show it (the digits of its fingerprint)."""
    mark = schema_mark(dialect, schema)
    return _label(mark if dialect == "postgresql" else _sqlite_mark(mark))


def _read_mark(conn: Connection, schema: Schema) -> tuple[bool, str | int | None]:
    """(whether the queue table exists, the mark it carries), in one catalog read that
    takes no lock. On SQLite the table's existence is read only when no mark is found."""
    if conn.dialect.name == "postgresql":
        row = conn.execute(
            text(
                "SELECT to_regclass(:t) IS NOT NULL, obj_description(to_regclass(:t), 'pg_class')"
            ),
            {"t": schema.job_queue.fullname},
        ).one()
        comment = row[1] if isinstance(row[1], str) else None
        # A comment someone else wrote on the table is no mark.
        return bool(row[0]), comment if comment and comment.startswith("conveyor schema ") else None
    version = conn.exec_driver_sql("PRAGMA user_version").scalar()
    if version:
        return True, int(version)
    exists = conn.execute(
        text("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = :t"),
        {"t": schema.job_queue.name},
    ).first()
    return exists is not None, None


def _wanted(conn: Connection, schema: Schema) -> str | int:
    mark = schema_mark(conn.dialect.name, schema)
    return mark if conn.dialect.name == "postgresql" else _sqlite_mark(mark)


def schema_is_current(conn: Connection, schema: Schema = SCHEMA) -> bool:
    """True when the tables carry this version's schema mark (one catalog read, no lock)."""
    return _read_mark(conn, schema)[1] == _wanted(conn, schema)


def _reader(engine: Engine) -> Connection:
    from .sql_engine import SQLITE_BEGIN_OPTION  # sql_engine imports this module

    # A read: on SQLite it must not take the write lock (BEGIN IMMEDIATE).
    return engine.connect().execution_options(**{SQLITE_BEGIN_OPTION: "DEFERRED"})


def schema_problem(engine: Engine, schema: Schema = SCHEMA) -> str | None:
    """None when the database carries this version's schema; else one line saying what is
    found and what to run. One catalog read, no lock and no DDL: any role may call it."""
    with _reader(engine) as conn:
        exists, found = _read_mark(conn, schema)
        wanted = _wanted(conn, schema)
    if found == wanted:
        return None
    fix = 'run "conveyor migrate" (or apply the SQL of "conveyor migrate --sql")'
    if not exists:
        return f"the database schema is missing: {fix}"
    at = "an unmarked earlier version" if found is None else f"version {_label(found)}"
    return f"the database schema is at {at}, this Conveyor needs version {_label(wanted)}: {fix}"


def migrate(engine: Engine, schema: Schema = SCHEMA) -> bool:
    """Create whatever of the schema is missing and record this version's schema mark;
    True when it ran DDL, False when the schema was already current.

    Safe to call again and from many processes started one after another; existing
    tables keep their columns and rows, and get the indexes and functions this version
    added. It needs the right to create tables (the owner's role); the processes that
    then enqueue and work need only DML rights. When the tables already carry the mark
    it runs no DDL: DDL takes table locks that would queue behind running workers.
    """
    with _reader(engine) as conn:
        if schema_is_current(conn, schema):
            return False
    tables = schema.tables_for(engine.dialect)
    schema.metadata.create_all(engine, tables=tables, checkfirst=True)
    postgres = engine.dialect.name == "postgresql"
    with engine.begin() as conn:
        if postgres:
            # One creator at a time: DROP/CREATE TRIGGER racing in two processes would fail.
            conn.execute(text("SELECT pg_advisory_xact_lock(4242001)"))
            if schema_is_current(conn, schema):
                return False  # another process upgraded it while this one waited
        # create_all adds no column to a table that exists: add the ones limits need
        # (before the indexes on them), and fill them in from the payloads.
        add_limit_columns(conn, schema)
        # create_all skips the indexes of a table that already exists (one made by an
        # earlier version): add the ones it lacks.
        if postgres:
            for statement in partial_index_ddl(schema):
                conn.exec_driver_sql(statement)
        for table in tables:
            for index in sorted(table.indexes, key=lambda i: str(i.name)):
                conn.execute(CreateIndex(index, if_not_exists=True))
        if postgres:
            for statement in (*notify_ddl(schema), *claim_ddl(schema), *storage_ddl(schema)):
                conn.exec_driver_sql(statement)
        conn.exec_driver_sql(_mark_statement(engine.dialect, schema))
    return True


#: The job_queue columns added after its first version: (name, SQL type).
ADDED_COLUMNS = (("job_type", "VARCHAR(128)"), ("partition_key", "VARCHAR(200)"))


def add_limit_columns(conn: Connection, schema: Schema) -> int:
    """Add the `ADDED_COLUMNS` a job_queue table made by an earlier version lacks, and
    fill them in from each row's payload (a payload that is not a job gets `""`).
    How many rows were filled in."""
    table = schema.job_queue
    present = {c["name"] for c in inspect(conn).get_columns(table.name)}
    for name, kind in ADDED_COLUMNS:
        if name not in present:
            conn.exec_driver_sql(f"ALTER TABLE {table.name} ADD COLUMN {name} {kind}")
    filled = 0
    while True:
        rows = conn.execute(
            select(table.c.id, table.c.payload, table.c.tenant_id)
            .where(table.c.job_type.is_(None))
            .limit(1000)
        ).all()
        if not rows:
            return filled
        conn.execute(
            update(table).where(table.c.id == bindparam("row_id")),
            [_copies(str(r.id), str(r.payload), r.tenant_id) for r in rows],
        )
        filled += len(rows)


def fill_limit_columns_sql(schema: Schema = SCHEMA) -> str:
    """PostgreSQL: what `add_limit_columns` fills in, as one statement for a migration
    file: each row without a job type gets the job type and partition of its payload
    (a payload that is not a job object gets `""`, as there)."""
    t = schema.job_queue.name
    return (
        "DO $fill$\n"
        "DECLARE\n"
        "    r record;\n"
        "    doc jsonb;\n"
        "BEGIN\n"
        f"    FOR r IN SELECT id, payload, tenant_id FROM {t} WHERE job_type IS NULL LOOP\n"
        "        BEGIN\n"
        # jsonb refuses the NUL character (`\u0000`) a job's args may hold; the job
        # type and partition cannot hold one, so it is dropped before the cast.
        "            doc := replace(r.payload, chr(92) || 'u0000', '')::jsonb;\n"
        "        EXCEPTION WHEN others THEN\n"
        "            doc := NULL;\n"
        "        END;\n"
        "        IF jsonb_typeof(doc) IS DISTINCT FROM 'object' THEN\n"
        "            doc := '{}'::jsonb;\n"
        "        END IF;\n"
        f"        UPDATE {t} SET\n"
        "            job_type = CASE WHEN jsonb_typeof(doc -> 'job_type') = 'string'\n"
        "                THEN doc ->> 'job_type' ELSE '' END,\n"
        "            partition_key = COALESCE(NULLIF(CASE\n"
        "                WHEN jsonb_typeof(doc -> 'partition_key') = 'string'\n"
        "                THEN doc ->> 'partition_key' ELSE r.tenant_id END, ''), '')\n"
        "        WHERE id = r.id;\n"
        "    END LOOP;\n"
        "END\n"
        "$fill$"
    )


def _copies(row_id: str, payload: str, tenant_id: str | None) -> dict[str, str]:
    """The job type and partition of a row made before they had columns."""
    try:
        doc = json.loads(payload)
    except ValueError:
        doc = None
    doc = doc if isinstance(doc, dict) else {}
    job_type, key = doc.get("job_type"), doc.get("partition_key")
    partition = key if isinstance(key, str) else tenant_id
    return {
        "row_id": row_id,
        "job_type": job_type if isinstance(job_type, str) else "",
        "partition_key": partition or "",
    }


def create_tables(engine: Engine, schema: Schema = SCHEMA) -> None:
    """`migrate(engine, schema)`, under the name earlier versions gave it."""
    migrate(engine, schema)


def _mark_statement(dialect: Dialect, schema: Schema) -> str:
    mark = schema_mark(dialect.name, schema)
    if dialect.name == "postgresql":
        quoted = mark.replace("'", "''")
        return f"COMMENT ON TABLE {schema.job_queue.fullname} IS '{quoted}'"
    return f"PRAGMA user_version = {_sqlite_mark(mark)}"


_DIALECTS = {"postgresql": postgresql.dialect, "sqlite": sqlite.dialect}


def _dialect(dialect: str | Dialect) -> Dialect:
    if isinstance(dialect, Dialect):
        return dialect
    factory = _DIALECTS.get(dialect)
    if factory is None:
        known = ", ".join(sorted(_DIALECTS))
        raise ValidationError.of("dialect", f"unknown dialect {dialect!r}; use one of {known}")
    made: Dialect = factory()
    return made


def _ddl_statements(target: Dialect, schema: Schema, if_not_exists: bool) -> list[str]:
    statements: list[str] = []
    if target.supports_sequences:
        for seq in (schema.job_seq, schema.store_seq):
            create = CreateSequence(seq, if_not_exists=if_not_exists)
            statements.append(str(create.compile(dialect=target)))
    if target.name == "postgresql":
        statements.extend(partial_index_ddl(schema))
    for table in schema.tables_for(target):
        create_table = CreateTable(table, if_not_exists=if_not_exists)
        statements.append(str(create_table.compile(dialect=target)).strip())
        if table is schema.job_queue and if_not_exists and target.name == "postgresql":
            # An upgrade of tables an earlier version made: the columns its indexes need.
            statements.extend(
                f"ALTER TABLE {table.name} ADD COLUMN IF NOT EXISTS {name} {kind}"
                for name, kind in ADDED_COLUMNS
            )
            statements.append(fill_limit_columns_sql(schema))
        for index in sorted(table.indexes, key=lambda i: str(i.name)):
            create_index = CreateIndex(index, if_not_exists=if_not_exists)
            statements.append(str(create_index.compile(dialect=target)))
    if target.name == "postgresql":
        statements.extend(notify_ddl(schema))
        statements.extend(claim_ddl(schema))
        statements.extend(storage_ddl(schema))
    return statements


def _join(statements: list[str]) -> str:
    # Compiled DDL has tab indents and trailing blanks; tidy it for a migration file.
    tidy = (
        "\n".join(line.rstrip().replace("\t", "    ") for line in s.splitlines())
        for s in statements
    )
    return "".join(f"{s};\n\n" for s in tidy)


def _ddl_body(target: Dialect, schema: Schema) -> str:
    """The schema without its mark: what the mark fingerprints."""
    return _join(_ddl_statements(target, schema, if_not_exists=False))


def ddl_text(
    dialect: str | Dialect, schema: Schema = SCHEMA, *, if_not_exists: bool = False
) -> str:
    """The schema's statements for `dialect` (`"postgresql"`, `"sqlite"` or a `Dialect`),
    one per paragraph, each ending in `;`: paste them into a migration. The last one
    records the schema mark, without which processes refuse to start on the tables.

    With `if_not_exists` every CREATE skips what exists (functions and the trigger are
    replaced anyway), so the text also upgrades a schema an earlier version made:
    `conveyor migrate --sql` prints it so.
    """
    target = _dialect(dialect)
    statements = _ddl_statements(target, schema, if_not_exists)
    statements.append(_mark_statement(target, schema))
    return _join(statements)
