"""Workflows on Redis: a graph written in one script, its edges beside its jobs, and
the jobs waiting for one that ended settled in the script that ends it (`settling`).

A waiting job is a job hash with status `waiting`, in its queue's waiting set
(`{prefix}:waiting:<queue>`) and in no ready list or scheduled set, so no claim or
promotion meets it. Its edges are a list, `{prefix}:edges:<id>`; each job waited for
has the set of its dependents, `{prefix}:dependents:<id>`, whose EXISTS is all a job
without dependents pays when it ends. A workflow is one string,
`{prefix}:workflow:<id>`: its names in order and its edges, as JSON; each member
points back to it, `{prefix}:member:<id>`.

The graph is checked and settled in Python (`core.dependencies.check_graph`,
`settle_new`) from the statuses of the jobs outside it that its edges name, read in
one script; the write re-checks those statuses and writes nothing if one changed
(STALE), and the graph is read and decided again.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from uuid import UUID

from ....core import Job
from ....core.dependencies import Edge, OnFailure, check_graph, settle_new
from ....core.transitions import replace
from ...ports.workflows import Graph, Member, WorkflowMembers
from .arguments import placement, record_args, unique_args
from .client import text
from .replies import found
from .settling import STALE, STALE_TRIES, Settling, decoded, edge_json, edge_of, status_named

#: The graph script's answers when the workflow id is already stored, and when a
#: graph Python refused meets neither a stored id nor a held key.
STORED, REFUSED = 4, 5


def _member_args(member: Member, record: Job) -> list[object]:
    if record.status.is_terminal:
        args: list[object] = ["record", *record_args(record)]
    else:
        kind = "waiting" if record.status.value == "waiting" else "place"
        args = [kind, *placement(record)]
    args.append(len(member.edges))
    for edge in member.edges:
        args += [str(edge.dependency), edge_json(edge)]
    return args


def _workflow_doc(graph: Graph) -> str:
    names = [[m.name or str(m.job.id), str(m.job.id)] for m in graph.members]
    edges = [
        [str(e.dependent), str(e.dependency), e.on_failure.value, e.name]
        for m in graph.members
        for e in m.edges
    ]
    return json.dumps({"names": names, "edges": edges})


class Workflows(Settling):
    """`enqueue_graph`, `dependencies_of`, `workflow` and `workflow_of` (see the module's
    docstring)."""

    def enqueue_graph(self, graph: Graph) -> list[Job]:
        members = graph.members
        ids = {m.job.id for m in members}
        outside = sorted({e.dependency for m in members for e in m.edges} - ids, key=str)
        workflow = "" if graph.workflow_id is None else str(graph.workflow_id)
        doc = _workflow_doc(graph) if workflow else ""
        nonce = uuid.uuid4().hex
        keyed = [m.job for m in members if m.job.unique is not None]
        lock = [*unique_args(keyed[0]), str(keyed[0].id)] if keyed else [""] * 6
        for _ in range(STALE_TRIES):
            rows = self._read_dependents("jobs", *map(str, outside)) if outside else []
            facts: list[object] = [len(outside)]
            existing, statuses = {}, {}
            for job_id, (raw_status, body) in zip(outside, rows, strict=True):
                facts += [str(job_id), text(raw_status)]
                job = decoded(body)
                if job is not None:
                    existing[job_id] = job
                    statuses[job_id] = status_named(text(raw_status))
            error = check_graph([(m.job, m.edges, m.field) for m in members], existing)
            if error is not None:
                # A stored id or a held key is the answer all the same, as on SQL.
                refused = [nonce, 0, workflow, "1", *lock, 0, 0, "", 0]
                answer = self._write("enqueue", self._enqueue_graph, *refused)
                known = None if answer == REFUSED else self._known(graph, answer)
                if known is None:
                    raise error
                return known
            now = members[0].job.created_at
            records = settle_new([(m.job, m.edges) for m in members], statuses, now)
            args: list[object] = [nonce, self._receipt_ms, workflow, "0", *lock, *facts]
            args += [0, doc, len(members)]
            for member, record in zip(members, records, strict=True):
                args += _member_args(member, record)
            answer = self._write("enqueue", self._enqueue_graph, *args)
            known = self._known(graph, answer)
            if known is not None:
                return known
            if int(answer) != STALE:
                return records
        raise RuntimeError("the jobs this graph waits for kept changing while it was written")

    def _known(self, graph: Graph, answer: object) -> list[Job] | None:
        """What the graph script's answer says is there already: the holder of the
        root's key, or the stored workflow's members; None for any other answer."""
        if isinstance(answer, list):
            held = found(answer)  # a root's unique key, and the job holding it
            assert held is not None
            return [held]
        if int(answer) == STORED:  # type: ignore[call-overload]
            assert graph.workflow_id is not None
            return self._stored_members(graph.workflow_id)
        return None

    def _stored_members(self, workflow_id: UUID) -> list[Job]:
        """The members of the stored workflow `workflow_id` as they stand (one that
        retention pruned left out)."""
        stored = self.workflow(workflow_id)
        ids = [] if stored is None else [str(i) for i in stored.names.values()]
        rows = self._read_dependents("jobs", *ids) if ids else []
        out = []
        for raw_status, body in rows:
            job, status = decoded(body), status_named(text(raw_status))
            if job is not None:
                out.append(
                    job if status is None or job.status is status else replace(job, status=status)
                )
        return out

    def dependencies_of(self, job_id: UUID) -> Sequence[Edge]:
        key = self.keys.edges(str(job_id))
        raw = self._retrying(lambda: self._client.lrange(key, 0, -1))
        return [edge_of(job_id, entry) for entry in raw]

    def workflow(self, workflow_id: UUID) -> WorkflowMembers | None:
        key = self.keys.workflow(str(workflow_id))
        raw = self._retrying(lambda: self._client.get(key))
        if raw is None:
            return None
        doc = json.loads(text(raw))
        names = {name: UUID(job_id) for name, job_id in doc["names"]}
        edges = tuple(
            Edge(UUID(dependent), UUID(dependency), OnFailure(policy), name)
            for dependent, dependency, policy, name in doc["edges"]
        )
        return WorkflowMembers(workflow_id, names, edges)

    def workflow_of(self, job_id: UUID) -> UUID | None:
        key = self.keys.member(str(job_id))
        raw = self._retrying(lambda: self._client.get(key))
        return None if raw is None else UUID(text(raw))
