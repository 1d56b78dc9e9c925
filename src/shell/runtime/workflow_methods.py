"""`Runtime`'s workflow methods: enqueue a graph or a job `after` others, show a
workflow, cancel one, and read the results a dependent waited for.

Only a call that names dependencies comes here: a plain `enqueue` never does. The
graph is written by the queue's `enqueue_graph` in one atomic step
(`conveyor.shell.ports.workflows`); a backend without it refuses, naming `after`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any
from uuid import UUID

import attrs

from ...core import CancelResult, Job, JobStatus, ValidationError
from ...core.dependencies import Edge, WorkflowOutcome, workflow_outcome
from ..inputs import Inputs, read_inputs
from ..lookup import find_jobs
from ..ports import JobQueue, JobStore
from ..ports.workflows import supports_workflows
from .reads import as_job_id
from .workflow_writes import WorkflowWrites, workflow_queue
from .workflows import Workflow

if TYPE_CHECKING:
    from ..config import Config
    from ..job_view import JobView


@attrs.frozen(slots=True)
class MemberState:
    """One job of a workflow as it stands: its name, id, state, the error it ended with
    or is retrying after (none once completed), and what it waits for (the
    dependencies' names or ids, with policies)."""

    name: str
    job_id: UUID
    state: JobStatus | None
    error: str | None
    waits_for: tuple[tuple[str, str], ...]


@attrs.frozen(slots=True)
class WorkflowState:
    """A workflow's members, in the order they were added."""

    workflow_id: UUID
    members: tuple[MemberState, ...]

    @property
    def state(self) -> WorkflowOutcome:
        """Where the workflow stands as a whole: running until every member has
        ended, then completed, failed (a member went dead) or cancelled."""
        return workflow_outcome(member.state for member in self.members)

    @property
    def counts(self) -> Mapping[str, int]:
        """How many members are in each state."""
        out: dict[str, int] = {}
        for member in self.members:
            key = "unknown" if member.state is None else member.state.value
            out[key] = out.get(key, 0) + 1
        return out

    def as_dict(self) -> dict[str, Any]:
        return {
            "workflow_id": str(self.workflow_id),
            "state": self.state.value,
            "counts": dict(self.counts),
            "members": [
                {
                    "name": m.name,
                    "job_id": str(m.job_id),
                    "state": None if m.state is None else m.state.value,
                    "error": m.error,
                    "waits_for": [{"job": d, "on_failure": p} for d, p in m.waits_for],
                }
                for m in self.members
            ],
        }


class WorkflowMethods:
    """`Runtime`'s workflow methods (mixed into it)."""

    config: Config
    queue: JobQueue
    store: JobStore

    if TYPE_CHECKING:
        # Given by the other mixins of `Runtime`.
        def _workflows(self) -> WorkflowWrites: ...

        def get(self, job_id: UUID | str) -> JobView | None: ...

        def _lease(self) -> timedelta: ...

        def cancel(self, job_id: UUID | str) -> CancelResult: ...

    def enqueue_workflow(self, workflow: Workflow) -> UUID:
        """Write every job of `workflow` in one atomic step, or none (a `ValidationError`
        names each bad `after` entry: unknown ids, another tenant's jobs, cycles). The
        workflow's id, for `workflow` and `cancel_workflow`."""
        return self._workflows().enqueue_workflow(workflow)

    def enqueue_workflow_in_tx(self, conn: Any, workflow: Workflow) -> UUID:
        """`enqueue_workflow` inside the caller's open transaction on `conn` (SQL provider
        only), checked as `enqueue_in_tx` checks it: the whole graph commits with the
        caller's own writes, or not at all. Runs nothing inline and calls no hook."""
        return self._workflows().enqueue_workflow_in_tx(conn, workflow)

    def workflow(self, workflow_id: UUID | str) -> WorkflowState | None:
        """Each job of the workflow as it stands, and what it waits for; None when no
        workflow has that id."""
        queue = workflow_queue(self.queue, self.config.provider, "workflow_id")
        found = queue.workflow(as_job_id(workflow_id, "workflow_id"))
        if found is None:
            return None
        names = {job_id: name for name, job_id in found.names.items()}
        waits: dict[UUID, list[Edge]] = {}
        for edge in found.edges:
            waits.setdefault(edge.dependent, []).append(edge)
        views = find_jobs(self.queue, self.store, list(found.names.values()), self._lease())
        members = []
        for name, job_id in found.names.items():
            view = views[job_id]
            error = None
            failed = view is not None and view.state is not JobStatus.COMPLETED
            if failed and view is not None and view.job is not None and view.job.last_error:
                # A completed job ended with none: an earlier attempt's is history.
                error = f"{view.job.last_error.type}: {view.job.last_error.message}"
            edges = waits.get(job_id, [])
            shown = tuple(
                (names.get(e.dependency, str(e.dependency)), e.on_failure.value) for e in edges
            )
            state = None if view is None else view.state
            members.append(MemberState(name, job_id, state, error, shown))
        return WorkflowState(found.workflow_id, tuple(members))

    def workflow_of(self, job_id: UUID | str) -> UUID | None:
        """The id of the workflow `job_id` was enqueued in (as `enqueue(wf)` returned
        it); None for a job of no workflow, or on a backend without workflows."""
        if not supports_workflows(self.queue):
            return None
        return workflow_queue(self.queue, self.config.provider).workflow_of(as_job_id(job_id))

    def cancel_workflow(self, workflow_id: UUID | str) -> Mapping[str, int]:
        """Cancel every unfinished job of the workflow (waiting, queued, or by a request
        when running); how many of each `CancelResult` it met. A job that this call's
        cascade ended counts as cancelled; `finished` counts those that had ended."""
        state = self.workflow(workflow_id)
        if state is None:
            raise ValidationError.of("workflow_id", f"no workflow with id {workflow_id}")
        out: dict[str, int] = {}
        # Roots first: a cancelled root cascades to what waits for it, which then is
        # already finished when its own turn comes: cancelled by this call all the same.
        for member in state.members:
            result = self.cancel(member.job_id)
            if result is CancelResult.FINISHED and not _ended(member.state):
                now = self.get(member.job_id)
                if now is not None and now.state is JobStatus.CANCELLED:
                    result = CancelResult.CANCELLED
            out[result.value] = out.get(result.value, 0) + 1
        return out

    def _start_cron_workflow(
        self, build: Callable[[Workflow, datetime], None], workflow_id: UUID, slot: datetime
    ) -> list[Job]:
        """A cron slot's workflow: `build` fills it, written under the slot's id (one
        already stored is found, not written again)."""
        workflow = Workflow(id=workflow_id)
        build(workflow, slot)
        return self._workflows().write_workflow(workflow)

    def _workflow_state_of(self, workflow_id: UUID) -> WorkflowOutcome | None:
        """A workflow's state as a whole, for `cron list`; None when there is no such
        workflow."""
        state = self.workflow(workflow_id)
        return None if state is None or not state.members else state.state

    def inputs_of(self, job_id: UUID | str) -> Inputs:
        """The results of the jobs `job_id` waited for (see `Inputs`)."""
        return read_inputs(self.queue, self.store, as_job_id(job_id))


def _ended(state: JobStatus | None) -> bool:
    """A member that had ended when the workflow was read (or whose record is gone)."""
    return state is None or state.is_terminal
