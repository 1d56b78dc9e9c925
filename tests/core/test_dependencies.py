"""The release rule of waiting jobs, and the checks of a dependency graph."""

from __future__ import annotations

from uuid import UUID, uuid4

import attrs
import pytest
from conveyor.core import JobStatus
from conveyor.core.dependencies import (
    DEPENDENCY_FAILED,
    RELEASE,
    SKIPPED,
    STAY,
    CancelDependent,
    Edge,
    OnFailure,
    Release,
    SkipDependent,
    WorkflowOutcome,
    check_graph,
    decide_release,
    settle,
    settle_new,
    waiting,
    workflow_outcome,
)
from core_support import NOW, make_job
from hypothesis import given
from hypothesis import strategies as st

DEPENDENT = UUID(int=1000)
FINISHED = (JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.CANCELLED)
UNFINISHED = (JobStatus.WAITING, JobStatus.PENDING, JobStatus.RUNNING, JobStatus.RETRYING)

policies = st.sampled_from(list(OnFailure))
# Each input: (its policy, the status it ends in).
inputs = st.lists(st.tuples(policies, st.sampled_from(FINISHED)), min_size=1, max_size=6)


def edges_of(spec: list[tuple[OnFailure, JobStatus]]) -> list[Edge]:
    return [Edge(DEPENDENT, UUID(int=i + 1), policy) for i, (policy, _) in enumerate(spec)]


def final(spec: list[tuple[OnFailure, JobStatus]]) -> dict[UUID, JobStatus | None]:
    return {UUID(int=i + 1): status for i, (_, status) in enumerate(spec)}


def kind(decision: object) -> str:
    """The end a decision makes, without the reason (which names one dependency)."""
    return type(decision).__name__


def expected(spec: list[tuple[OnFailure, JobStatus]]) -> str:
    failed = [p for p, s in spec if s is not JobStatus.COMPLETED]
    if OnFailure.FAIL in failed:
        return "CancelDependent"
    return "SkipDependent" if OnFailure.SKIP in failed else "Release"


@given(inputs)
def test_the_decision_once_all_have_finished_follows_the_policies(spec: list) -> None:
    assert kind(decide_release(edges_of(spec), final(spec))) == expected(spec)


@given(inputs, st.data())
def test_a_waiting_job_is_never_released_before_its_last_input_finished(
    spec: list, data: st.DataObject
) -> None:
    outcomes = final(spec)
    unfinished = data.draw(st.lists(st.sampled_from(list(outcomes)), min_size=1, unique=True))
    for job_id in unfinished:
        outcomes[job_id] = data.draw(st.sampled_from((None, *UNFINISHED)))
    decision = decide_release(edges_of(spec), outcomes)
    assert not isinstance(decision, (Release, SkipDependent))
    # An early end is only ever the end the full outcome makes.
    if isinstance(decision, CancelDependent):
        assert expected(spec) == "CancelDependent"


@given(inputs, st.randoms())
def test_the_end_does_not_depend_on_the_order_inputs_finish_in(spec: list, rnd) -> None:
    edges, outcomes = edges_of(spec), final(spec)
    order = list(outcomes)
    rnd.shuffle(order)
    seen: dict[UUID, JobStatus | None] = {}
    ends = []
    for job_id in order:
        seen[job_id] = outcomes[job_id]
        decision = decide_release(edges, seen)
        if decision != STAY:
            ends.append(kind(decision))
    # The first decision that is not "stay" is the one carried out.
    assert ends and ends[0] == expected(spec)


@given(inputs)
def test_carrying_out_a_decision_twice_changes_nothing_the_second_time(spec: list) -> None:
    job = waiting(make_job())
    decision = decide_release(edges_of(spec), final(spec))
    once = settle(job, decision, NOW)
    assert once is not None and once.status is not JobStatus.WAITING
    assert settle(once, decision, NOW) is None


def test_a_released_job_is_pending_and_an_ended_one_says_why() -> None:
    job = waiting(make_job())
    assert settle(job, RELEASE, NOW).status is JobStatus.PENDING
    assert settle(job, STAY, NOW) is None
    dep = uuid4()
    edges = [Edge(job.id, dep, OnFailure.FAIL, name="fetch")]
    cancelled = settle(job, decide_release(edges, {dep: JobStatus.FAILED}), NOW)
    assert cancelled.status is JobStatus.CANCELLED
    assert cancelled.last_error.type == DEPENDENCY_FAILED
    assert "'fetch'" in cancelled.last_error.message and "failed" in cancelled.last_error.message
    assert cancelled.finished_at == NOW
    edges = [Edge(job.id, dep, OnFailure.SKIP)]
    skipped = settle(job, decide_release(edges, {dep: JobStatus.CANCELLED}), NOW)
    assert skipped.status is JobStatus.CANCELLED and skipped.last_error.type == SKIPPED
    assert str(dep) in skipped.last_error.message
    # Shown as "type: message", it read "Skipped: skipped: dependency ...".
    assert skipped.last_error.message == f"dependency {dep} ended cancelled"


