"""The results a dependent job waited for, as its handler reads them (`ctx.inputs()`)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any
from uuid import UUID

import attrs

from .ports import JobStore, records_of
from .ports.workflows import WorkflowJobQueue


@attrs.frozen(slots=True)
class Inputs(Mapping[Any, Any]):
    """The results of the jobs a dependent waited for (a failed or cancelled one's
    result is None): a read-only mapping from each input's name in the workflow (its
    id where it has none) to its result, in the order the job waited for them.
    `inputs["fetch"]`, `inputs[job_id]`, `inputs[str(job_id)]` or `inputs[handle]`
    each give one result; `inputs.values()` all of them, for a fan-in."""

    by_name: Mapping[str, Any]
    by_id: Mapping[UUID, Any]
    #: Each named input's name, by id.
    names: Mapping[UUID, str] = attrs.field(factory=dict)

    def __getitem__(self, key: object) -> Any:
        job_id = getattr(key, "job_id", key)
        if isinstance(job_id, UUID) and job_id in self.by_id:
            return self.by_id[job_id]
        if isinstance(job_id, str):
            if job_id in self.by_name:
                return self.by_name[job_id]
            try:
                return self.by_id[UUID(job_id)]
            except (ValueError, KeyError):
                pass
        raise KeyError(f"no input named {key!r}; the inputs are {self._listed()}")

    def __iter__(self) -> Iterator[Any]:
        return (self.names.get(job_id, job_id) for job_id in self.by_id)

    def __len__(self) -> int:
        return len(self.by_id)

    def _listed(self) -> str:
        return ", ".join(repr(key) if isinstance(key, str) else str(key) for key in self) or "none"


def read_inputs(queue: object, store: JobStore, job_id: UUID) -> Inputs:
    """The results the store holds for the jobs `job_id` waits on (none on a queue
    without workflows)."""
    if not isinstance(queue, WorkflowJobQueue):
        return NO_INPUTS
    by_name: dict[str, Any] = {}
    by_id: dict[UUID, Any] = {}
    names: dict[UUID, str] = {}
    edges = queue.dependencies_of(job_id)
    records = records_of(store, [edge.dependency for edge in edges])
    for edge in edges:
        record = records.get(edge.dependency)
        result = None if record is None else record.result
        by_id[edge.dependency] = result
        if edge.name is not None:
            by_name[edge.name] = result
            names[edge.dependency] = edge.name
    return Inputs(by_name, by_id, names)


NO_INPUTS = Inputs({}, {})


@attrs.frozen(slots=True)
class KnownInputs:
    """Inputs read already, as a context's reader: what a handler run in a child
    process gets (the store stays in the worker's process)."""

    inputs: Inputs

    def __call__(self) -> Inputs:
        return self.inputs
