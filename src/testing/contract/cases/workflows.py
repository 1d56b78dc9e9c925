"""Cases of jobs that wait for other jobs (`WorkflowJobQueue`): a waiting job is never
claimed; the write that ends a dependency releases or ends its dependents in the same
step, once, and a stale or repeated finish moves nothing; a bad graph is refused
whole. A backend without workflows is reported as not applicable (`WORKFLOWS`)."""

from __future__ import annotations

from uuid import uuid4

from ....core import (
    Job,
    JobStatus,
    ValidationError,
    reclaim_cutoff,
    revive,
)
from ....core.dependencies import DEPENDENCY_FAILED, SKIPPED, OnFailure
from ....shell.cancellation import cancel_job
from ....shell.ports.workflows import Graph, supports_workflows
from ....shell.runtime.workflow_writes import workflow_queue
from ..case import case
from ..subject import BATCHING, WORKFLOWS, Subject
from ..support import LATER, claim, make_job
from .graphs import completed, dead_lettered, graph_of


def _state(s: Subject, job: Job) -> JobStatus | None:
    found = s.queue.find(job.id)
    if found is not None:
        return JobStatus.WAITING if found.place.value == "waiting" else JobStatus.PENDING
    record = s.store.get(job.id)
    return None if record is None else record.status


@case(WORKFLOWS)
def a_waiting_job_is_claimed_only_once_its_dependency_completed(s: Subject) -> None:
    root, leaf = make_job("root"), make_job("leaf")
    written = s.queue.enqueue_graph(graph_of((root, []), (leaf, [(root, OnFailure.FAIL)])))
    assert [j.status for j in written] == [JobStatus.PENDING, JobStatus.WAITING]
    held = claim(s)
    assert held.job.id == root.id
    assert s.queue.dequeue("default", LATER) is None, "a waiting job was claimed"
    assert _state(s, leaf) is JobStatus.WAITING
    assert s.queue.finish(held, completed(held.job))
    assert claim(s, LATER).job.id == leaf.id
    assert [e.dependency for e in s.queue.dependencies_of(leaf.id)] == [root.id]


@case(WORKFLOWS)
def a_fan_in_is_released_by_the_last_finish_only(s: Subject) -> None:
    parts = [make_job("part") for _ in range(3)]
    fan_in = make_job("merge")
    edges = [(p, OnFailure.FAIL) for p in parts]
    s.queue.enqueue_graph(graph_of(*((p, []) for p in parts), (fan_in, edges)))
    held = [claim(s) for _ in parts]
    for claimed in held:
        assert _state(s, fan_in) is JobStatus.WAITING, "released before its last input"
        assert s.queue.finish(claimed, completed(claimed.job))
    assert claim(s, LATER).job.id == fan_in.id
    assert s.queue.dequeue("default", LATER) is None, "released twice"


@case(WORKFLOWS)
def a_stale_or_repeated_finish_releases_nothing(s: Subject) -> None:
    root, leaf = make_job("root"), make_job("leaf")
    s.queue.enqueue_graph(graph_of((root, []), (leaf, [(root, OnFailure.FAIL)])))
    stale = claim(s)
    cutoff = reclaim_cutoff(LATER, 1000)
    [abandoned] = s.queue.abandoned(cutoff)
    assert s.queue.reclaim(abandoned, stale.job, cutoff)
    fresh = claim(s, LATER)
    assert s.queue.finish(stale, completed(stale.job)) is False, "a stale finish was written"
    assert _state(s, leaf) is JobStatus.WAITING, "a refused finish released its dependent"
    assert s.queue.finish(fresh, completed(fresh.job))
    assert s.queue.finish(fresh, completed(fresh.job)) is False
    assert claim(s, LATER).job.id == leaf.id
    assert s.queue.dequeue("default", LATER) is None


@case(WORKFLOWS)
def a_failed_dependency_ends_its_dependents_by_their_policies_in_the_same_write(
    s: Subject,
) -> None:
    root = make_job("root")
    failing, skipping, ignoring = make_job("f"), make_job("s"), make_job("i")
    after_failing = make_job("after-f")  # under `fail`: cancelled as its input was
    graph = graph_of(
        (root, []),
        (failing, [(root, OnFailure.FAIL)]),
        (skipping, [(root, OnFailure.SKIP)]),
        (ignoring, [(root, OnFailure.IGNORE)]),
        (after_failing, [(failing, OnFailure.IGNORE), (skipping, OnFailure.FAIL)]),
    )
    s.queue.enqueue_graph(graph)
    held = claim(s)
    assert s.queue.finish(held, dead_lettered(held.job))
    cancelled, skipped = s.store.get(failing.id), s.store.get(skipping.id)
    assert cancelled.status is JobStatus.CANCELLED
    assert cancelled.last_error.type == DEPENDENCY_FAILED
    assert skipped.status is JobStatus.CANCELLED and skipped.last_error.type == SKIPPED
    assert s.store.get(after_failing.id).status is JobStatus.CANCELLED, "no cascade"
    assert claim(s, LATER).job.id == ignoring.id
    assert s.queue.dequeue("default", LATER) is None


