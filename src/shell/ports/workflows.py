"""The workflow port: writing a graph of jobs that wait for each other, and reading it.

A backend that offers it stores, beside its jobs, the edges between them
(`core.dependencies.Edge`) and which workflow each job belongs to. It holds no
policy: in every write that ends a job (`finish`, `finish_many`,
`finish_cancelled`, `cancel`), it reads the edges and statuses of the jobs waiting
for the one that ended, asks `core.dependencies.decide_release` and writes what it
answers, inside that same atomic write (`adapters.dependents.settle_dependents`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable
from uuid import UUID

import attrs

from ...core import Job
from ...core.dependencies import Edge


@attrs.frozen(slots=True)
class Member:
    """One new job of a graph: the job as built (pending or parked), the edges it waits
    on (empty for a root), the field its `after` came from (named in errors) and its
    name in the workflow (its handle's)."""

    job: Job
    edges: tuple[Edge, ...] = ()
    field: str = "after"
    name: str | None = None


@attrs.frozen(slots=True)
class Graph:
    """New jobs and the edges between them (and to jobs already stored), written as one.
    `workflow_id` is None for a single job enqueued `after` others."""

    members: tuple[Member, ...]
    workflow_id: UUID | None = None


@attrs.frozen(slots=True)
class WorkflowMembers:
    """A stored workflow: its members' ids by name, in the order they were added, and
    every edge between them."""

    workflow_id: UUID
    names: Mapping[str, UUID]
    edges: tuple[Edge, ...]


@runtime_checkable
class WorkflowJobQueue(Protocol):
    """A queue whose jobs may wait for other jobs (see the module's docstring)."""

    def enqueue_graph(self, graph: Graph) -> list[Job]:
        """Write every member of `graph`, its edges and its workflow, all or nothing.

        In the same atomic step: read the jobs the edges name outside the graph,
        refuse the whole graph with `core.dependencies.check_graph`'s
        `ValidationError` (unknown ids, another tenant's, cycles), and write the
        records `core.dependencies.settle_new` makes (waiting, ready, or already
        ended when an input had failed). The records written, in member order."""

    def dependencies_of(self, job_id: UUID) -> Sequence[Edge]:
        """The edges `job_id` waits on (empty for a job that waits for nothing)."""

    def workflow(self, workflow_id: UUID) -> WorkflowMembers | None:
        """The stored workflow `workflow_id`, or None when there is none."""

    def workflow_of(self, job_id: UUID) -> UUID | None:
        """The workflow `job_id` was written in; None for a job of no workflow (one
        enqueued on its own, `after` others or not). One indexed read."""


@runtime_checkable
class TransactionalWorkflowJobQueue(WorkflowJobQueue, Protocol):
    """A workflow queue in the caller's own database (SQL)."""

    def enqueue_graph_in_tx(self, conn: Any, graph: Graph) -> list[Job]:
        """`enqueue_graph` inside the caller's open transaction on `conn`, with the checks
        of `TransactionalJobQueue.enqueue_in_tx`."""


def supports_workflows(queue: object) -> bool:
    """True when `queue` can hold jobs that wait for other jobs."""
    return isinstance(queue, WorkflowJobQueue)
