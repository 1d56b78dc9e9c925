"""Settling the jobs that wait for a job being ended, inside the script that ends it.

The decision is the core's (`core.dependencies`, walked by
`adapters.dependents.settle_dependents`), made here in Python from facts read in
one script per ended job (`dependents_read.lua`): the jobs waiting for it, their
edges, and the status of every job those edges name. The ending script
(finish, finish_many, finish_cancelled, cancel) then receives the decision, the
cascade included, as a settle section and carries it out in its own fenced write,
after checking every fact it rests on (see `lua/dependents.lua`). A fact that
changed meanwhile (an input of the same fan-in finished in between) makes the
script write nothing and answer STALE: the decision is read and made again. So two
inputs of one fan-in finishing at once cannot both see the other unfinished, and no
counter exists that a finish sent twice could move twice.

A job nothing waits for pays one EXISTS inside its ending script, and nothing else:
the first send carries no section, and only a job with dependents is answered
SETTLE and sent again with one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any
from uuid import UUID

from returns.result import Success

from ....core import Job, JobStatus
from ....core.dependencies import Edge, OnFailure
from ...codec import decode
from ..dependents import settle_dependents
from .arguments import placement, record_args
from .base import RedisQueueBase
from .client import text
from .scripts import Script

#: What an ending script answers when the job has dependents and it was sent without
#: a settle section, and when a fact of its section no longer holds.
SETTLE, STALE = 2, 3
#: How often a decision is made again before giving up (each retry means another
#: input of the same dependents finished in between).
STALE_TRIES = 1000

#: The most inputs a stay's witness group names.
WITNESSES = 16
#: Unfinished statuses, the least likely to move first.
_STEADIEST = {"waiting": 0, "scheduled": 1, "ready": 2}

#: The status a queued job's place stands for (any unfinished one decides alike).
_QUEUED = {
    "ready": JobStatus.PENDING,
    "processing": JobStatus.RUNNING,
    "scheduled": JobStatus.SCHEDULED,
    "waiting": JobStatus.WAITING,
}


def status_named(name: str) -> JobStatus | None:
    """The status a fact names: a queued job's place, a record's status, or None."""
    queued = _QUEUED.get(name)
    if queued is not None or not name:
        return queued
    try:
        return JobStatus(name)
    except ValueError:
        return None


def decoded(body: bytes | str | None) -> Job | None:
    if not body:
        return None
    found = decode(body)
    return found.unwrap() if isinstance(found, Success) else None


def edge_json(edge: Edge) -> str:
    """An edge as stored in its dependent's edge list."""
    return json.dumps([str(edge.dependency), edge.on_failure.value, edge.name])


def edge_of(dependent: UUID, raw: bytes | str) -> Edge:
    dependency, on_failure, name = json.loads(text(raw))
    return Edge(dependent, UUID(dependency), OnFailure(on_failure), name)


