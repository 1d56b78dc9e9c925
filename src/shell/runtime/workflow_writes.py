"""Enqueueing jobs that wait for others: `enqueue(after=...)` and `enqueue(workflow)`.

Only a call that names dependencies comes here, so the plain enqueue path pays
nothing for workflows. The graph is written by the queue's `enqueue_graph` in one
atomic step (`conveyor.shell.ports.workflows`); a backend without it refuses, naming
the field.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol
from uuid import UUID

import attrs

from ...core import FieldError, Job, ValidationError
from ..ports import Clock, JobQueue
from ..ports.workflows import Graph, Member, TransactionalWorkflowJobQueue, WorkflowJobQueue
from .enqueue_options import EnqueueOptions
from .workflows import AfterEntry, Workflow, check_waiting_options, edges_for


class GraphEnqueuer(Protocol):
    """What these writes take of `enqueueing.Enqueuer`."""

    @property
    def queue(self) -> JobQueue: ...

    @property
    def clock(self) -> Clock: ...

    def new_jobs(
        self,
        job_type: str,
        args_list: Sequence[Mapping[str, Any] | None],
        options: EnqueueOptions,
        *,
        listed: bool = False,
    ) -> list[Job]: ...

    def warn_for(self, jobs: Sequence[Job]) -> None: ...

    def _written(self, jobs: Sequence[Job]) -> None: ...


def workflow_queue(queue: JobQueue, provider: str, field: str = "after") -> WorkflowJobQueue:
    """`queue` when it can hold jobs that wait for others; else why not, naming `field`."""
    if not isinstance(queue, WorkflowJobQueue):
        raise ValidationError.of(
            field,
            f"the {provider!r} backend does not support workflows (jobs that wait for "
            "other jobs) yet; use the memory, sqlite or postgres backend",
        )
    return queue


@attrs.frozen(slots=True)
class WorkflowWrites:
    """The enqueues of jobs that wait for others, through one call's `Enqueuer`.
    `pruned_at` says when retention pruned a record (the store's tombstones), so
    that a job refused for waiting on one is told so, not that the id is unknown."""

    enqueuer: GraphEnqueuer
    provider: str
    pruned_at: Callable[[UUID], datetime | None] | None = None

    def _write(self, graph: Graph, field: str) -> list[Job]:
        queue = workflow_queue(self.enqueuer.queue, self.provider, field)
        self.enqueuer.warn_for([m.job for m in graph.members])
        try:
            written = queue.enqueue_graph(graph)
        except ValidationError as refused:
            raise self._told_pruned(refused, graph) from None
        # A workflow id already stored gives back that workflow's jobs: none of them
        # was enqueued by this call.
        mine = {m.job.id for m in graph.members}
        self.enqueuer._written([j for j in written if j.id in mine and not j.status.is_terminal])
        return written

    def enqueue_workflow(self, workflow: Workflow) -> UUID:
        """See `WorkflowMethods.enqueue_workflow`."""
        return _written_id(workflow, self.write_workflow(workflow))

    def write_workflow(self, workflow: Workflow) -> list[Job]:
        """Write `workflow`, or find it stored under its id; its members as stored."""
        return self._write(workflow.graph(self.enqueuer.clock.now()), "workflow")

    def enqueue_workflow_in_tx(self, conn: Any, workflow: Workflow) -> UUID:
        """See `WorkflowMethods.enqueue_workflow_in_tx`."""
        queue = self.enqueuer.queue
        if not isinstance(queue, TransactionalWorkflowJobQueue):
            raise ValidationError.of(
                "provider",
                f"{self.provider!r} cannot enqueue a workflow in a transaction; use provider 'db'",
            )
        graph = workflow.graph(self.enqueuer.clock.now())
        self.enqueuer.warn_for([m.job for m in graph.members])
        try:
            written = queue.enqueue_graph_in_tx(conn, graph)
        except ValidationError as refused:
            raise self._told_pruned(refused, graph) from None
        return _written_id(workflow, written)

    def _told_pruned(self, refused: ValidationError, graph: Graph) -> ValidationError:
        """`refused`, with each dependency it found unknown told as pruned where the
        store remembers pruning it (a read after the refusal: only its wording)."""
        if self.pruned_at is None:
            return refused
        members = {m.job.id for m in graph.members}
        named = {
            f"{m.field}[{index}]": edge.dependency
            for m in graph.members
            for index, edge in enumerate(m.edges)
            if edge.dependency not in members
        }
        errors = []
        for error in refused.errors:
            target = named.get(error.field)
            unknown = target is not None and "is known" in error.reason
            at = self.pruned_at(target) if unknown and target is not None else None
            if at is not None:
                when = at.isoformat(timespec="seconds")
                error = FieldError(error.field, f"job {target} was pruned by retention at {when}")
            errors.append(error)
        return ValidationError(errors)

    def enqueue_after(
        self,
        job_type: str,
        args: Mapping[str, Any] | None,
        options: EnqueueOptions,
        after: Iterable[AfterEntry],
    ) -> Job:
        """`Runtime.enqueue` of one job that waits for `after` (jobs already enqueued)."""
        check_waiting_options(options, "enqueue")
        if options.id is not None:
            raise ValidationError.of("id", "a job that waits for others cannot be given an id")
        (job,) = self.enqueuer.new_jobs(job_type, [args], options)
        edges = edges_for(job.id, after, "after")
        (written,) = self._write(Graph((Member(job, edges, "after"),)), "after")
        return written

    def enqueue_many_after(
        self,
        job_type: str,
        args_list: Sequence[Mapping[str, Any] | None],
        options: EnqueueOptions,
        after: Iterable[AfterEntry],
    ) -> list[Job]:
        """`Runtime.enqueue_many` of jobs that each wait for `after`, written as one
        graph: all of them or none."""
        check_waiting_options(options, "enqueue_many")
        if options.id is not None:
            raise ValidationError.of("id", "a job that waits for others cannot be given an id")
        # Read once: `after` may be a generator, and every job waits on the same entries.
        entries = after if isinstance(after, (str, bytes)) else list(after)
        jobs = self.enqueuer.new_jobs(job_type, args_list, options, listed=True)
        if not jobs:
            edges_for(UUID(int=0), entries, "after")  # still refuse a bad `after`
            return []
        members = tuple(Member(job, edges_for(job.id, entries, "after"), "after") for job in jobs)
        return self._write(Graph(members), "after")


def _written_id(workflow: Workflow, written: Sequence[Job]) -> UUID:
    """The id `enqueue(workflow)` answers: the workflow's, or, when its root's unique
    key was held, the holder's (which is its workflow's id when a workflow holds it)."""
    keys = {step.options.unique_key for step in workflow.steps} - {None}
    if len(written) == 1 and written[0].id != workflow.id:
        holder = written[0].unique
        if holder is not None and holder.key in keys:
            return written[0].id
    return workflow.id
