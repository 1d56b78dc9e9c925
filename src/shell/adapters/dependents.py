"""Settling the jobs that wait for a job that just ended, inside the write that ended it.

Every backend with workflows calls `settle_dependents` from within its own atomic
step (under the memory queue's lock, inside the SQL transaction), handing it a
`DependentsIO` over that step's reads and writes. The rule is the core's
(`decide_release`); this loop only walks the graph: a dependent that ends
(cancelled or skipped) is itself an ended job to the jobs waiting for it.

Nothing here counts: each decision is made afresh from the statuses the step
sees, and only a job still `waiting` is moved, so a finish written twice moves
nothing the second time, and a finish refused by its fence never gets here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Protocol
from uuid import UUID

from ...core import Job, JobStatus
from ...core.dependencies import Edge, decide_release, settle


class DependentsIO(Protocol):
    """The reads and writes of one atomic step that `settle_dependents` needs."""

    def dependents_of(self, job_id: UUID) -> Sequence[UUID]:
        """The ids of the jobs with an edge to `job_id`."""

    def waiting_job(self, job_id: UUID) -> Job | None:
        """`job_id` while it is waiting, else None."""

    def edges_of(self, job_id: UUID) -> Sequence[Edge]:
        """The edges `job_id` waits on."""

    def statuses_of(self, job_ids: Sequence[UUID]) -> Mapping[UUID, JobStatus | None]:
        """The status of each of `job_ids` as it stands (queued or recorded; a queued
        job's may be any unfinished one), None for an unknown id. One read for all:
        a fan-in's every input is read on each of their finishes."""

    def release(self, job: Job) -> None:
        """Put the released (pending) `job` in its ready queue."""

    def end(self, job: Job) -> None:
        """Take the waiting job out of the queue and record `job` (cancelled)."""


def settle_dependents(io: DependentsIO, ended: Job, now: datetime | None = None) -> list[Job]:
    """Release or end every job waiting for `ended` that may now move, and, through the
    ones that end, every job waiting for those. The records written."""
    when = now or ended.finished_at or ended.created_at
    todo, written = [ended.id], []
    while todo:
        for dependent in io.dependents_of(todo.pop()):
            job = io.waiting_job(dependent)
            if job is None:
                continue  # already released or ended: a decision is carried out once
            edges = io.edges_of(dependent)
            outcomes = io.statuses_of([edge.dependency for edge in edges])
            record = settle(job, decide_release(edges, outcomes), when)
            if record is None:
                continue
            if record.status is JobStatus.PENDING:
                io.release(record)
            else:
                io.end(record)
                todo.append(record.id)
            written.append(record)
    return written
