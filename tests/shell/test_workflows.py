"""Workflows through the runtime: `enqueue(after=...)`, `Workflow`, `chain`, `group`,
the inputs a dependent reads, showing and cancelling a workflow."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import conveyor
import pytest
from conveyor import JobStatus, ValidationError, Workflow, call, chain, dep, group
from conveyor.core.dependencies import DEPENDENCY_FAILED, SKIPPED
from conveyor.shell.context import JobContext


@pytest.fixture(params=["memory", "sqlite"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, Any]:
    base: dict[str, Any] = {"entry_points": False, "workers": {"count": 0}}
    if request.param == "memory":
        return {"provider": "memory", **base}
    return {"provider": "db", "url": f"sqlite:///{tmp_path / 'jobs.db'}", **base}


def _runtime(where: dict[str, Any], handlers: dict[str, Any]) -> Any:
    return conveyor.build(where, handlers=handlers)


def _boom(args: Any) -> None:
    raise conveyor.Permanent("boom")


def test_a_job_after_another_waits_until_it_completes_then_reads_its_result(
    where: dict[str, Any],
) -> None:
    seen: list[Any] = []

    def merge(args: Any, ctx: JobContext) -> None:
        seen.append(ctx.inputs()[first.id])

    rt = _runtime(where, {"part": lambda a: a["n"] * 2, "merge": merge})
    first = rt.enqueue("part", {"n": 21})
    then = rt.enqueue("merge", after=[first])
    assert then.status is JobStatus.WAITING
    assert rt.get(then.id).state is JobStatus.WAITING
    rt.drain()
    assert seen == [42]
    assert rt.get(then.id).state is JobStatus.COMPLETED


def test_a_workflow_fans_out_and_in_and_its_handler_reads_inputs_by_name(
    where: dict[str, Any],
) -> None:
    seen: list[Any] = []

    def merge(args: Any, ctx: JobContext) -> None:
        inputs = ctx.inputs()
        seen.append(sorted(inputs[f"part{i}"] for i in range(3)))

    rt = _runtime(where, {"part": lambda a: a["n"], "merge": merge})
    wf = Workflow()
    parts = [wf.add("part", {"n": i}, name=f"part{i}") for i in range(3)]
    wf.add("merge", after=parts, name="merge")
    workflow_id = rt.enqueue(wf)
    assert workflow_id == wf.id
    shown = rt.workflow(workflow_id)
    assert shown.counts == {"pending": 3, "waiting": 1}
    assert rt.queue.counts(rt.clock.now())["default"].waiting == 1
    [row] = [q for q in rt.status().queues if q.queue == "default"]
    assert (row.ready, row.waiting) == (3, 1)
    [merge_state] = [m for m in shown.members if m.name == "merge"]
    assert [d for d, _ in merge_state.waits_for] == ["part0", "part1", "part2"]
    rt.drain()
    assert seen == [[0, 1, 2]]
    assert rt.workflow(workflow_id).counts == {"completed": 4}


@pytest.mark.parametrize(
    ("policy", "state", "error"),
    [
        ("fail", JobStatus.CANCELLED, DEPENDENCY_FAILED),
        ("skip", JobStatus.CANCELLED, SKIPPED),
        ("ignore", JobStatus.COMPLETED, None),
    ],
)
def test_a_failed_dependency_ends_or_lets_go_its_dependent_by_policy(
    policy: str, state: JobStatus, error: str | None, where: dict[str, Any]
) -> None:
    rt = _runtime(where, {"boom": _boom, "next": lambda a: "ran", "last": lambda a: "ran"})
    wf = Workflow()
    bad = wf.add("boom", max_retries=0)
    nxt = wf.add("next", after=[dep(bad, on_failure=policy)])
    last = wf.add("last", after=[nxt])  # under "fail": ends when nxt does not complete
    rt.enqueue(wf)
    rt.drain()
    view = rt.get(nxt.job_id)
    assert view.state is state
    assert (view.job.last_error.type if view.job.last_error else None) == error
    expected_last = JobStatus.COMPLETED if policy == "ignore" else JobStatus.CANCELLED
    assert rt.get(last.job_id).state is expected_last


def test_chain_runs_in_order_and_group_then_runs_last(where: dict[str, Any]) -> None:
    order: list[str] = []
    rt = _runtime(where, {"step": lambda a: order.append(a["s"])})
    rt.enqueue(chain(call("step", {"s": "a"}), call("step", {"s": "b"}), call("step", {"s": "c"})))
    rt.drain()
    assert order == ["a", "b", "c"]
    order.clear()
    rt.enqueue(
        group(call("step", {"s": "x"}), call("step", {"s": "y"}), then=call("step", {"s": "z"}))
    )
    rt.drain()
    assert sorted(order[:2]) == ["x", "y"] and order[2] == "z"


def test_unknown_ids_and_other_tenants_refuse_the_whole_graph_naming_the_field(
    where: dict[str, Any],
) -> None:
    rt = _runtime(where, {"a": lambda a: None})
    other = rt.enqueue("a", tenant_id="t2")
    wf = Workflow(tenant_id="t1")
    root = wf.add("a", name="root")
    wf.add("a", after=[root, other.id], name="bad")
    with pytest.raises(ValidationError) as info:
        rt.enqueue(wf)
    assert info.value.fields == ("steps['bad'].after[1]",)
    assert "another tenant" in str(info.value)
    assert rt.get(root.job_id) is None, "nothing of a refused graph is written"
    with pytest.raises(ValidationError) as info:
        rt.enqueue("a", after=["00000000-0000-4000-8000-00000000abcd"])
    assert info.value.fields == ("after[0]",)
    with pytest.raises(ValidationError) as info:
        rt.enqueue("a", after=[dep(other, on_failure="sometimes")])
    assert info.value.fields == ("after[0].on_failure",)
    with pytest.raises(ValidationError) as info:
        rt.enqueue("a", after=[other], delay=5)
    assert info.value.fields == ("enqueue.delay",)


def test_a_dependency_that_already_failed_ends_the_new_job_at_once(where: dict[str, Any]) -> None:
    rt = _runtime(where, {"boom": _boom, "a": lambda a: None})
    bad = rt.enqueue("boom", max_retries=0)
    rt.drain()
    late = rt.enqueue("a", after=[bad])
    assert late.status is JobStatus.CANCELLED
    assert rt.get(late.id).job.last_error.type == DEPENDENCY_FAILED
    done = rt.enqueue("a")
    rt.drain()
    assert rt.enqueue("a", after=[done]).status is JobStatus.PENDING


def test_cancelling_a_workflow_ends_every_unfinished_member(where: dict[str, Any]) -> None:
    rt = _runtime(where, {"a": lambda a: None})
    wf = Workflow()
    root = wf.add("a")
    wf.add("a", after=[root])
    rt.enqueue(wf)
    counts = rt.cancel_workflow(wf.id)
    # The root's cancel cascades to the job waiting for it: this call ended both (it
    # said "1 cancelled, 1 finished", as if the waiting one had finished before).
    assert counts == {"cancelled": 2}
    assert rt.workflow(wf.id).counts == {"cancelled": 2}
    assert rt.drain().processed == 0


def test_cancelling_a_workflow_counts_the_members_finished_before_as_finished(
    where: dict[str, Any],
) -> None:
    rt = _runtime(where, {"a": lambda a: None})
    wf = Workflow()
    first = wf.add("a")
    # No handler here for "b": the drain runs the first job only, and requeues these.
    wf.add("b", after=[first])
    other = wf.add("b", after=[first])
    rt.enqueue(wf)
    rt.drain()
    assert rt.get(first.job_id).state is JobStatus.COMPLETED
    assert not rt.get(other.job_id).state.is_terminal
    assert rt.cancel_workflow(wf.id) == {"finished": 1, "cancelled": 2}


def test_cancelling_a_waiting_job_cascades_to_what_waits_for_it(where: dict[str, Any]) -> None:
    rt = _runtime(where, {"a": lambda a: None})
    root = rt.enqueue("a")
    mid = rt.enqueue("a", after=[root])
    tail = rt.enqueue("a", after=[dep(mid, on_failure="ignore"), root])
    assert rt.cancel(mid.id).value == "cancelled"
    assert rt.get(mid.id).state is JobStatus.CANCELLED
    assert rt.get(tail.id).state is JobStatus.WAITING, "ignore: it still waits for the rest"
    rt.drain()
    assert rt.get(tail.id).state is JobStatus.COMPLETED


def test_a_workflow_enqueued_in_the_callers_transaction_commits_or_rolls_back_with_it(
    tmp_path: Path,
) -> None:
    where = {"provider": "db", "url": f"sqlite:///{tmp_path / 'jobs.db'}", "entry_points": False}
    rt = conveyor.build({**where, "workers": {"count": 0}}, handlers={"a": lambda a: "ok"})
    engine = rt.queue.engine
    wf = Workflow()
    wf.add("a", after=[wf.add("a")])
    with engine.connect() as conn, conn.begin() as tx:
        rt.enqueue_workflow_in_tx(conn, wf)
        tx.rollback()
    assert rt.workflow(wf.id) is None and rt.drain().processed == 0
    kept = Workflow()
    kept.add("a", after=[kept.add("a")])
    with engine.begin() as conn:
        rt.enqueue_workflow_in_tx(conn, kept)
    assert rt.drain().processed == 2
    assert rt.workflow(kept.id).counts == {"completed": 2}


def test_tasks_take_after_and_are_workflow_steps_with_their_defaults(
    where: dict[str, Any],
) -> None:
    from conveyor import Tasks

    mine = Tasks()
    fetch = mine.task(name="fetch", queue="io")(lambda args: args["n"])
    total = mine.task(name="total", queue="io")(lambda args, ctx: sum(ctx.inputs().by_id.values()))
    rt = conveyor.build({**where, "workers": {"count": 0, "queues": ["io"]}}, handlers=mine)
    first = fetch.enqueue({"n": 2})
    later = total.enqueue(after=[first])
    assert later.status is JobStatus.WAITING and later.queue == "io"
    wf = Workflow()
    step = wf.add(fetch, {"n": 5})
    wf.add(total, after=[step], name="sum")
    rt.enqueue(wf)
    rt.drain()
    assert rt.get(later.id).job.result == 2
    [summed] = [m for m in rt.workflow(wf.id).members if m.name == "sum"]
    assert rt.get(summed.job_id).job.result == 5 and rt.get(summed.job_id).job.queue == "io"


def test_a_handler_run_in_a_child_process_reads_its_inputs() -> None:
    import multiprocessing

    import process_handlers
    from conveyor.shell.registry import Registry

    registry = Registry({"part": lambda args: args["n"]})
    registry.register("sum", process_handlers.sums_inputs, execution="process")
    rt = conveyor.build(
        {"provider": "memory", "entry_points": False, "workers": {"count": 0}}, registry=registry
    )
    wf = Workflow()
    wf.add("sum", after=[wf.add("part", {"n": n}) for n in (3, 4)], name="sum")
    rt.enqueue(wf)
    rt.drain()
    [summed] = [m for m in rt.workflow(wf.id).members if m.name == "sum"]
    assert rt.get(summed.job_id).job.result == 7
    assert not multiprocessing.active_children()


def test_enqueue_many_after_makes_every_job_wait_for_the_same_dependencies(
    where: dict[str, Any],
) -> None:
    seen: list[Any] = []

    def merge(args: Any, ctx: JobContext) -> None:
        seen.append((args["k"], ctx.inputs()[first.id]))

    rt = _runtime(where, {"part": lambda a: a["n"], "merge": merge})
    first = rt.enqueue("part", {"n": 7})
    waiting = rt.enqueue_many("merge", [{"k": k} for k in range(3)], after=[first])
    assert [job.status for job in waiting] == [JobStatus.WAITING] * 3
    assert rt.queue.counts(rt.clock.now())["default"].waiting == 3
    rt.drain()
    assert sorted(seen) == [(0, 7), (1, 7), (2, 7)]
    assert {rt.get(job.id).state for job in waiting} == {JobStatus.COMPLETED}


def test_enqueue_many_after_refuses_what_a_waiting_job_cannot_have_and_writes_nothing(
    where: dict[str, Any],
) -> None:
    rt = _runtime(where, {"part": lambda a: None})
    first = rt.enqueue("part", {})
    with pytest.raises(ValidationError) as caught:
        rt.enqueue_many("part", [{}, {}], after=[first], delay=5)
    assert "enqueue_many.delay" in str(caught.value)
    with pytest.raises(ValidationError) as caught:
        rt.enqueue_many("part", [{}, {}], after=[first], id="00000000-0000-4000-8000-000000000001")
    assert "id" in str(caught.value)
    with pytest.raises(ValidationError) as caught:
        rt.enqueue_many("part", [{}, {}], after=["not a job id"])
    assert "after[0]" in str(caught.value)
    assert rt.queue.counts(rt.clock.now())["default"].waiting == 0


def test_aenqueue_takes_after_and_a_workflow_as_enqueue_does(where: dict[str, Any]) -> None:
    import asyncio

    rt = _runtime(where, {"part": lambda a: a["n"], "merge": lambda a: None})
    first = rt.enqueue("part", {"n": 1})
    wf = Workflow()
    wf.add("merge", after=[wf.add("part", {"n": 2})])

    async def main() -> tuple[Any, Any, Any]:
        one = await rt.aenqueue("merge", {}, after=[first])
        many = await rt.aenqueue_many("merge", [{}, {}], after=[first])
        workflow_id = await rt.aenqueue(wf)
        return one, many, workflow_id

    one, many, workflow_id = asyncio.run(main())
    assert one.status is JobStatus.WAITING
    assert [job.status for job in many] == [JobStatus.WAITING] * 2
    assert workflow_id == wf.id
    assert rt.workflow(workflow_id).counts == {"pending": 1, "waiting": 1}
    rt.drain()
    assert {rt.get(job.id).state for job in [one, *many]} == {JobStatus.COMPLETED}
    assert rt.workflow(workflow_id).counts == {"completed": 2}


class _CountingStore:
    """The runtime's own store, with its reads counted; `many=False` hides
    `get_many`, as a store of a user's own may lack it."""

    def __init__(self, store: Any, many: bool) -> None:
        self._store, self._many = store, many
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        if name == "get_many" and not self._many:
            raise AttributeError(name)
        found = getattr(self._store, name)
        if name in ("get", "get_many"):

            def counted(*args: Any) -> Any:
                self.calls.append(name)
                return found(*args)

            return counted
        return found


