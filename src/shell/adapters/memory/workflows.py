"""Workflows on the memory queue: a graph written under the queue's lock, the edges kept
beside the jobs, and the jobs waiting for one that ended settled under that same lock."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from uuid import UUID

from ....core import Job, JobStatus
from ....core.dependencies import Edge, check_graph, settle_new
from ...ports.workflows import Graph, WorkflowMembers
from ..dependents import settle_dependents
from .state import QueueState
from .store import MemoryJobStore


class _LockedDependents:
    """`DependentsIO` over the memory queue, for a caller that holds its lock."""

    def __init__(self, state: Workflows, store: MemoryJobStore) -> None:
        self._state, self._store = state, store

    def dependents_of(self, job_id: UUID) -> Sequence[UUID]:
        return self._state._dependents.get(job_id, ())

    def waiting_job(self, job_id: UUID) -> Job | None:
        return self._state._waiting.get(job_id)

    def edges_of(self, job_id: UUID) -> Sequence[Edge]:
        return self._state._edges.get(job_id, ())

    def statuses_of(self, job_ids: Sequence[UUID]) -> Mapping[UUID, JobStatus | None]:
        return {i: self._state._status(i, self._store) for i in job_ids}

    def release(self, job: Job) -> None:
        del self._state._waiting[job.id]
        self._state._place(job)

    def end(self, job: Job) -> None:
        del self._state._waiting[job.id]
        self._store.record(job)


class Workflows(QueueState):
    """`enqueue_graph`, `dependencies_of`, `workflow` and `workflow_of`, and the settling
    of dependents every ending write of this queue does."""

    def _current(self, job_id: UUID, store: MemoryJobStore) -> Job | None:
        """`job_id` as it stands: queued (running while claimed) or recorded."""
        found = self._find(job_id)
        if found is None or found.job is None:
            return store.get(job_id)
        return found.job

    def _status(self, job_id: UUID, store: MemoryJobStore) -> JobStatus | None:
        """`job_id`'s status as it stands, without scanning a ready lane."""
        if job_id in self._in_flight:
            return JobStatus.RUNNING
        if job_id in self._ready_ids:
            return JobStatus.PENDING
        if job_id in self._waiting:
            return JobStatus.WAITING
        parked = self._scheduled.get(job_id)
        if parked is not None:
            return parked[1].status
        record = store.get(job_id)
        return None if record is None else record.status

    def enqueue_graph(self, graph: Graph) -> list[Job]:
        store = self._store_for("enqueue a workflow into")
        members = graph.members
        ids = {m.job.id for m in members}
        with self._lock:
            stored = None if graph.workflow_id is None else self._workflows.get(graph.workflow_id)
            if stored is not None:
                return self._members_now(stored, store)
            # A root's unique key held by another job: the whole graph is not written.
            holders = (self._lock_holder(m.job) for m in members if m.job.unique is not None)
            holder = next((h for h in holders if h is not None), None)
            if holder is not None:
                return [holder]
            outside = {e.dependency for m in members for e in m.edges} - ids
            existing = {i: j for i in outside if (j := self._current(i, store)) is not None}
            error = check_graph([(m.job, m.edges, m.field) for m in members], existing)
            if error is not None:
                raise error
            now = members[0].job.created_at
            statuses = {i: j.status for i, j in existing.items()}
            records = settle_new([(m.job, m.edges) for m in members], statuses, now)
            for member, record in zip(members, records, strict=True):
                self._take_lock(member.job)
                self._write_member(record, member.edges, store)
            if graph.workflow_id is not None:
                names = {m.name or str(m.job.id): m.job.id for m in members}
                edges = tuple(e for m in members for e in m.edges)
                self._workflows[graph.workflow_id] = WorkflowMembers(
                    graph.workflow_id, names, edges
                )
                self._member_of.update((m.job.id, graph.workflow_id) for m in members)
            return records

    def _members_now(self, stored: WorkflowMembers, store: MemoryJobStore) -> list[Job]:
        """A stored workflow's members as they stand (caller holds the lock); one that
        retention pruned is left out."""
        found = (self._current(i, store) for i in stored.names.values())
        return [job for job in found if job is not None]

    def _write_member(self, record: Job, edges: tuple[Edge, ...], store: MemoryJobStore) -> None:
        """Write one settled member and its edges (caller holds the lock)."""
        self._drop(record.id)
        if record.status is JobStatus.WAITING:
            self._waiting[record.id] = record
        elif record.status.is_terminal:
            store.record(record)
        else:
            self._place(record)
        if edges:
            self._edges[record.id] = edges
            for edge in edges:
                self._dependents.setdefault(edge.dependency, []).append(record.id)

    def dependencies_of(self, job_id: UUID) -> Sequence[Edge]:
        with self._lock:
            return self._edges.get(job_id, ())

    def workflow(self, workflow_id: UUID) -> WorkflowMembers | None:
        with self._lock:
            return self._workflows.get(workflow_id)

    def workflow_of(self, job_id: UUID) -> UUID | None:
        with self._lock:
            return self._member_of.get(job_id)

    def _after_end(self, record: Job) -> None:
        if record.id in self._dependents and self._store is not None:
            settle_dependents(_LockedDependents(self, self._store), record)