def jobs(n: int, tenant: str | None = None) -> list:
    return [make_job(id=UUID(int=i + 1), tenant_id=tenant) for i in range(n)]


def test_a_sound_graph_passes() -> None:
    a, b, c = jobs(3)
    members = [(a, [], "a"), (b, [Edge(b.id, a.id)], "b.after"), (c, [Edge(c.id, a.id)], "c")]
    assert check_graph(members, {}) is None


@pytest.mark.parametrize(
    ("target", "reason"),
    [(UUID(int=1), "itself"), (UUID(int=99), "no job with id"), (UUID(int=50), "another tenant")],
)
def test_a_bad_edge_is_refused_naming_its_field(target: UUID, reason: str) -> None:
    (a,) = jobs(1, tenant="t1")
    other = make_job(id=UUID(int=50), tenant_id="t2")
    error = check_graph([(a, [Edge(a.id, target)], "after")], {other.id: other})
    assert error is not None and error.fields == ("after[0]",)
    assert reason in error.errors[0].reason


def test_a_job_listed_twice_is_refused() -> None:
    a, b = jobs(2)
    error = check_graph([(b, [Edge(b.id, a.id), Edge(b.id, a.id)], "after")], {a.id: a})
    assert error is not None and error.fields == ("after[1]",)


def test_a_cycle_is_refused_naming_the_edge_that_closes_it() -> None:
    a, b, c = jobs(3)
    members = [
        (a, [Edge(a.id, c.id)], "a.after"),
        (b, [Edge(b.id, a.id)], "b.after"),
        (c, [Edge(c.id, b.id)], "c.after"),
    ]
    error = check_graph(members, {})
    assert error is not None and len(error.errors) == 1
    assert "cycle" in error.errors[0].reason


def test_new_members_are_settled_against_what_had_already_finished() -> None:
    done, dead = make_job(id=UUID(int=80)), make_job(id=UUID(int=81))
    a, b, c = jobs(3)
    members = [
        (a, [Edge(a.id, done.id)]),
        (b, [Edge(b.id, dead.id)]),  # fails: its dead input is under `fail`
        (c, [Edge(c.id, b.id, OnFailure.SKIP)]),  # skipped: b already ended
    ]
    existing = {done.id: JobStatus.COMPLETED, dead.id: JobStatus.FAILED}
    ra, rb, rc = settle_new(members, existing, NOW)
    assert ra.status is JobStatus.PENDING
    assert rb.status is JobStatus.CANCELLED and rb.last_error.type == DEPENDENCY_FAILED
    assert rc.status is JobStatus.CANCELLED and rc.last_error.type == SKIPPED


def test_members_waiting_for_unfinished_jobs_wait() -> None:
    a, b = jobs(2)
    running = attrs.evolve(make_job(id=UUID(int=70)), status=JobStatus.RUNNING)
    ra, rb = settle_new([(a, []), (b, [Edge(b.id, a.id), Edge(b.id, running.id)])], {}, NOW)
    assert ra.status is JobStatus.PENDING and rb.status is JobStatus.WAITING


# ---- a workflow's outcome --------------------------------------------------------------

S = JobStatus


@pytest.mark.parametrize(
    ("states", "outcome"),
    [
        ([S.COMPLETED, S.RUNNING], WorkflowOutcome.RUNNING),
        ([S.FAILED, S.WAITING], WorkflowOutcome.RUNNING),
        ([S.COMPLETED, S.RETRYING], WorkflowOutcome.RUNNING),
        ([S.COMPLETED, S.COMPLETED], WorkflowOutcome.COMPLETED),
        # A record gone (a dead letter purged, say): whether it completed is unknown.
        ([S.COMPLETED, None], WorkflowOutcome.ENDED),
        ([None], WorkflowOutcome.ENDED),
        ([], WorkflowOutcome.ENDED),
        # A dependent under `ignore` ran on, but one job never did its work.
        ([S.FAILED, S.COMPLETED], WorkflowOutcome.FAILED),
        ([S.FAILED, S.CANCELLED], WorkflowOutcome.FAILED),
        ([S.CANCELLED, S.COMPLETED], WorkflowOutcome.CANCELLED),
    ],
)
def test_a_workflow_runs_until_each_member_ends_then_tells_the_worst_end(
    states: list[JobStatus | None], outcome: WorkflowOutcome
) -> None:
    assert workflow_outcome(states) is outcome


@given(st.lists(st.sampled_from([*JobStatus, None])))
def test_a_workflow_is_running_exactly_while_a_member_has_not_ended(
    states: list[JobStatus | None],
) -> None:
    running = any(s is not None and not s.is_terminal for s in states)
    assert (workflow_outcome(states) is WorkflowOutcome.RUNNING) is running


@given(st.lists(st.sampled_from([*JobStatus, None])))
def test_a_workflow_is_completed_only_when_every_record_says_so(
    states: list[JobStatus | None],
) -> None:
    completed = bool(states) and all(s is JobStatus.COMPLETED for s in states)
    assert (workflow_outcome(states) is WorkflowOutcome.COMPLETED) is completed