@pytest.mark.parametrize("many", [True, False], ids=["get_many", "get"])
def test_a_fan_in_reads_its_inputs_in_one_store_read_where_the_store_can(
    where: dict[str, Any], many: bool
) -> None:
    from conveyor.shell.inputs import read_inputs

    rt = _runtime(where, {"part": lambda a: a["n"] * 10, "merge": lambda a: None})
    wf = Workflow()
    parts = [wf.add("part", {"n": n}, name=f"p{n}") for n in range(30)]
    merge = wf.add("merge", after=parts, name="m")
    rt.enqueue(wf)
    rt.drain()
    store = _CountingStore(rt.store, many)
    inputs = read_inputs(rt.queue, store, merge.job_id)
    assert [inputs[f"p{n}"] for n in range(30)] == [n * 10 for n in range(30)]
    assert store.calls == (["get_many"] if many else ["get"] * 30)


def test_a_workflow_enqueued_already_takes_no_more_steps(where: dict[str, Any]) -> None:
    # The step was accepted, given a handle, and never written.
    rt = _runtime(where, {"a": lambda a: None})
    wf = Workflow()
    first = wf.add("a", name="first")
    rt.enqueue(wf)
    with pytest.raises(ValidationError) as late:
        wf.add("a", name="second", after=[first])
    assert late.value.fields == ("workflow",)
    assert "was enqueued already" in str(late.value)
    assert rt.enqueue(wf) == wf.id, "sending it again is still the stored workflow"
    assert [m.name for m in rt.workflow(wf.id).members] == ["first"]


def test_a_member_that_completed_shows_no_error_of_an_attempt_before(
    where: dict[str, Any],
) -> None:
    # A dead step retried and then completed was shown "completed" with the old error.
    fixed: list[bool] = []

    def flaky(args: Any) -> None:
        if not fixed:
            raise conveyor.Permanent("flag missing")

    rt = _runtime(where, {"a": flaky})
    wf = Workflow()
    wf.add("a", name="step")
    rt.enqueue(wf)
    rt.drain()
    [dead] = rt.workflow(wf.id).members
    assert dead.error == "Permanent: flag missing"
    fixed.append(True)
    rt.retry_dead(dead.job_id)
    rt.drain()
    [done] = rt.workflow(wf.id).members
    assert done.state is JobStatus.COMPLETED and done.error is None
