"""The SQL backend's PostgreSQL-only objects: the claim function, the ready trigger
and the tables' storage settings, as DDL statements (`migrate` runs them, `ddl_text`
prints them)."""

from __future__ import annotations

from .schema import SCHEMA, Schema, dialect_of

#: The PostgreSQL channel on which a job becoming ready is announced (payload: its queue).
NOTIFY_CHANNEL = "conveyor_ready"
#: The channel on which a finished record is announced (payload: the job's id, then a
#: newline and the record's body when it fits in `CARRIED_MAX_BYTES`).
FINISHED_CHANNEL = "conveyor_finished"
#: The largest finish announcement that carries the record. PostgreSQL refuses a
#: NOTIFY payload of 8000 bytes or more; a longer record is announced by id alone,
#: and its waiters read it from the store.
CARRIED_MAX_BYTES = 7900


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
        *_finished_ddl(schema),
    ]


def _finished_ddl(schema: Schema) -> list[str]:
    """A trigger that NOTIFYs `FINISHED_CHANNEL` with the id of each record written
    finished (completed, failed, cancelled), and the record itself when the message
    stays within `CARRIED_MAX_BYTES`, so a caller waiting for that job's outcome wakes
    at once and need not read it. Written in the finishing transaction, heard after
    its commit."""
    table = schema.job_store.name
    function = f"{table}_notify_finished"
    return [
        f"CREATE OR REPLACE FUNCTION {function}() RETURNS trigger AS $$\n"
        f"BEGIN\n"
        f"    IF octet_length(NEW.id) + 1 + octet_length(NEW.payload) <= {CARRIED_MAX_BYTES}"
        f" THEN\n"
        f"        PERFORM pg_notify('{FINISHED_CHANNEL}', NEW.id || chr(10) || NEW.payload);\n"
        f"    ELSE\n"
        f"        PERFORM pg_notify('{FINISHED_CHANNEL}', NEW.id);\n"
        f"    END IF;\n"
        f"    RETURN NULL;\n"
        f"END;\n"
        f"$$ LANGUAGE plpgsql",
        f"DROP TRIGGER IF EXISTS {function} ON {table}",
        f"CREATE TRIGGER {function} AFTER INSERT OR UPDATE ON {table}\n"
        f"    FOR EACH ROW WHEN (NEW.status IN ('completed', 'failed', 'cancelled'))\n"
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
    for table in schema.tables_for(dialect_of("postgresql")):
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
