"""Building workflows: jobs that wait for other jobs, described before any is written.

    wf = Workflow()
    fetch = wf.add("reports.fetch", {"day": "2026-01-01"}, name="fetch")
    parts = [wf.add("reports.render", {"part": i}, after=[fetch]) for i in range(3)]
    wf.add("reports.merge", after=[dep(p, on_failure="skip") for p in parts], name="merge")
    workflow_id = runtime.enqueue(wf)

`Workflow.add` returns a `Handle` (the job's id and its name in the workflow); a
later step lists handles, jobs or job ids in `after`, each bare (the dependency's
failure cancels the step: `fail`) or wrapped in `dep` with another `on_failure`
(`ignore`, `skip`). Nothing is written until `runtime.enqueue(wf)`, which writes the
whole graph in one atomic step or refuses it whole. `chain` and `group` build the
common shapes. The rule of release lives in `conveyor.core.dependencies`.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

import attrs

from ...core import Job, ValidationError
from ...core.dependencies import Edge, OnFailure
from ...core.errors import FieldError
from ...core.validation import parse_job_id
from ..ports.workflows import Graph, Member
from .enqueue_options import EnqueueOptions


@attrs.frozen(slots=True)
class Handle:
    """A job added to a `Workflow`: its id (fixed before it is written) and its name."""

    job_id: UUID
    name: str
    workflow_id: UUID


@attrs.frozen(slots=True)
class Dep:
    """One entry of `after` with its failure policy (made by `dep`)."""

    target: Handle | Job | UUID | str
    on_failure: OnFailure | str = OnFailure.FAIL


def dep(target: Handle | Job | UUID | str, on_failure: OnFailure | str = "fail") -> Dep:
    """`target` (a handle, job or job id) as an `after` entry whose failure (dead letter
    or cancel) does `on_failure` to the waiting job: `fail` (it ends cancelled, naming
    `target`; the default), `ignore` (it runs anyway) or `skip` (it ends skipped)."""
    return Dep(target, on_failure)


AfterEntry = Handle | Job | UUID | str | Dep


def _policy(value: OnFailure | str, field: str) -> OnFailure | FieldError:
    if isinstance(value, OnFailure):
        return value
    try:
        return OnFailure(value)
    except ValueError:
        names = ", ".join(p.value for p in OnFailure)
        return FieldError(field, f"must be one of {names}, got {value!r}")


def _target(
    target: object, field: str, workflow_id: UUID | None
) -> tuple[UUID, str | None] | FieldError:
    if isinstance(target, Handle):
        if target.workflow_id != workflow_id:
            return FieldError(field, f"handle {target.name!r} belongs to another workflow")
        return target.job_id, target.name
    if isinstance(target, Job):
        return target.id, None
    if isinstance(target, UUID):
        return target, None
    if isinstance(target, str):
        try:
            return UUID(target), None
        except ValueError:
            return FieldError(field, f"is not a job id: {target!r}")
    return FieldError(field, f"must be a handle, a job or a job id, got {type(target).__name__}")


def edges_for(
    dependent: UUID, after: Iterable[AfterEntry], field: str, workflow_id: UUID | None = None
) -> tuple[Edge, ...]:
    """The edges `after` gives the job `dependent`; a `ValidationError` names each bad
    entry (`field[i]`, or `field[i].on_failure`)."""
    if isinstance(after, (str, bytes)) or not isinstance(after, Iterable):
        raise ValidationError.of(field, "must be a list of handles, jobs or job ids")
    edges, errors = [], []
    for index, entry in enumerate(after):
        at = f"{field}[{index}]"
        target, policy = (
            (entry.target, entry.on_failure) if isinstance(entry, Dep) else (entry, OnFailure.FAIL)
        )
        found = _target(target, at, workflow_id)
        chosen = _policy(policy, f"{at}.on_failure")
        if isinstance(found, FieldError):
            errors.append(found)
        if isinstance(chosen, FieldError):
            errors.append(chosen)
        if not isinstance(found, FieldError) and not isinstance(chosen, FieldError):
            edges.append(Edge(dependent, found[0], chosen, found[1]))
    if errors:
        raise ValidationError(errors)
    return tuple(edges)


def check_waiting_options(
    options: EnqueueOptions, field: str, why: str = "a job that waits for others cannot have one"
) -> None:
    """Refuse the options a job that waits cannot have: it runs when released, so a
    `run_at` or `delay` has no meaning, and a unique key is not kept on waiting jobs."""
    errors = [
        FieldError(f"{field}.{name}", why)
        for name in ("run_at", "delay", "unique_key")
        if getattr(options, name) is not None
    ]
    if errors:
        raise ValidationError(errors)


def job_type_of(task: object) -> str:
    """The job type `task` names: a job type itself, or a task's (`conveyor.task`)."""
    job_type = getattr(task, "job_type", task)
    if not isinstance(job_type, str):
        raise ValidationError.of("job_type", f"must be a job type or a task, got {task!r}")
    return job_type


@attrs.frozen(slots=True)
class Step:
    """One job of a workflow, before it is built."""

    handle: Handle
    job_type: str
    args: Mapping[str, Any] | None
    options: EnqueueOptions
    after: tuple[AfterEntry, ...]


