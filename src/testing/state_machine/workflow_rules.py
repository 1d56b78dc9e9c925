"""The queue machine's rules for jobs that wait for other jobs (a `WorkflowJobQueue`
that finishes into its store): a job enqueued after any job the machine knows, under
random failure policies; released jobs claimed and finished or dead-lettered; waiting
jobs cancelled. The invariant holds the adapter to the release rule after every step:
a waiting job is waiting exactly while `decide_release` says stay, then ready or
ended as it says. Waiting and released jobs live on their own queue (`WF_QUEUE`), so
the other rules' claim order is untouched; the jobs they wait for are any job."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from hypothesis import note
from hypothesis import strategies as st
from hypothesis.stateful import invariant, precondition, rule

from ...core import (
    Complete,
    ErrorInfo,
    Job,
    JobStatus,
    Policies,
    Priority,
    Succeeded,
    ValidationError,
    dead_letter,
    decide,
    decide_cancel,
    start,
)
from ...core.dependencies import (
    DEPENDENCY_FAILED,
    SKIPPED,
    CancelDependent,
    Edge,
    OnFailure,
    Release,
    Stay,
    decide_release,
    settle_new,
)
from ...shell.ports import Claim, Place
from ...shell.ports.workflows import Graph, Member, WorkflowJobQueue
from .model import Held, ModelMachine, Parked, Ready

WF_QUEUE = "qw"


class WorkflowRules(ModelMachine):
    def __init__(self, made: tuple[Any, ...]) -> None:
        super().__init__(made)
        self.waiting: dict[UUID, tuple[Edge, ...]] = {}
        self.released: dict[UUID, Job] = {}
        self.wf_ended: dict[UUID, tuple[JobStatus, str | None]] = {}

    def _workflows(self) -> bool:
        return self._finishing() and isinstance(self.queue, WorkflowJobQueue)

    def _status(self, job_id: UUID) -> JobStatus | None:
        """A job's status as the model has it (the store's, once it left the queue)."""
        if job_id in self.waiting:
            return JobStatus.WAITING
        if job_id in self.released:
            return JobStatus.PENDING
        place = self.where.get(job_id)
        if isinstance(place, Held):
            return JobStatus.RUNNING
        if isinstance(place, Ready):
            return JobStatus.PENDING
        if isinstance(place, Parked):
            return JobStatus.SCHEDULED
        assert self.store is not None
        record = self.store.get(job_id)
        return None if record is None else record.status

    def _candidates(self) -> list[UUID]:
        ids = set(self.jobs) | set(self.waiting) | set(self.released) | set(self.wf_ended)
        return sorted(ids, key=lambda i: i.int)

    @precondition(lambda self: self._workflows() and bool(self._candidates()))
    @rule(data=st.data())
    def enqueue_after(self, data: st.DataObject) -> None:
        deps = data.draw(st.lists(st.sampled_from(self._candidates()), min_size=1, max_size=3))
        deps = list(dict.fromkeys(deps))
        job = self._new_job(WF_QUEUE, Priority.NORMAL, 0)
        edges = tuple(Edge(job.id, d, data.draw(st.sampled_from(list(OnFailure)))) for d in deps)
        statuses = {d: self._status(d) for d in deps}
        note(
            f"enqueue {job.id.int} after {[(e.dependency.int, e.on_failure.value) for e in edges]}"
        )
        graph = Graph((Member(job, edges),))
        if None in statuses.values():
            try:
                self.queue.enqueue_graph(graph)
            except ValidationError as error:
                assert error.fields and error.fields[0].startswith("after[")
                return
            raise AssertionError("an edge to a job the adapter does not hold was accepted")
        [expected] = settle_new([(job, edges)], statuses, self.now)
        [written] = self.queue.enqueue_graph(graph)
        assert written.status is expected.status, (written.status, expected.status)
        self._track(expected, edges)

    def _track(self, record: Job, edges: tuple[Edge, ...]) -> None:
        if record.status is JobStatus.WAITING:
            self.waiting[record.id] = edges
        elif record.status is JobStatus.PENDING:
            self.released[record.id] = record
        else:
            kind = None if record.last_error is None else record.last_error.type
            self.wf_ended[record.id] = (record.status, kind)

    @precondition(lambda self: self._workflows())
    @rule(dead=st.booleans())
    def work_a_released_job(self, dead: bool) -> None:
        got = self.queue.dequeue(WF_QUEUE, self.now)
        if not self.released:
            assert got is None, "a job that waits was claimed"
            return
        assert isinstance(got, Claim) and got.job.id in self.released, "claimed a waiting job"
        running = start(got.job, self.now).unwrap()
        if dead:
            record = dead_letter(running, ErrorInfo("boom", "model", False), self.now).job
        else:
            decision = decide(running, Succeeded(1), self.now, Policies(), 0.5)
            assert isinstance(decision, Complete)
            record = decision.job
        note(f"work {got.job.id.int} dead={dead}")
        assert self.queue.finish(got, record)
        del self.released[got.job.id]
        self.wf_ended[got.job.id] = (record.status, None)

    @precondition(lambda self: self._workflows() and bool(self.waiting))
    @rule(data=st.data())
    def cancel_a_waiting_job(self, data: st.DataObject) -> None:
        i = data.draw(st.sampled_from(sorted(self.waiting, key=lambda u: u.int)))
        found = self.queue.find(i)
        assert found is not None and found.place is Place.WAITING and found.job is not None
        decision = decide_cancel(found.job, self.now, in_flight=False)
        assert decision is not None
        note(f"cancel waiting {i.int}")
        assert self.queue.cancel(decision.job)
        del self.waiting[i]
        self.wf_ended[i] = (JobStatus.CANCELLED, None)

    def _outcome_written(self) -> None:
        self.waiting_jobs_move_exactly_when_their_inputs_allow()

    @invariant()
    def waiting_jobs_move_exactly_when_their_inputs_allow(self) -> None:
        if not self._workflows():
            return
        moved = True
        while moved:  # a dependent that ends is an input that failed, in turn
            moved = False
            for i in sorted(self.waiting, key=lambda u: u.int):
                edges = self.waiting[i]
                decision = decide_release(
                    edges, {e.dependency: self._status(e.dependency) for e in edges}
                )
                if isinstance(decision, Stay):
                    continue
                moved = True
                del self.waiting[i]
                if isinstance(decision, Release):
                    found = self.queue.find(i)
                    assert found is not None and found.job is not None, "a released job is lost"
                    self.released[i] = found.job
                else:
                    ended = DEPENDENCY_FAILED if isinstance(decision, CancelDependent) else SKIPPED
                    self.wf_ended[i] = (JobStatus.CANCELLED, ended)
        for i in self.waiting:
            found = self.queue.find(i)
            assert found is not None and found.place is Place.WAITING, f"{i.int} left waiting"
        for i in self.released:
            found = self.queue.find(i)
            assert found is not None and found.place is Place.READY, f"{i.int} not released"
        assert self.store is not None
        for i, (status, kind) in self.wf_ended.items():
            record = self.store.get(i)
            assert record is not None and record.status is status, (i.int, status)
            if kind is not None:
                assert record.last_error is not None and record.last_error.type == kind
