"""Cases of what finished records of workflows become (`WorkflowJobQueue`): a deleted
record takes what it leaves of its workflow with it, and a record that a job still
queued depends on is neither pruned nor purged, without stalling the prune of the
records behind it."""

from __future__ import annotations

from datetime import timedelta

import attrs

from ....core import Policies, Succeeded, decide, start
from ....core.dependencies import OnFailure
from ..case import case
from ..subject import WORKFLOWS, Subject
from ..support import LATER, T0, claim, make_job, prune_order
from .graphs import completed, dead_lettered, graph_of


@case(WORKFLOWS)
def deleted_records_take_what_they_leave_of_workflows_with_them(s: Subject) -> None:
    """A job in no workflow lets go of its edges with its record; a workflow stays
    whole (names, edges, each member's workflow) while any of its jobs is queued or
    recorded, and goes with its last record."""
    root, leaf, alone = make_job("root"), make_job("leaf"), make_job("alone")
    graph = graph_of((root, []), (leaf, [(root, OnFailure.FAIL)]))
    workflow_id = graph.workflow_id
    s.queue.enqueue_graph(graph)
    s.queue.enqueue_graph(graph_of((alone, [(root, OnFailure.FAIL)]), workflow=False))
    held = claim(s)
    assert s.queue.finish(held, completed(held.job))
    for _ in range(2):
        held = claim(s, LATER)
        if held.job.id == alone.id:
            assert s.queue.finish(held, dead_lettered(held.job))
        else:
            ran = start(held.job, LATER).unwrap()
            assert s.queue.finish(held, decide(ran, Succeeded(1), LATER, Policies(), 0.5).job)

    def whole() -> bool:
        found = s.queue.workflow(workflow_id)
        return (
            found is not None
            and list(found.names.values()) == [root.id, leaf.id]
            and [e.dependency for e in s.queue.dependencies_of(leaf.id)] == [root.id]
            and s.queue.workflow_of(root.id) == workflow_id
        )

    assert s.store.purge_dead(alone.id) == 1
    assert list(s.queue.dependencies_of(alone.id)) == [], "a purged job kept its edges"
    assert whole(), "a record of no workflow took the workflow's rows"
    order = prune_order(completed_before=T0 + timedelta(seconds=1))
    assert s.store.prune(order) == 1  # the root's record, finished at T0
    assert whole(), "the workflow went while its leaf was still recorded"
    assert s.store.prune(attrs.evolve(order, completed_before=LATER + timedelta(days=1))) == 1
    assert s.queue.workflow(workflow_id) is None, "the workflow outlived its last record"
    assert s.queue.workflow_of(root.id) is None and s.queue.workflow_of(leaf.id) is None
    assert list(s.queue.dependencies_of(leaf.id)) == [], "a member's edges outlived it"


@case(WORKFLOWS)
def a_record_a_queued_job_depends_on_is_neither_pruned_nor_purged(s: Subject) -> None:
    """A dependency's record stays while a job that depends on it is queued: that
    job's release reads its status (a record gone reads as unfinished, and the job
    would wait for ever) and its handler reads its result (`ctx.inputs()`)."""
    dead, slow, fan_in = make_job("dead"), make_job("slow"), make_job("fan-in")
    edges = [(dead, OnFailure.IGNORE), (slow, OnFailure.IGNORE)]
    s.queue.enqueue_graph(graph_of((dead, []), (slow, []), (fan_in, edges)))
    held = claim(s)
    assert held.job.id == dead.id
    assert s.queue.finish(held, dead_lettered(held.job))
    every_dead_letter = prune_order(dead_before=LATER + timedelta(days=1))
    assert s.store.count_prunable(every_dead_letter) == 0
    assert s.store.prune(every_dead_letter) == 0, "pruned what a waiting job depends on"
    assert s.store.purge_dead(dead.id) == 0 and s.store.purge_dead() == 0, "purged it"
    held = claim(s, LATER)
    assert held.job.id == slow.id and s.queue.finish(held, completed(held.job))
    held = claim(s, LATER)
    assert held.job.id == fan_in.id, "released: its dead input is ignored"
    assert s.store.prune(every_dead_letter) == 0, "pruned an input of a running job"
    assert s.queue.finish(held, completed(held.job))
    assert s.store.prune(every_dead_letter) == 1, "kept once nothing queued needs it"
    assert s.store.get(dead.id) is None


@case(WORKFLOWS)
def records_kept_for_a_waiting_job_do_not_stall_a_prune(s: Subject) -> None:
    """Kept inputs at the front of the index (oldest recorded) are passed over: the
    records behind them still go, a batch at a time."""
    inputs, last = [make_job("part") for _ in range(4)], make_job("last", run_at=LATER)
    fan_in = make_job("merge")
    edges = [(j, OnFailure.FAIL) for j in (*inputs, last)]
    s.queue.enqueue_graph(graph_of(*((j, []) for j in (*inputs, last)), (fan_in, edges)))
    for _ in inputs:
        held = claim(s)
        assert s.queue.finish(held, completed(held.job))
    for _ in range(3):  # recorded after the inputs, nothing depends on them
        s.queue.enqueue(make_job("other"))
        held = claim(s)
        assert s.queue.finish(held, completed(held.job))
    every_finished = prune_order(completed_before=LATER + timedelta(days=1), limit=2)
    assert s.store.count_prunable(every_finished) == 3
    assert [s.store.prune(every_finished) for _ in range(3)] == [2, 1, 0]
    assert all(s.store.get(j.id) is not None for j in inputs), "a kept input went"


WORKFLOW_RECORD_CASES = (
    deleted_records_take_what_they_leave_of_workflows_with_them,
    a_record_a_queued_job_depends_on_is_neither_pruned_nor_purged,
    records_kept_for_a_waiting_job_do_not_stall_a_prune,
)
