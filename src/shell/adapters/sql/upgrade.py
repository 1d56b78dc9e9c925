"""The SQL backend's upgrade of tables an earlier version made: the job_queue columns
added since its first version, added and filled in from each row's payload."""

from __future__ import annotations

import json

from sqlalchemy import Connection, bindparam, inspect, select, update

from .schema import SCHEMA, Schema

#: The job_queue columns added after its first version: (name, SQL type).
ADDED_COLUMNS = (
    ("job_type", "VARCHAR(128)"),
    ("partition_key", "VARCHAR(200)"),
    ("progress", "TEXT"),
    ("dependents", "SMALLINT"),
)


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
