"""The `dependents` mark of a job_queue row: set while jobs wait for the row's job, so
its finish settles them (see `workflows`). A row placed again (a revived dead letter)
is a new row: it gets the mark back here when its edges say jobs still wait for it."""

from __future__ import annotations

from uuid import UUID

from sqlalchemy import Connection, exists, update

from .database import Database


def mark_awaited(db: Database, conn: Connection, job_id: UUID) -> None:
    """Inside `conn`'s transaction: mark `job_id`'s row when an edge names it."""
    t, edges = db.schema.job_queue, db.schema.edges
    awaited = exists().where(edges.c.dependency_id == str(job_id))
    conn.execute(update(t).where(t.c.id == str(job_id), awaited).values(dependents=1))
