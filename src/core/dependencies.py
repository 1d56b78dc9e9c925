"""Dependencies between jobs: when a waiting job is let go, and which graphs are sound.

Theory of operation
-------------------
A job enqueued `after` other jobs is `waiting`: it is never claimed and holds no
worker slot. Each of its `Edge`s names one job it waits for and what a failure of
that job does to it (`OnFailure`). Whether it may run is decided by one function,
`decide_release`, from nothing but its edges and the statuses recorded for the jobs
they name: there is no counter of finished inputs, so a finish written twice, or a
stale one refused by its fence, can never move a dependent twice or too early. The
backends call it inside the very write that records a dependency's outcome, and
carry out what it answers with `settle`.

The rule, in order:

* a dependency that failed (dead-lettered or cancelled) under `fail` ends the
  dependent at once: cancelled, its error of type `DependencyFailed` naming it;
* otherwise, while any dependency is unfinished, the dependent stays waiting;
* once all have finished: if one under `skip` failed, the dependent ends skipped (a
  cancelled record whose error type is `Skipped`); else it is released (`pending`).
  A failure under `ignore` counts as finished.

Ending early only for `fail` keeps the end the same whatever order the inputs finish
in: a `fail` failure decides the end whatever else happens, a `skip` one does not
(a later `fail` failure would win). Skipped is not a status of its own: it is a
cancelled record told apart by its error type, so every reader, count and prune rule
already knows it. A dependent that ended this way is itself a failed dependency to
the jobs waiting for it: the end cascades through their own policies.

A revived dead letter re-opens nothing already decided: a dependent it cancelled
stays cancelled. A dependent still waiting (its other inputs unfinished, or the
revived job's edge under `skip` or `ignore`) simply sees the revived job's next
outcome instead of the old one.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from uuid import UUID

import attrs
from returns.result import Success

from .errors import FieldError, ValidationError
from .job import ErrorInfo, Job, JobStatus
from .transitions import Event, replace, transition

#: The error type of a dependent cancelled because a job it waited for failed.
DEPENDENCY_FAILED = "DependencyFailed"
#: The error type of a dependent skipped because a job it waited for under `skip` failed.
SKIPPED = "Skipped"


class OnFailure(enum.Enum):
    """What a dependency's failure (dead letter or cancel) does to the job waiting for it."""

    FAIL = "fail"  # the dependent ends cancelled, naming the dependency (the default)
    IGNORE = "ignore"  # the dependent runs anyway, once everything has finished
    SKIP = "skip"  # the dependent ends skipped, once everything has finished


@attrs.frozen(slots=True)
class Edge:
    """`dependent` waits for `dependency`; `name` is the dependency's handle name in its
    workflow, under which the dependent's handler finds its result (None: by id only)."""

    dependent: UUID
    dependency: UUID
    on_failure: OnFailure = OnFailure.FAIL
    name: str | None = None


@attrs.frozen(slots=True)
class Stay:
    """Keep waiting: a dependency has not finished."""


@attrs.frozen(slots=True)
class Release:
    """Every dependency finished and none stops the dependent: make it pending."""


@attrs.frozen(slots=True)
class CancelDependent:
    """A dependency under `fail` failed: end the dependent cancelled, naming it."""

    dependency: UUID
    reason: str


@attrs.frozen(slots=True)
class SkipDependent:
    """Every dependency finished and one under `skip` failed: end the dependent skipped."""

    dependency: UUID
    reason: str


ReleaseDecision = Stay | Release | CancelDependent | SkipDependent

STAY = Stay()
RELEASE = Release()


def _label(edge: Edge) -> str:
    return f"{edge.name!r} ({edge.dependency})" if edge.name else str(edge.dependency)


def decide_release(
    edges: Iterable[Edge], outcomes: Mapping[UUID, JobStatus | None]
) -> ReleaseDecision:
    """What happens to a waiting job with `edges`, given the statuses recorded for the
    jobs they name (`outcomes`; a missing or None entry is unfinished)."""
    unfinished = False
    skip: Edge | None = None
    for edge in edges:
        status = outcomes.get(edge.dependency)
        if status is None or not status.is_terminal:
            unfinished = True
        elif status is JobStatus.COMPLETED or edge.on_failure is OnFailure.IGNORE:
            continue
        elif edge.on_failure is OnFailure.FAIL:
            reason = f"dependency {_label(edge)} ended {status.value}"
            return CancelDependent(edge.dependency, reason)
        elif skip is None:
            skip = edge
    if unfinished:
        return STAY
    if skip is not None:
        status = outcomes[skip.dependency]
        state = "unfinished" if status is None else status.value
        # The record's error type already says Skipped: the message says why.
        return SkipDependent(skip.dependency, f"dependency {_label(skip)} ended {state}")
    return RELEASE