class Workflow:
    """A graph of jobs to enqueue as one (see the module's docstring). `tenant_id` is
    every step's tenant unless a step names its own; a job may wait only for jobs of
    its own tenant."""

    def __init__(self, *, id: UUID | str | None = None, tenant_id: str | None = None) -> None:
        self.id = uuid.uuid4() if id is None else _workflow_id(id)
        self.tenant_id = tenant_id
        self._steps: list[Step] = []
        self._names: set[str] = set()
        #: The step holding the workflow's unique key, if one does.
        self._keyed: str | None = None
        #: Handed to an enqueue: a step added after would never be written.
        self._sent = False

    @property
    def steps(self) -> Sequence[Step]:
        return tuple(self._steps)

    def add(
        self,
        task: object,
        args: Mapping[str, Any] | None = None,
        *,
        after: Iterable[AfterEntry] = (),
        name: str | None = None,
        **options: Any,
    ) -> Handle:
        """Add a job of `task` (a job type or a task) with `args`, waiting for `after`;
        `options` are `Runtime.enqueue`'s (but `id`, `run_at` and `delay`). One step
        that waits for nothing may take a unique key (`unique_key`, `unique_for`,
        `unique_states`): while it holds the key, enqueueing another workflow whose
        root asks for it writes nothing and returns the holder's id.
        `name` (default: the job type, numbered when repeated) is how its dependents'
        handlers find its result. Returns its handle. A workflow already handed to an
        enqueue takes no more steps."""
        if self._sent:
            raise ValidationError.of(
                "workflow",
                f"{self.id} was enqueued already: a step added now would never be written "
                "(an enqueue of a stored workflow id writes nothing); build a new Workflow",
            )
        job_type = job_type_of(task)
        defaults = getattr(task, "options", None)
        chosen = EnqueueOptions.of(defaults(**options) if callable(defaults) else options)
        if self.tenant_id is not None and chosen.tenant_id is None:
            chosen = attrs.evolve(chosen, tenant_id=self.tenant_id)
        if name is not None and (not isinstance(name, str) or not name):
            raise ValidationError.of("name", f"must be a non-empty string, got {name!r}")
        label = name if name is not None else self._fresh_name(job_type)
        if label in self._names:
            raise ValidationError.of("name", f"{label!r} is already a step of this workflow")
        field = f"steps[{label!r}]"
        entries = tuple(after)
        keyed = chosen.unique_key is not None
        self._check_key(keyed, entries, field)
        # A root too: the workflow's steps start as it is written or as they are released.
        why = "a workflow's step cannot have one: it runs once the workflow releases it"
        check_waiting_options(attrs.evolve(chosen, unique_key=None), field, why)
        if chosen.id is not None:
            raise ValidationError.of(f"{field}.id", "a workflow gives its jobs their ids")
        # The keyed root takes the workflow's id as its job id: whoever finds the key
        # held by it is given the id of the workflow that holds it.
        handle = Handle(self.id if keyed else uuid.uuid4(), label, self.id)
        if keyed:
            self._keyed = label
        edges_for(handle.job_id, entries, f"{field}.after", self.id)  # checked now, built later
        self._names.add(label)
        self._steps.append(Step(handle, job_type, args, chosen, entries))
        return handle

    def _check_key(self, keyed: bool, after: tuple[AfterEntry, ...], field: str) -> None:
        """A unique key is the workflow's: held by one step that waits for nothing."""
        if not keyed:
            return
        if after:
            raise ValidationError.of(
                f"{field}.unique_key",
                "a step that waits for others cannot hold a unique key; give it to the "
                "workflow's root (a step with no `after`)",
            )
        if self._keyed is not None:
            raise ValidationError.of(
                f"{field}.unique_key", f"step {self._keyed!r} already holds this workflow's key"
            )

    def _fresh_name(self, job_type: str) -> str:
        if job_type not in self._names:
            return job_type
        n = 2
        while f"{job_type}#{n}" in self._names:
            n += 1
        return f"{job_type}#{n}"

    def graph(self, now: datetime) -> Graph:
        """The jobs, built at `now`, and their edges, ready to write (the workflow takes
        no more steps from then on)."""
        if not self._steps:
            raise ValidationError.of("workflow", "has no steps")
        members = []
        for step in self._steps:
            field = f"steps[{step.handle.name!r}].after"
            options = attrs.evolve(step.options, id=step.handle.job_id)
            job = options.job(step.job_type, step.args, now)
            edges = edges_for(job.id, step.after, field, self.id)
            members.append(Member(job, edges, field, step.handle.name))
        self._sent = True
        return Graph(tuple(members), self.id)


@attrs.frozen(slots=True)
class Call:
    """One job for `chain` or `group`: its task, args and enqueue options."""

    task: object
    args: Mapping[str, Any] | None = None
    options: Mapping[str, Any] = attrs.field(factory=dict)


def call(task: object, args: Mapping[str, Any] | None = None, **options: Any) -> Call:
    """A job for `chain` or `group` (`options` as `Workflow.add` takes them, `name` too)."""
    return Call(task, args, options)


def chain(
    *calls: Call, on_failure: OnFailure | str = "fail", tenant_id: str | None = None
) -> Workflow:
    """A workflow running `calls` one after the other, each waiting for the one before
    under `on_failure`."""
    wf = Workflow(tenant_id=tenant_id)
    previous: Handle | None = None
    for item in calls:
        after = [] if previous is None else [dep(previous, on_failure)]
        previous = wf.add(item.task, item.args, after=after, **item.options)
    return wf


def group(
    *calls: Call,
    then: Call | None = None,
    on_failure: OnFailure | str = "fail",
    tenant_id: str | None = None,
) -> Workflow:
    """A workflow running `calls` side by side; with `then`, a last job that waits for
    all of them (each under `on_failure`) and reads their results."""
    wf = Workflow(tenant_id=tenant_id)
    handles = [wf.add(item.task, item.args, **item.options) for item in calls]
    if then is not None:
        after = [dep(h, on_failure) for h in handles]
        wf.add(then.task, then.args, after=after, **then.options)
    return wf


def _workflow_id(value: object) -> UUID:
    parsed = parse_job_id(value, "id")
    if isinstance(parsed, FieldError):
        raise ValidationError((parsed,))
    return parsed