@case(WORKFLOWS, BATCHING)
def a_batch_finish_settles_the_jobs_waiting_for_its_jobs(s: Subject) -> None:
    plain, awaited, leaf = make_job("plain"), make_job("awaited"), make_job("leaf")
    s.queue.enqueue(plain)
    s.queue.enqueue_graph(graph_of((awaited, []), (leaf, [(awaited, OnFailure.FAIL)])))
    held = [claim(s), claim(s)]
    done = s.queue.finish_many([(c, completed(c.job)) for c in held])
    assert list(done) == [True, True], "a batch finish refused a job jobs wait for"
    assert s.store.get(awaited.id).status is JobStatus.COMPLETED
    assert claim(s, LATER).job.id == leaf.id, "the batch finish did not release"
    assert list(s.queue.finish_many([(c, completed(c.job)) for c in held])) == [False, False]


@case(WORKFLOWS)
def a_graph_with_a_bad_edge_is_refused_whole(s: Subject) -> None:
    root, leaf = make_job("root"), make_job("leaf")
    ghost = make_job("never-written")
    graph = graph_of((root, []), (leaf, [(root, OnFailure.FAIL), (ghost, OnFailure.FAIL)]))
    try:
        s.queue.enqueue_graph(graph)
    except ValidationError as error:
        assert error.fields == ("after[1]",)
    else:
        raise AssertionError("an edge to an unknown job was accepted")
    assert s.queue.find(root.id) is None and s.queue.find(leaf.id) is None
    assert s.queue.dequeue("default", LATER) is None, "part of a refused graph was written"


@case(WORKFLOWS)
def cancelling_a_waiting_job_records_it_and_ends_what_waits_for_it(s: Subject) -> None:
    root, mid, tail = make_job("root"), make_job("mid"), make_job("tail")
    graph = graph_of((root, []), (mid, [(root, OnFailure.FAIL)]), (tail, [(mid, OnFailure.FAIL)]))
    s.queue.enqueue_graph(graph)
    found = cancel_job(s.queue, s.store, s.executor(s.queue, s.store), mid.id, LATER)
    assert found.value == "cancelled"
    assert s.store.get(mid.id).status is JobStatus.CANCELLED
    assert s.store.get(tail.id).last_error.type == DEPENDENCY_FAILED
    assert claim(s, LATER).job.id == root.id
    assert s.queue.dequeue("default", LATER) is None


@case(WORKFLOWS)
def a_revived_dependency_reopens_nothing_already_ended(s: Subject) -> None:
    root, failed_leaf = make_job("root"), make_job("leaf")
    other, skip_leaf = make_job("other"), make_job("skip-leaf")
    graph = graph_of(
        (root, []),
        (other, []),
        (failed_leaf, [(root, OnFailure.FAIL)]),
        (skip_leaf, [(root, OnFailure.SKIP), (other, OnFailure.FAIL)]),
    )
    s.queue.enqueue_graph(graph)
    held = claim(s)
    assert held.job.id == root.id
    dead = dead_lettered(held.job)
    assert s.queue.finish(held, dead)
    assert s.store.get(failed_leaf.id).status is JobStatus.CANCELLED
    assert _state(s, skip_leaf) is JobStatus.WAITING, "skip waits for every input"
    assert s.queue.revive(dead, revive(dead, LATER))
    again = claim(s, LATER)
    assert again.job.id in (root.id, other.id)
    first_other = again if again.job.id == other.id else claim(s, LATER)
    revived = again if again.job.id == root.id else claim(s, LATER)
    # The revived job finishes last: its own finish must settle what still waits.
    assert s.queue.finish(first_other, completed(first_other.job))
    assert _state(s, skip_leaf) is JobStatus.WAITING, "the revived input is unfinished"
    assert s.queue.finish(revived, completed(revived.job))
    assert s.store.get(failed_leaf.id).status is JobStatus.CANCELLED, "a revive reopened it"
    assert claim(s, LATER).job.id == skip_leaf.id, "the revived outcome counts"


@case(WORKFLOWS)
def a_workflow_reads_back_its_members_and_edges(s: Subject) -> None:
    root, leaf = make_job("root"), make_job("leaf")
    graph = graph_of((root, []), (leaf, [(root, OnFailure.SKIP)]))
    s.queue.enqueue_graph(graph)
    found = s.queue.workflow(graph.workflow_id)
    assert found is not None and list(found.names.values()) == [root.id, leaf.id]
    assert [(e.dependent, e.dependency, e.on_failure) for e in found.edges] == [
        (leaf.id, root.id, OnFailure.SKIP)
    ]
    assert s.queue.workflow(uuid4()) is None


