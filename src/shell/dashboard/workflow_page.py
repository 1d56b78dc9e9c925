"""The dashboard's workflow page: a workflow drawn as a graph, and its cancel.

The members and their states come from `Runtime.workflow`, the reader behind
`conveyor workflow show`; where each box goes is decided by the pure
`core.graph_layout.place`, and the template turns boxes and arrows into SVG on the
server (no script draws it). The cancel is `Runtime.cancel_workflow`, an action like
every other: `app.Dashboard` passes it through `gate.Gate` (read-only, origin, CSRF
token) before it runs.

A member's job page links back to its workflow through `Runtime.workflow_of`, one
indexed read of the workflow each job was enqueued in.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any
from uuid import UUID

import attrs
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import BaseRoute, Route

from ...core import FieldError, JobStatus
from ...core.dependencies import SKIPPED, OnFailure
from ...core.graph_layout import NODE_HEIGHT, NODE_WIDTH, Drawing, place
from ...core.validation import parse_job_id
from ..runtime import Runtime
from ..runtime.workflow_methods import WorkflowState
from ..terminal import shown
from .reachability import BackendReads

Endpoint = Callable[[Request], Awaitable[Response]]
ActionHandler = Callable[[Request, dict[str, str]], Awaitable[Response]]

#: The longest name a box shows in full; a longer one is cut, whole in its tooltip.
LABEL_CHARS = 26


@attrs.frozen(slots=True)
class Node:
    """One box of the graph: a member, or a job outside the workflow that one waits for."""

    key: str  # the job id, as text
    name: str
    state: str  # a status's value, "skipped", or "unknown" (no record: pruned)
    error: str | None
    member: bool


@attrs.frozen(slots=True)
class WorkflowView:
    """What the workflow page shows: the workflow, its boxes by key and the drawing."""

    state: WorkflowState
    nodes: Mapping[str, Node]
    drawing: Drawing
    policies: Mapping[tuple[str, str], str]  # (dependency, dependent) -> a policy not `fail`

    @property
    def counts(self) -> dict[str, int]:
        """How many members each state the graph draws has (skipped apart)."""
        shown = [self.nodes[str(m.job_id)].state for m in self.state.members]
        return {state: shown.count(state) for state in dict.fromkeys(shown)}

    @property
    def unfinished(self) -> bool:
        """True while a member can still be cancelled (one whose record is gone, purged
        or pruned, cannot)."""
        return any(m.state is not None and not m.state.is_terminal for m in self.state.members)


def _shown_state(state: JobStatus | None, error: str | None) -> str:
    if state is None:
        return "unknown"
    # Skipped is a cancelled record told apart by its error type (core.dependencies).
    if error is not None and error.startswith(f"{SKIPPED}:"):
        return "skipped"
    return state.value


def label(name: str) -> str:
    """`name` as a box shows it: cut to `LABEL_CHARS` characters."""
    return name if len(name) <= LABEL_CHARS else name[: LABEL_CHARS - 1] + "…"


def workflow_view(runtime: Runtime, workflow_id: UUID) -> WorkflowView | None:
    """The page's data for `workflow_id`, or None when no workflow has that id."""
    state = runtime.workflow(workflow_id)
    if state is None:
        return None
    nodes: dict[str, Node] = {}
    by_name = {m.name: str(m.job_id) for m in state.members}
    for m in state.members:
        nodes[str(m.job_id)] = Node(
            str(m.job_id), m.name, _shown_state(m.state, m.error), m.error, True
        )
    edges: list[tuple[str, str]] = []
    policies: dict[tuple[str, str], str] = {}
    for m in state.members:
        for dependency, policy in m.waits_for:
            # A dependency outside the workflow is named by its id (`Runtime.workflow`).
            key = by_name.get(dependency, dependency)
            if key not in nodes:
                known = parse_job_id(key)
                view = None if isinstance(known, FieldError) else runtime.get(known)
                error = None
                if view is not None and view.job is not None and view.job.last_error is not None:
                    error = f"{view.job.last_error.type}: {view.job.last_error.message}"
                shown = _shown_state(None if view is None else view.state, error)
                nodes[key] = Node(key, key[:8], shown, error, False)
            edges.append((key, str(m.job_id)))
            if policy != OnFailure.FAIL.value:
                policies[(key, str(m.job_id))] = policy
    return WorkflowView(state, nodes, place(list(nodes), edges), policies)


class WorkflowPages:
    """The workflow page and its cancel, mixed into `app.Dashboard`."""

    runtime: Runtime
    backend: BackendReads

    def _render(
        self, request: Request, template: str, context: Mapping[str, Any], status: int = 200
    ) -> HTMLResponse:
        raise NotImplementedError  # the dashboard's

    def _error(self, request: Request, status: int, message: str) -> HTMLResponse:
        raise NotImplementedError  # the dashboard's

    def _redirect(self, request: Request, path: str, **params: Any) -> Response:
        raise NotImplementedError  # the dashboard's

    def workflow_routes(
        self, page: Callable[[Endpoint], Endpoint], action: Callable[[ActionHandler], Endpoint]
    ) -> list[BaseRoute]:
        """The routes, each behind the dashboard's guard for pages or for actions."""
        return [
            Route("/workflows/{workflow_id}", page(self.workflow), methods=["GET"]),
            Route(
                "/workflows/{workflow_id}/cancel", action(self.workflow_cancel), methods=["POST"]
            ),
        ]

    def _no_workflow(self, request: Request, raw: str) -> HTMLResponse:
        message = f"No workflow {shown(raw)}: it is unknown to this backend."
        return self._error(request, 404, message)

    async def workflow(self, request: Request) -> Response:
        raw = request.path_params["workflow_id"]
        workflow_id = parse_job_id(raw, "workflow_id")
        if isinstance(workflow_id, FieldError):
            return self._no_workflow(request, raw)
        view = await self.backend.read(workflow_view, self.runtime, workflow_id)
        if view is None:
            return self._no_workflow(request, raw)
        return self._render(
            request,
            "workflow.html",
            {
                "title": f"Workflow {workflow_id}",
                "page": "jobs",
                "view": view,
                "label": label,
                "node_width": NODE_WIDTH,
                "node_height": NODE_HEIGHT,
            },
        )

    async def workflow_cancel(self, request: Request, form: dict[str, str]) -> Response:
        raw = request.path_params["workflow_id"]
        workflow_id = parse_job_id(raw, "workflow_id")
        if isinstance(workflow_id, FieldError):
            return self._no_workflow(request, raw)
        found = await self.backend.read(self.runtime.workflow, workflow_id)
        if found is None:
            return self._no_workflow(request, raw)
        await self.backend.act(self.runtime.cancel_workflow, workflow_id)
        # Counted before, not from the cancel's answer: a member ended by the cancel of
        # one it waits for is answered "finished" when its own turn comes.
        ended = sum(1 for m in found.members if m.state is not None and not m.state.is_terminal)
        return self._redirect(request, f"/workflows/{workflow_id}", done="wf-cancelled", n=ended)

    async def workflow_of(self, job_id: UUID) -> UUID | None:
        """The workflow a job page links back to: the one the job was enqueued in."""
        return await self.backend.read(self.runtime.workflow_of, job_id)
