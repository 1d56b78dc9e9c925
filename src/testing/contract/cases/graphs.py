"""What the workflow cases share: a graph of jobs and their edges, and a held job's
record once it completed or was dead-lettered."""

from __future__ import annotations

from uuid import uuid4

from ....core import ErrorInfo, Job, Policies, Succeeded, dead_letter, decide, start
from ....core.dependencies import Edge, OnFailure
from ....shell.ports.workflows import Graph, Member
from ..support import T0


def graph_of(*members: tuple[Job, list[tuple[Job, OnFailure]]], workflow: bool = True) -> Graph:
    """Each job with the jobs it waits for and the policy of each edge; in a workflow of
    its own unless `workflow` is False."""
    built = tuple(
        Member(job, tuple(Edge(job.id, d.id, p, f"n{d.id.hex[:6]}") for d, p in deps))
        for job, deps in members
    )
    return Graph(built, uuid4() if workflow else None)


def completed(held: Job) -> Job:
    started = start(held, T0).unwrap()
    return decide(started, Succeeded("ok"), T0, Policies(), 0.5).job


def dead_lettered(held: Job) -> Job:
    started = start(held, T0).unwrap()
    return dead_letter(started, ErrorInfo("Boom", "no", False), T0).job
