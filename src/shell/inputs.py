"""The results a dependent job waited for, as its handler reads them (`ctx.inputs()`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from uuid import UUID

import attrs

from .ports import JobStore, records_of
from .ports.workflows import WorkflowJobQueue


@attrs.frozen(slots=True)
class Inputs:
    """The results of the jobs a dependent waited for, by their name in the workflow and
    by id (a failed or cancelled one's result is None). `inputs["fetch"]`,
    `inputs[job_id]` or `inputs[handle]` each give one result."""

    by_name: Mapping[str, Any]
    by_id: Mapping[UUID, Any]

    def __getitem__(self, key: object) -> Any:
        job_id = getattr(key, "job_id", key)
        if isinstance(job_id, UUID):
            return self.by_id[job_id]
        if isinstance(job_id, str):
            if job_id in self.by_name:
                return self.by_name[job_id]
            return self.by_id[UUID(job_id)]
        raise KeyError(key)

    def __len__(self) -> int:
        return len(self.by_id)


def read_inputs(queue: object, store: JobStore, job_id: UUID) -> Inputs:
    """The results the store holds for the jobs `job_id` waits on (none on a queue
    without workflows)."""
    if not isinstance(queue, WorkflowJobQueue):
        return NO_INPUTS
    by_name: dict[str, Any] = {}
    by_id: dict[UUID, Any] = {}
    edges = queue.dependencies_of(job_id)
    records = records_of(store, [edge.dependency for edge in edges])
    for edge in edges:
        record = records.get(edge.dependency)
        result = None if record is None else record.result
        by_id[edge.dependency] = result
        if edge.name is not None:
            by_name[edge.name] = result
    return Inputs(by_name, by_id)


NO_INPUTS = Inputs({}, {})


@attrs.frozen(slots=True)
class KnownInputs:
    """Inputs read already, as a context's reader: what a handler run in a child
    process gets (the store stays in the worker's process)."""

    inputs: Inputs

    def __call__(self) -> Inputs:
        return self.inputs