class _Plan:
    """`DependentsIO` that reads through `dependents_read.lua` and keeps what it would
    write, with the facts each decision rests on, for the ending script's section.

    A dependent the plan moves (released or ended) rests on every status it was
    decided from, and on itself still waiting. One that stays rests on less: on one
    of the inputs seen unfinished still being as seen (a *witness*), since a stay is
    right while any input is unfinished; an input that failed meanwhile under `fail`
    ended the dependent in its own script, which the stay leaves alone. So the
    inputs of a wide fan-in finishing at once do not refuse each other's stays.
    """

    def __init__(self, read: Any, ended: Job) -> None:
        self._read = read
        self.facts: dict[str, str] = {}
        self.moved: dict[UUID, JobStatus] = {ended.id: ended.status}
        self.released: list[Job] = []
        self.ended: list[Job] = []
        self._waiting: dict[UUID, tuple[Job | None, list[Edge]]] = {}
        self._deciding: UUID | None = None
        #: Per dependent decided: the statuses its inputs were seen in.
        self._seen: dict[UUID, dict[str, str]] = {}
        #: Per waiting dependent read: its inputs' statuses, read along with it.
        self._inputs: dict[UUID, dict[UUID, str]] = {}

    def _fact(self, job_id: str, status: str) -> None:
        # A fact read twice keeps its first reading; if the two differ, the script
        # finds one of them false and the decision is made again.
        self.facts.setdefault(job_id, status)

    def dependents_of(self, job_id: UUID) -> Sequence[UUID]:
        found: list[UUID] = []
        for raw_id, raw_status, body, raw_edges, inputs in self._read("waiting", str(job_id)):
            dependent, status = UUID(text(raw_id)), text(raw_status)
            # One no longer waiting was decided once already: nothing rests on it.
            job = decoded(body) if status == "waiting" else None
            edges = [edge_of(dependent, e) for e in raw_edges]
            self._waiting[dependent] = (job, edges)
            if inputs:
                self._inputs[dependent] = {
                    edge.dependency: text(name) for edge, name in zip(edges, inputs, strict=True)
                }
            found.append(dependent)
        return found

    def waiting_job(self, job_id: UUID) -> Job | None:
        if job_id in self.moved or job_id not in self._waiting:
            return None
        return self._waiting[job_id][0]

    def edges_of(self, job_id: UUID) -> Sequence[Edge]:
        self._deciding = job_id
        return self._waiting[job_id][1] if job_id in self._waiting else ()

    def statuses_of(self, job_ids: Sequence[UUID]) -> Mapping[UUID, JobStatus | None]:
        # Read with the dependents, once: a dependent decided again later in the same
        # cascade reads afresh.
        known = self._inputs.pop(self._deciding, {}) if self._deciding else {}
        if all(job_id in known for job_id in job_ids):
            raw = [known[job_id] for job_id in job_ids]
        else:
            raw = self._read("statuses", *map(str, job_ids)) if job_ids else []
        seen = self._seen.setdefault(self._deciding, {}) if self._deciding else {}
        out: dict[UUID, JobStatus | None] = {}
        for job_id, name in zip(job_ids, raw, strict=True):
            seen[str(job_id)] = text(name)
            out[job_id] = self.moved.get(job_id, status_named(text(name)))
        return out

    def _moving(self, job: Job) -> None:
        self.moved[job.id] = job.status
        self._fact(str(job.id), "waiting")
        for job_id, status in self._seen.get(job.id, {}).items():
            self._fact(job_id, status)

    def release(self, job: Job) -> None:
        self._moving(job)
        self.released.append(job)

    def end(self, job: Job) -> None:
        self._moving(job)
        self.ended.append(job)

    def _witnesses(self) -> list[list[tuple[str, str]]]:
        """For each dependent that stays, the inputs seen unfinished that this plan
        does not move itself (none: its stay rests on this plan's own writes)."""
        groups = []
        for dependent, seen in self._seen.items():
            if dependent in self.moved:
                continue
            group = [
                (job_id, name)
                for job_id, name in seen.items()
                if UUID(job_id) not in self.moved
                and ((status := status_named(name)) is None or not status.is_terminal)
            ]
            if group:
                # A few of the likeliest to be still as seen (the least advanced) make
                # the group: should all of them have moved, the decision is made again.
                group.sort(key=lambda g: _STEADIEST.get(g[1], len(_STEADIEST)))
                groups.append(group[:WITNESSES])
        return groups

    def section(self) -> list[object]:
        """The settle section: the facts, the witnesses of each stay, the jobs to
        release, the records to write."""
        args: list[object] = [len(self.facts)]
        for job_id, status in self.facts.items():
            args += [job_id, status]
        groups = self._witnesses()
        args.append(len(groups))
        for group in groups:
            args.append(len(group))
            for job_id, status in group:
                args += [job_id, status]
        args.append(len(self.released))
        for job in self.released:
            args += placement(job)
        args.append(len(self.ended))
        for job in self.ended:
            args += record_args(job)
        return args


class Settling(RedisQueueBase):
    """The ending writes' way through `SETTLE` and `STALE`."""

    def _read_dependents(self, what: str, *ids: str) -> Any:
        return self._run(self._dependents_read, what, *ids)

    def _ending(self, what: str, script: Script, args: list[object], ended: Job) -> Any:
        """Send the ending `script` with `args`; when `ended` has dependents, decide
        what happens to them and send it again with that decision, until its facts
        hold."""
        reply = self._write(what, script, *args)
        tries = 0
        while int(reply) in (SETTLE, STALE):
            if tries == STALE_TRIES:
                raise RuntimeError(f"the dependents of job {ended.id} kept changing")
            tries += 1
            plan = _Plan(self._read_dependents, ended)
            settle_dependents(plan, ended)
            reply = self._write(what, script, *args, *plan.section())
        return reply