@case(WORKFLOWS)
def a_job_names_the_workflow_it_was_written_in(s: Subject) -> None:
    root, leaf, alone = make_job("root"), make_job("leaf"), make_job("alone")
    graph = graph_of((root, []), (leaf, [(root, OnFailure.FAIL)]))
    s.queue.enqueue_graph(graph)
    s.queue.enqueue_graph(graph_of((alone, [(root, OnFailure.FAIL)]), workflow=False))
    assert s.queue.workflow_of(root.id) == graph.workflow_id
    assert s.queue.workflow_of(leaf.id) == graph.workflow_id
    assert s.queue.workflow_of(alone.id) is None, "a job `after` others is in no workflow"
    assert s.queue.workflow_of(uuid4()) is None


@case(WORKFLOWS)
def a_workflow_whose_id_is_stored_is_not_written_again(s: Subject) -> None:
    root, leaf = make_job("root"), make_job("leaf")
    first = graph_of((root, []), (leaf, [(root, OnFailure.FAIL)]))
    s.queue.enqueue_graph(first)
    # The same workflow id built again (a second node's cron slot, a retried call):
    # other job ids, the same workflow.
    again_root, again_leaf = make_job("root"), make_job("leaf")
    again = Graph(
        graph_of((again_root, []), (again_leaf, [(again_root, OnFailure.FAIL)])).members,
        first.workflow_id,
    )
    back = s.queue.enqueue_graph(again)
    assert [j.id for j in back] == [root.id, leaf.id], "the stored members come back"
    assert [j.status for j in back] == [JobStatus.PENDING, JobStatus.WAITING]
    assert s.queue.find(again_root.id) is None and s.queue.find(again_leaf.id) is None
    found = s.queue.workflow(first.workflow_id)
    assert found is not None and list(found.names.values()) == [root.id, leaf.id]
    assert claim(s).job.id == root.id
    assert s.queue.dequeue("default", LATER) is None, "a second copy was written"


@case(WORKFLOWS)
def a_root_s_unique_key_held_by_another_workflow_writes_nothing_until_it_is_free(
    s: Subject,
) -> None:
    key = f"nightly-{uuid4().hex[:8]}"
    holding = _keyed_graph(key)
    s.queue.enqueue_graph(holding)
    root = holding.members[0].job
    again = _keyed_graph(key)
    assert [j.id for j in s.queue.enqueue_graph(again)] == [root.id], "the holder comes back"
    assert all(s.queue.find(m.job.id) is None for m in again.members), "a copy was written"
    assert again.workflow_id is not None and s.queue.workflow(again.workflow_id) is None
    held = claim(s)
    assert held.job.id == root.id and s.queue.finish(held, completed(held.job))
    # The root completed: by default its key is free, and the next workflow takes it.
    later = _keyed_graph(key)
    written = s.queue.enqueue_graph(later)
    assert [j.id for j in written] == [m.job.id for m in later.members]


def _keyed_graph(key: str) -> Graph:
    """A root holding `key` (its id the workflow's, as `Workflow` gives it) and a leaf."""
    workflow_id = uuid4()
    root, leaf = make_job("root", id=workflow_id, unique_key=key), make_job("leaf")
    members = graph_of((root, []), (leaf, [(root, OnFailure.FAIL)])).members
    return Graph(members, workflow_id)


def refuses_workflows(s: Subject) -> None:
    """What a backend without workflows shows instead of these cases: it is not a
    `WorkflowJobQueue`, and an enqueue naming `after` is refused, naming that field,
    before anything is written."""
    assert not supports_workflows(s.queue)
    try:
        workflow_queue(s.queue, s.name)
    except ValidationError as error:
        assert error.fields == ("after",) and "does not support workflows" in str(error)
    else:
        raise AssertionError(f"{s.name} accepted a graph it cannot hold")


WORKFLOW_CASES = (
    a_waiting_job_is_claimed_only_once_its_dependency_completed,
    a_fan_in_is_released_by_the_last_finish_only,
    a_stale_or_repeated_finish_releases_nothing,
    a_failed_dependency_ends_its_dependents_by_their_policies_in_the_same_write,
    a_batch_finish_settles_the_jobs_waiting_for_its_jobs,
    a_graph_with_a_bad_edge_is_refused_whole,
    cancelling_a_waiting_job_records_it_and_ends_what_waits_for_it,
    a_revived_dependency_reopens_nothing_already_ended,
    a_workflow_reads_back_its_members_and_edges,
    a_job_names_the_workflow_it_was_written_in,
    a_workflow_whose_id_is_stored_is_not_written_again,
    a_root_s_unique_key_held_by_another_workflow_writes_nothing_until_it_is_free,
)