def settle(job: Job, decision: ReleaseDecision, now: datetime) -> Job | None:
    """The record `decision` makes of the waiting `job` at `now`: pending, or cancelled
    with the reason as a non-retryable error; None when it stays waiting, or when `job`
    is no longer waiting (a decision is carried out once)."""
    if isinstance(decision, Stay) or job.status is not JobStatus.WAITING:
        return None
    if isinstance(decision, Release):
        moved = transition(job, Event.RELEASE, now)
    else:
        kind = DEPENDENCY_FAILED if isinstance(decision, CancelDependent) else SKIPPED
        error = ErrorInfo(kind, decision.reason, retryable=False)
        moved = transition(job, Event.CANCEL, now, last_error=error)
    return moved.unwrap() if isinstance(moved, Success) else None


def waiting(job: Job) -> Job:
    """`job`, just built, held back as waiting for its dependencies."""
    return replace(job, status=JobStatus.WAITING)


def _cycle_errors(
    members: Mapping[UUID, tuple[Job, Sequence[Edge], str]],
) -> list[FieldError]:
    """An error on the edge that closes each cycle among `members` (depth first)."""
    done: set[UUID] = set()
    errors: list[FieldError] = []

    def visit(node: UUID, path: list[UUID]) -> None:
        _, edges, field = members[node]
        path.append(node)
        for index, edge in enumerate(edges):
            target = edge.dependency
            if target in path:
                loop = [*path[path.index(target) :], target]
                shown = " -> ".join(str(members[i][0].id)[:8] for i in loop)
                errors.append(FieldError(f"{field}[{index}]", f"closes a cycle: {shown}"))
            elif target in members and target not in done and target != node:
                visit(target, path)
        path.pop()
        done.add(node)

    for node in members:
        if node not in done:
            visit(node, [])
    return errors


def check_graph(
    members: Sequence[tuple[Job, Sequence[Edge], str]],
    existing: Mapping[UUID, Job],
) -> ValidationError | None:
    """Why the new jobs `members` (each with the edges it waits on and the field its
    `after` came from) cannot be written, or None. `existing` holds the jobs already
    stored that the edges name and that are not members; any other id is unknown. A job
    may wait only for jobs of its own tenant, never for itself, each at most once, and
    never in a cycle."""
    by_id = {job.id: (job, edges, field) for job, edges, field in members}
    errors: list[FieldError] = []
    for job, edges, field in members:
        seen: set[UUID] = set()
        for index, edge in enumerate(edges):
            at, target = f"{field}[{index}]", edge.dependency
            other = by_id[target][0] if target in by_id else existing.get(target)
            if target == job.id:
                errors.append(FieldError(at, "a job cannot wait for itself"))
            elif target in seen:
                errors.append(FieldError(at, f"job {target} is listed twice"))
            elif other is None:
                errors.append(FieldError(at, f"no job with id {target} is known"))
            elif other.tenant_id != job.tenant_id:
                errors.append(FieldError(at, f"job {target} belongs to another tenant"))
            seen.add(target)
    if not errors:
        errors = _cycle_errors(by_id)
    return ValidationError(errors) if errors else None


def settle_new(
    members: Sequence[tuple[Job, Sequence[Edge]]],
    existing: Mapping[UUID, JobStatus | None],
    now: datetime,
) -> list[Job]:
    """The records to write for a checked graph (`check_graph`), in the order given:
    a member without edges as built; one with edges waiting, or already settled when
    the jobs it waits for had finished before it was written (`existing`: their
    statuses)."""
    outcomes: dict[UUID, JobStatus | None] = dict(existing)
    settled: dict[UUID, Job] = {}
    pending = {job.id: (job, edges) for job, edges in members}
    while pending:
        progressed = False
        for job_id, (job, edges) in list(pending.items()):
            if any(e.dependency in pending for e in edges):
                continue  # a member it waits for is not settled yet
            record = waiting(job) if edges else job
            if edges:
                record = settle(record, decide_release(edges, outcomes), now) or record
            settled[job_id] = record
            outcomes[job_id] = record.status
            del pending[job_id]
            progressed = True
        if not progressed:
            raise ValueError("settle_new needs a graph without cycles (check_graph first)")
    return [settled[job.id] for job, _ in members]


class WorkflowOutcome(enum.Enum):
    """Where a workflow stands as a whole (`workflow_outcome`)."""

    RUNNING = "running"  # a member has yet to end
    COMPLETED = "completed"  # every member completed
    FAILED = "failed"  # every member ended, one of them a dead letter
    CANCELLED = "cancelled"  # every member ended, none known dead, one cancelled or skipped
    ENDED = "ended"  # every member ended, the rest completed, but a record is gone


def workflow_outcome(states: Iterable[JobStatus | None]) -> WorkflowOutcome:
    """A workflow's outcome from its members' states. A member whose record is gone
    (None: pruned or purged, which only an ended one is) has an end nobody can read,
    so a workflow with one is `completed` only if it is not: `ended` says so. A dead
    letter makes the workflow failed even when dependents under `ignore` ran on,
    since one of its jobs never did its work."""
    listed = list(states)
    known = [state for state in listed if state is not None]
    if any(not state.is_terminal for state in known):
        return WorkflowOutcome.RUNNING
    if JobStatus.FAILED in known:
        return WorkflowOutcome.FAILED
    if JobStatus.CANCELLED in known:
        return WorkflowOutcome.CANCELLED
    if known and len(known) == len(listed):
        return WorkflowOutcome.COMPLETED
    return WorkflowOutcome.ENDED
