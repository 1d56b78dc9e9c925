"""What deleted records (pruned by retention, purged by an operator) leave of
workflows on SQL, let go in the transaction that deletes them.

A job in no workflow (enqueued `after` others) lets go of its edges with its record.
A workflow keeps its member rows and every member's edges until none of its jobs is
queued or recorded, so that `runtime.workflow(id)` shows it whole while any part of
it can still be read; the deletion of its last record then takes all of it. Before,
edges and member rows outlived their records for ever.

Two pruners deleting the last records of one workflow at once on PostgreSQL each see
the other's records as still there: the workflow's member rows are locked (FOR
UPDATE, in id order) before the look, so the second looks after the first commits.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Connection, delete, exists, or_, select

from .schema import Schema

#: Ids per statement: well under SQLite's bound on a statement's parameters.
_CHUNK = 500


def let_go_of_records(conn: Connection, schema: Schema, job_ids: Sequence[str]) -> None:
    """Let go of what the records `job_ids`, deleted in this transaction, leave."""
    edges, members = schema.edges, schema.workflows
    ended: set[str] = set()
    for at in range(0, len(job_ids), _CHUNK):
        chunk = job_ids[at : at + _CHUNK]
        rows = conn.execute(
            select(members.c.job_id, members.c.workflow_id).where(members.c.job_id.in_(chunk))
        ).all()
        ended.update(str(row.workflow_id) for row in rows)
        in_workflows = {str(row.job_id) for row in rows}
        loose = [job_id for job_id in chunk if job_id not in in_workflows]
        if loose:
            conn.execute(delete(edges).where(edges.c.dependent_id.in_(loose)))
    for workflow_id in sorted(ended):
        _let_go_of_workflow(conn, schema, workflow_id)


def _let_go_of_workflow(conn: Connection, schema: Schema, workflow_id: str) -> None:
    """Delete the workflow's rows and edges when none of its jobs is left."""
    edges, members, queue, store = (
        schema.edges,
        schema.workflows,
        schema.job_queue,
        schema.job_store,
    )
    mine = members.c.workflow_id == workflow_id
    conn.execute(select(members.c.position).where(mine).with_for_update()).all()
    alive = (
        select(members.c.job_id)
        .where(
            mine,
            or_(
                exists().where(store.c.id == members.c.job_id),
                exists().where(queue.c.id == members.c.job_id),
            ),
        )
        .limit(1)
    )
    if conn.execute(alive).first() is not None:
        return
    ids = select(members.c.job_id).where(mine).scalar_subquery()
    conn.execute(delete(edges).where(edges.c.dependent_id.in_(ids)))
    conn.execute(delete(members).where(mine))
