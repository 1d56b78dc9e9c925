"""Workflows with cron and unique keys, on every backend: a cron slot may start a
workflow, written once however many nodes tick (a workflow id is written once, also
by callers racing it); a workflow's root may hold a unique key, which keeps a second
workflow out while it is held."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import uuid4

import pytest
from backends import Backend
from conveyor.core import JobStatus, ValidationError
from conveyor.core.cron import slot_id
from conveyor.core.dependencies import WorkflowOutcome
from conveyor.shell.config import Config
from conveyor.shell.registry import Registry
from conveyor.shell.runtime import Runtime
from conveyor.shell.runtime.workflows import Workflow
from conveyor.testing.clock import ManualClock

T0 = datetime(2026, 6, 1, 10, 0, 30, tzinfo=UTC)
SLOT = T0.replace(second=0) + timedelta(minutes=1)
BUILT: list[datetime] = []


def nightly(wf: Workflow, slot: datetime) -> None:
    """Fetch, render two parts, then mail: the shape of a report run."""
    BUILT.append(slot)
    fetch = wf.add("report", {"day": slot.isoformat()}, name="fetch")
    parts = [wf.add("report", {"part": n}, after=[fetch], name=f"part{n}") for n in (1, 2)]
    wf.add("report", {"step": "mail"}, after=parts, name="mail")


def node(queue: object, store: object, clock: ManualClock) -> Runtime:
    config = Config(provider="memory")
    return Runtime(config, queue, store, Registry({"report": lambda args: "ok"}), clock=clock)  # type: ignore[arg-type]


@pytest.fixture
def two_nodes(backend: Backend) -> Iterator[tuple[Runtime, Runtime]]:
    """Two runtimes on one backend with one clock, each with its own connections where
    the backend crosses processes (memory: one process, so one queue)."""
    clock = ManualClock(T0)
    other = backend.peer() if backend.peer is not None else (backend.queue, backend.store)
    nodes = node(backend.queue, backend.store, clock), node(*other, clock)
    for rt in nodes:
        # Every minute but :00, so the last slot before the start (09:59) is 90 s old:
        # missed, and let go; the first slot is SLOT.
        rt.cron.add_workflow("nightly", "1-59 * * * *", nightly)
        assert rt.cron.tick() == [], "a starting node lets a slot older than a minute go"
    clock.set(SLOT)
    yield nodes


def test_two_nodes_ticking_one_slot_store_one_workflow_under_the_slot_s_id(
    two_nodes: tuple[Runtime, Runtime],
) -> None:
    first, second = two_nodes
    wrote = first.cron.tick()
    found = second.cron.tick()
    assert [j.id for j in found] == [j.id for j in wrote], "the second node got another copy"
    assert [j.status for j in wrote] == [JobStatus.PENDING, *[JobStatus.WAITING] * 3]
    state = first.workflow(slot_id("nightly", SLOT))
    assert state is not None
    assert [m.name for m in state.members] == ["fetch", "part1", "part2", "mail"]
    assert [m.job_id for m in state.members] == [j.id for j in wrote]
    queued = sorted(q.job_id for q in first.queue.scan())
    assert queued == sorted(str(j.id) for j in wrote), "a second workflow's jobs were queued"
    assert first.cron.tick() == [] and second.cron.tick() == []


def test_cron_list_shows_the_slot_s_workflow_and_run_starts_a_fresh_one(
    two_nodes: tuple[Runtime, Runtime],
) -> None:
    rt, _ = two_nodes
    rt.cron.tick()
    (row,) = rt.cron.list()
    assert row.last_job_id == str(slot_id("nightly", SLOT))
    assert row.last_state is WorkflowOutcome.RUNNING, "no step has run yet"
    assert row.job_type == "nightly"
    started = rt.cron.run("nightly")
    assert started.status is JobStatus.PENDING and started.args["day"] == SLOT.isoformat()
    assert started.id not in {m.job_id for m in rt.workflow(slot_id("nightly", SLOT)).members}  # type: ignore[union-attr]


def test_callers_racing_one_workflow_id_store_it_once(
    backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    clock = ManualClock(T0)
    peers = [backend.peer() if backend.peer is not None else None for _ in range(3)]
    nodes = [node(backend.queue, backend.store, clock)] + [
        node(*p, clock) if p is not None else node(backend.queue, backend.store, clock)
        for p in peers
    ]
    # Several rounds, as one race is often won before the others start.
    workflow_ids = [uuid4() for _ in range(12)]
    gate = threading.Barrier(len(nodes))
    answers: dict[Any, list[list[Any]]] = {i: [] for i in workflow_ids}

    def enqueue(rt: Runtime) -> None:
        for workflow_id in workflow_ids:
            wf = Workflow(id=workflow_id)
            nightly(wf, SLOT)
            gate.wait(timeout=30)
            answers[workflow_id].append([j.id for j in rt._workflows().write_workflow(wf)])

    threads = [threading.Thread(target=enqueue, args=(rt,)) for rt in nodes]
    with caplog.at_level(logging.WARNING):
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    for workflow_id, given in answers.items():
        assert len(given) == len(nodes), "a racing enqueue failed"
        assert all(a == given[0] for a in given), "two callers stored two workflows"
        stored = nodes[0].workflow(workflow_id)
        assert stored is not None and [m.job_id for m in stored.members] == given[0]
    assert len(list(nodes[0].queue.scan())) == 4 * len(workflow_ids), (
        "jobs of a losing copy were left queued"
    )
    # The losers wait for the winner rather than fail against its rows: no driver
    # complains in the log of a write that was thrown away.
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_a_workflow_entry_is_checked_as_any_entry() -> None:
    clock = ManualClock(T0)
    from conveyor.shell.adapters.memory import MemoryJobQueue, MemoryJobStore

    store = MemoryJobStore()
    rt = node(MemoryJobQueue(store), store, clock)
    with pytest.raises(ValidationError) as bad:
        rt.cron.add_workflow("nightly", "61 * * * *", nightly)
    assert "schedule" in str(bad.value)
    with pytest.raises(ValidationError) as not_callable:
        rt.cron.add_workflow("nightly", "* * * * *", "nightly")  # type: ignore[arg-type]
    assert not_callable.value.fields == ("cron.build",)
    rt.cron.add_workflow("nightly", "* * * * *", nightly)
    with pytest.raises(ValidationError) as taken:
        rt.cron.add_workflow("nightly", "* * * * *", nightly)
    assert taken.value.fields == ("cron.name",)


#: A lambda made at module level: its qualified name is `<lambda>` alone.
BY_LAMBDA = (lambda wf, slot: nightly(wf, slot),)


def test_a_lambda_may_build_a_cron_workflow() -> None:
    # Its `<lambda>` name was spelt into a job type `_lambda_`, which the name check
    # refused as `cron.job_type`, a field the caller never gave.
    from conveyor.shell.adapters.memory import MemoryJobQueue, MemoryJobStore

    store = MemoryJobStore()
    rt = node(MemoryJobQueue(store), store, ManualClock(T0))
    entry = rt.cron.add_workflow("nightly", "* * * * *", BY_LAMBDA[0])
    assert entry.job_type == "lambda"
    (first, *_) = rt.cron.tick()
    assert first.job_type == "report"


def keyed(key: str) -> Workflow:
    wf = Workflow()
    root = wf.add("report", {"step": "fetch"}, name="fetch", unique_key=key)
    wf.add("report", {"step": "mail"}, after=[root], name="mail")
    return wf


def test_a_root_s_unique_key_keeps_a_second_workflow_out_while_it_is_held(
    backend: Backend,
) -> None:
    rt = node(backend.queue, backend.store, ManualClock(T0))
    first, second = keyed("nightly"), keyed("nightly")
    assert rt.enqueue_workflow(first) == first.id
    assert rt.enqueue_workflow(second) == first.id, "the holder's workflow is the answer"
    assert rt.workflow(second.id) is None, "the second workflow was written"
    assert rt.get(first.id).state is JobStatus.PENDING, "the keyed root shares its workflow's id"
    rt.drain()
    assert rt.workflow(first.id).counts == {"completed": 2}  # type: ignore[union-attr]
    third = keyed("nightly")
    assert rt.enqueue_workflow(third) == third.id, "a finished root frees the key"


def test_a_refused_graph_leaves_the_key_free(backend: Backend) -> None:
    rt = node(backend.queue, backend.store, ManualClock(T0))
    bad = keyed("import-7")
    bad.add("report", after=[uuid4()], name="ghost")
    with pytest.raises(ValidationError):
        rt.enqueue_workflow(bad)
    good = keyed("import-7")
    assert rt.enqueue_workflow(good) == good.id


def test_a_stored_id_or_a_held_key_answers_before_the_graph_is_checked(
    backend: Backend,
) -> None:
    # A re-sent workflow whose outside job was pruned since, or a keyed root whose
    # key another holds: the stored workflow (the holder) is the answer on every
    # backend, as a second send writes nothing; Redis checked the graph first.
    rt = node(backend.queue, backend.store, ManualClock(T0))
    stored = keyed("daily")
    assert rt.enqueue_workflow(stored) == stored.id
    resent = Workflow(id=stored.id)
    resent.add("report", name="fetch")
    resent.add("report", after=[uuid4()], name="ghost")
    assert rt.enqueue_workflow(resent) == stored.id
    assert [m.name for m in rt.workflow(stored.id).members] == ["fetch", "mail"]  # type: ignore[union-attr]
    held = keyed("daily")
    held.add("report", after=[uuid4()], name="ghost")
    assert rt.enqueue_workflow(held) == stored.id, "the key's holder is the answer"
    assert rt.workflow(held.id) is None


def test_only_one_root_of_a_workflow_holds_a_key() -> None:
    wf = Workflow()
    root = wf.add("report", name="fetch", unique_key="k")
    with pytest.raises(ValidationError) as waits:
        wf.add("report", after=[root], name="mail", unique_key="k2")
    assert waits.value.fields == ("steps['mail'].unique_key",)
    with pytest.raises(ValidationError) as second:
        wf.add("report", name="other", unique_key="k3")
    assert second.value.fields == ("steps['other'].unique_key",)
    assert "'fetch' already holds" in str(second.value)


def test_enqueue_many_after_writes_every_waiting_job_or_none(backend: Backend) -> None:
    rt = node(backend.queue, backend.store, ManualClock(T0))
    first = rt.enqueue("report", {"n": 0})
    waiting = rt.enqueue_many("report", [{"n": n} for n in (1, 2, 3)], after=[first])
    assert [job.status for job in waiting] == [JobStatus.WAITING] * 3
    for job in waiting:
        assert [e.dependency for e in rt.queue.dependencies_of(job.id)] == [first.id]
    gone = uuid4()
    with pytest.raises(ValidationError) as caught:
        rt.enqueue_many("report", [{"n": 4}, {"n": 5}], after=[first, gone])
    assert "after[1]" in str(caught.value)
    assert rt.queue.counts(T0)["default"].waiting == 3, "a refused list wrote some of its jobs"


@pytest.mark.parametrize("option", ["delay", "run_at"])
def test_a_step_waiting_for_nothing_is_refused_a_start_time_for_what_it_is(option: str) -> None:
    # It was told "a job that waits for others cannot have one", of a root.
    wf = Workflow()
    when: Any = 3 if option == "delay" else datetime(2031, 1, 1, tzinfo=UTC)
    with pytest.raises(ValidationError) as info:
        wf.add("x", {}, **{option: when})
    assert info.value.fields == (f"steps['x'].{option}",)
    assert "a workflow's step cannot have one: it runs once the workflow releases it" in str(
        info.value
    )


def test_a_job_after_a_pruned_record_is_told_it_was_pruned(backend: Backend) -> None:
    # It was told "no job with id ... is known", while `result` of the same id said
    # that retention had pruned it.
    from conveyor.core import RetentionPolicy, prune_order

    rt = node(backend.queue, backend.store, ManualClock(T0))
    first = rt.enqueue("report", {})
    rt.drain(timeout_s=30)
    later = T0 + timedelta(days=30)
    policy = RetentionPolicy(completed_ms=1000, dead_ms=1000)
    assert backend.store.prune(prune_order(policy, later)) == 1
    with pytest.raises(ValidationError) as refused:
        rt.enqueue("report", {}, after=[first])
    assert refused.value.fields == ("after[0]",)
    assert f"job {first.id} was pruned by retention at {later.isoformat()}" in str(refused.value)
    with pytest.raises(ValidationError) as unknown:
        rt.enqueue("report", {}, after=[uuid4()])
    assert "is known" in str(unknown.value)
