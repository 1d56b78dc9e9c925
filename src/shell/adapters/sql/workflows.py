"""Workflows on SQL: a graph written in one transaction, its edges in `<prefix>_edges`,
and the jobs waiting for one that ended settled in the transaction that ends it.

A waiting job is a job_queue row with status `waiting`: no claim or promotion reads
it. A row that jobs wait for carries `dependents = 1`, set under its row lock by the
transaction that attaches them; the plain finish statements take only rows without
it, so a job nothing waits for finishes as before, and one that has dependents is
finished here instead (`finish_settling`), fenced the same way.

Two inputs of one fan-in finishing at once cannot both see the other unfinished: each
locks the waiting row (`FOR UPDATE` on PostgreSQL; SQLite has one writer) before
reading its inputs' statuses, so the second reads after the first committed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

from returns.result import Success
from sqlalchemy import Connection, delete, insert, select, text, update
from sqlalchemy.exc import IntegrityError

from ....core import Job, JobStatus
from ....core.dependencies import Edge, OnFailure, check_graph, settle_new
from ....core.transitions import replace
from ...codec import decode
from ...ports import BadClaim, Claim
from ...ports.workflows import Graph, WorkflowMembers
from ..dependents import settle_dependents
from .base import SqlQueueBase, held_by, same_id
from .engine import to_micros
from .schema import JOB_COUNTER, PROCESSING, READY, WAITING
from .store import write_record, write_records
from .unique import rerun_on_contention

__all__ = ["Workflows"]

#: Ids per read of the statuses of a dependent's inputs (under SQLite's bound).
_CHUNK = 500
#: Writers of one workflow id take turns on PostgreSQL: the second waits for the first
#: to commit, then finds its members, rather than failing against its rows (SQLite has
#: one writer at a time).
_ONE_WRITER_PER_WORKFLOW = text("SELECT pg_advisory_xact_lock(hashtext(:key))")
#: The status a queued row's place stands for.
_QUEUED_STATUS = {
    READY: JobStatus.PENDING,
    PROCESSING: JobStatus.RUNNING,
    WAITING: JobStatus.WAITING,
}


def _decoded(payload: str) -> Job | None:
    found = decode(payload)
    return found.unwrap() if isinstance(found, Success) else None


class _InTransaction:
    """`DependentsIO` over one open transaction of the SQL queue."""

    def __init__(self, queue: Workflows, conn: Connection) -> None:
        self._q, self._conn = queue, conn

    def dependents_of(self, job_id: UUID) -> Sequence[UUID]:
        e = self._q._db.schema.edges
        stmt = select(e.c.dependent_id).where(e.c.dependency_id == str(job_id))
        return [UUID(r) for r in sorted(self._conn.execute(stmt).scalars())]

    def waiting_job(self, job_id: UUID) -> Job | None:
        t = self._q._t
        stmt = select(t.c.payload).where(t.c.id == str(job_id), t.c.status == WAITING)
        if not self._q._db.sqlite:
            stmt = stmt.with_for_update()
        payload = self._conn.execute(stmt).scalar()
        return None if payload is None else _decoded(str(payload))

    def edges_of(self, job_id: UUID) -> Sequence[Edge]:
        return self._q._edges_in(self._conn, job_id)

    def statuses_of(self, job_ids: Sequence[UUID]) -> Mapping[UUID, JobStatus | None]:
        t, store = self._q._t, self._q._db.schema.job_store
        out: dict[UUID, JobStatus | None] = dict.fromkeys(job_ids)
        keys = [str(i) for i in job_ids]
        for start in range(0, len(keys), _CHUNK):
            chunk = keys[start : start + _CHUNK]
            # The status columns only: no payload is read or decoded. A queued row's
            # place says enough (any unfinished status decides alike).
            recorded = select(store.c.id, store.c.status).where(store.c.id.in_(chunk))
            for row in self._conn.execute(recorded):
                out[UUID(row.id)] = JobStatus(row.status)
            queued = select(t.c.id, t.c.status).where(t.c.id.in_(chunk))
            for row in self._conn.execute(queued):
                out[UUID(row.id)] = _QUEUED_STATUS.get(str(row.status), JobStatus.SCHEDULED)
        return out

    def release(self, job: Job) -> None:
        t = self._q._t
        placed = self._q._placement(self._conn, job)
        self._conn.execute(update(t).where(t.c.id == str(job.id)).values(placed))

    def end(self, job: Job) -> None:
        t = self._q._t
        self._conn.execute(delete(t).where(t.c.id == str(job.id), t.c.status == WAITING))
        write_record(self._q._db, self._conn, job)


class Workflows(SqlQueueBase):
    """The workflow role of `SqlJobQueue`."""

    def _edges_in(self, conn: Connection, job_id: UUID) -> list[Edge]:
        e = self._db.schema.edges
        rows = conn.execute(
            select(e.c.dependency_id, e.c.on_failure, e.c.name)
            .where(e.c.dependent_id == str(job_id))
            .order_by(e.c.position)
        ).all()
        return [Edge(job_id, UUID(r[0]), OnFailure(r[1]), r[2]) for r in rows]

    def _current_in(self, conn: Connection, job_id: UUID) -> Job | None:
        """`job_id` as it stands in `conn`'s transaction: queued (running while claimed,
        pending while ready) or recorded."""
        t, store = self._t, self._db.schema.job_store
        row = conn.execute(select(t.c.status, t.c.payload).where(t.c.id == str(job_id))).first()
        if row is None:
            payload = conn.execute(select(store.c.payload).where(store.c.id == str(job_id)))
            found = payload.scalar()
            return None if found is None else _decoded(str(found))
        job = _decoded(str(row.payload))
        if job is None:
            return None
        moved = {PROCESSING: JobStatus.RUNNING, READY: JobStatus.PENDING}.get(str(row.status))
        return job if moved is None or job.status is moved else replace(job, status=moved)

    def _settle_after(self, conn: Connection, record: Job) -> None:
        settle_dependents(_InTransaction(self, conn), record)

    def enqueue_graph(self, graph: Graph) -> list[Job]:
        self._db.refuse_lost_file()

        def write() -> list[Job]:
            return self._db.run(lambda conn: self._write_graph(conn, graph))

        try:
            return rerun_on_contention(write)
        except IntegrityError:
            if graph.workflow_id is None:
                raise
            # Another writer stored this workflow id while ours waited on its key, and
            # all of ours rolled back: the second run finds theirs and returns it.
            return rerun_on_contention(write)

    def enqueue_graph_in_tx(self, conn: Any, graph: Graph) -> list[Job]:
        """`enqueue_graph` inside the caller's open transaction on `conn`, checked as
        `enqueue_in_tx` checks it: the graph commits or rolls back with the caller's
        own writes."""
        with self._in_callers_tx(conn):
            return rerun_on_contention(lambda: self._write_graph(conn, graph))

    def _stored_members(self, conn: Connection, workflow_id: UUID) -> list[Job] | None:
        """The members of the stored workflow `workflow_id` as they stand (one that
        retention pruned left out), or None when no workflow has that id."""
        w = self._db.schema.workflows
        listed = select(w.c.job_id).where(w.c.workflow_id == str(workflow_id))
        ids = list(conn.execute(listed.order_by(w.c.position)).scalars())
        if not ids:
            return None
        found = (self._current_in(conn, UUID(i)) for i in ids)
        return [job for job in found if job is not None]

    def _write_graph(self, conn: Connection, graph: Graph) -> list[Job]:
        if graph.workflow_id is not None:
            if not self._db.sqlite:
                key = f"{self._t.name}:workflow:{graph.workflow_id}"
                conn.execute(_ONE_WRITER_PER_WORKFLOW, {"key": key})
            stored = self._stored_members(conn, graph.workflow_id)
            if stored is not None:
                return stored
        for member in graph.members:
            # A root's unique key held by another job: nothing is written. Taken here
            # (in this transaction) when free, so a refused graph rolls it back too.
            if member.job.unique is not None:
                job = member.job
                assert job.unique is not None
                holder = self._adder.lock(conn, job.unique, str(job.id), job.created_at)
                if holder is not None:
                    return [holder]
        t = self._t
        members = graph.members
        ids = {m.job.id for m in members}
        outside = sorted({e.dependency for m in members for e in m.edges} - ids, key=str)
        existing: dict[UUID, Job] = {}
        for dep_id in outside:
            # Marks the row under its lock: a finish that waits on that lock then finds
            # the mark and settles the new dependents; one that went first left a record.
            mark = update(t).where(t.c.id == str(dep_id)).values(dependents=1)
            conn.execute(mark)
            found = self._current_in(conn, dep_id)
            if found is not None:
                existing[dep_id] = found
        error = check_graph([(m.job, m.edges, m.field) for m in members], existing)
        if error is not None:
            raise error
        statuses = {i: j.status for i, j in existing.items()}
        records = settle_new(
            [(m.job, m.edges) for m in members], statuses, members[0].job.created_at
        )
        self._write_members(conn, records, {e.dependency for m in members for e in m.edges})
        e = self._db.schema.edges
        rows = [
            {
                "dependency_id": str(edge.dependency),
                "dependent_id": str(edge.dependent),
                "position": position,
                "on_failure": edge.on_failure.value,
                "name": edge.name,
            }
            for m in members
            for position, edge in enumerate(m.edges)
        ]
        if rows:
            conn.execute(insert(e), rows)
        if graph.workflow_id is not None:
            w = self._db.schema.workflows
            listed = [
                {
                    "workflow_id": str(graph.workflow_id),
                    "position": n,
                    "name": m.name or str(m.job.id),
                    "job_id": str(m.job.id),
                }
                for n, m in enumerate(members)
            ]
            conn.execute(insert(w), listed)
        return records

    def _write_members(self, conn: Connection, records: list[Job], awaited: set[UUID]) -> None:
        """Write the settled members in two statements: the queued ones (waiting or
        placed, in member order, marked when a member waits for them) and the records
        of those that ended at once."""
        queued = [r for r in records if not r.status.is_terminal]
        seqs = self._db.next_seqs(conn, JOB_COUNTER, len(queued))
        rows = []
        for record, seq in zip(queued, seqs, strict=True):
            row: dict[str, Any] = {"id": str(record.id), **self._placement_values(record)}
            if record.status is JobStatus.WAITING:
                row["status"] = WAITING
            row.update(seq=seq, dependents=1 if record.id in awaited else None)
            rows.append(row)
        if rows:
            conn.execute(insert(self._t), rows)
        write_records(self._db, conn, [r for r in records if r.status.is_terminal])

    def dependencies_of(self, job_id: UUID) -> Sequence[Edge]:
        return self._db.run(lambda conn: self._edges_in(conn, job_id), write=False)

    def workflow(self, workflow_id: UUID) -> WorkflowMembers | None:
        w = self._db.schema.workflows

        def read(conn: Connection) -> WorkflowMembers | None:
            rows = conn.execute(
                select(w.c.name, w.c.job_id)
                .where(w.c.workflow_id == str(workflow_id))
                .order_by(w.c.position)
            ).all()
            if not rows:
                return None
            names = {str(r.name): UUID(r.job_id) for r in rows}
            edges = tuple(e for job_id in names.values() for e in self._edges_in(conn, job_id))
            return WorkflowMembers(workflow_id, names, edges)

        return self._db.run(read, write=False)

    def workflow_of(self, job_id: UUID) -> UUID | None:
        w = self._db.schema.workflows
        query = select(w.c.workflow_id).where(w.c.job_id == str(job_id)).limit(1)
        found = self._db.run(lambda conn: conn.execute(query).scalar(), write=False)
        return None if found is None else UUID(found)

    def _finish_settling(
        self, claim: Claim | BadClaim, record: Job, abandoned_before: datetime | None
    ) -> bool:
        """`finish` of a row that jobs wait for: fenced as the plain finish, the record
        written and its dependents settled, all in one transaction."""
        if isinstance(claim, Claim):
            same_id(claim, record)
        job_id, token = held_by(claim)
        held: dict[str, Any] = {"job_id": job_id, "token": token}
        release = self._db.sql.settle_release
        if abandoned_before is not None:
            held["cut"] = to_micros(abandoned_before, "abandoned_before")
            release = self._db.sql.settle_release_abandoned

        def work(conn: Connection) -> bool:
            if conn.execute(release, held).rowcount != 1:
                return False
            write_record(self._db, conn, record)
            self._settle_after(conn, record)
            return True

        return self._db.run(work)
