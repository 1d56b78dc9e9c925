"""`drain`'s limit runs at most `max_jobs` jobs, and raises `DrainLimit` only when
work is still due after them: it ran one job more, then raised even when that job
was the last. And a misused `drain` says what it wanted."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import conveyor
import pytest
from conveyor import Tasks
from conveyor.testing import ManualClock, drain
from conveyor.testing.drain import DrainLimit


def runtime(handlers: Any) -> conveyor.Runtime:
    return conveyor.build({"provider": "memory"}, handlers=handlers, clock=ManualClock(), env={})


def test_a_drain_of_exactly_its_limit_runs_them_all_and_raises_nothing() -> None:
    ran: list[int] = []
    rt = runtime({"one": lambda args: ran.append(1)})
    for _ in range(5):
        rt.enqueue("one", {})
    assert drain(rt, max_jobs=5).completed == 5
    assert len(ran) == 5


def test_work_left_after_the_limit_is_a_drain_limit_after_exactly_that_many() -> None:
    ran: list[int] = []
    rt = runtime({"one": lambda args: ran.append(1)})
    for _ in range(6):
        rt.enqueue("one", {})
    with pytest.raises(DrainLimit, match="drain ran 5 jobs and work is still due"):
        drain(rt, max_jobs=5)
    assert len(ran) == 5, "a job beyond the limit ran"


def test_a_parked_job_left_after_the_limit_counts_as_work_due() -> None:
    # The drain would move the manual clock on to it.
    rt = runtime({"one": lambda args: None})
    for _ in range(2):
        rt.enqueue("one", {})
    rt.enqueue("one", {}, delay=timedelta(hours=1))
    with pytest.raises(DrainLimit):
        drain(rt, max_jobs=2)
    assert drain(rt, max_jobs=1).completed == 1


def test_a_self_enqueuing_job_runs_the_limit_and_no_more() -> None:
    tasks, ran = Tasks(), []

    @tasks.task(name="again")
    def again(args: Any) -> None:
        ran.append(1)
        again.enqueue()

    rt = runtime(tasks)
    again.enqueue()
    with pytest.raises(DrainLimit):
        drain(rt, max_jobs=5)
    assert len(ran) == 5


@pytest.mark.parametrize("queues", [5, 2.5, b"emails"])
def test_queues_of_the_wrong_type_are_refused_naming_queues(queues: Any) -> None:
    with pytest.raises(conveyor.ValidationError) as refused:
        drain(runtime({}), queues=queues)
    assert refused.value.fields == ("queues",)


def test_a_drain_of_something_else_than_a_runtime_says_so() -> None:
    with pytest.raises(TypeError, match="drain needs the Runtime to drain, got Tasks"):
        drain(Tasks())  # type: ignore[arg-type]


def test_assert_enqueued_refuses_args_that_are_no_mapping_and_a_queue_no_job_can_be_on() -> None:
    # Pairs never matched and the failure showed them as a dict; a bad queue name with
    # count=0 passed on nothing.
    from conveyor.testing import assert_enqueued

    rt = runtime({"send": lambda args: None})
    rt.enqueue("send", {"k": 1})
    with pytest.raises(conveyor.ValidationError) as pairs:
        assert_enqueued(rt, "send", [("k", 1)])  # type: ignore[arg-type]
    assert pairs.value.fields == ("args",)
    with pytest.raises(conveyor.ValidationError) as queue:
        assert_enqueued(rt, "send", count=0, queue="no such queue!")
    assert queue.value.fields == ("queue",)
    assert assert_enqueued(rt, "send", {"k": 1}, queue="default")


def test_a_job_a_rate_holds_back_after_the_limit_is_no_work_due() -> None:
    # A ready job the rate keeps from any claim counted as work due: max_jobs=1
    # raised where max_jobs=10 returned with the same job left.
    from conveyor.core.limits import QueueLimits, Rate

    limits = {"payments": QueueLimits(rates=(Rate(starts=1, per_seconds=3600),))}
    for max_jobs in (1, 10):
        rt = conveyor.build(
            {"provider": "memory", "workers": {"queues": ["payments"]}},
            handlers={"t": lambda args: None},
            clock=ManualClock(),
            env={},
            limits=limits,
        )
        rt.enqueue("t", {}, queue="payments")
        rt.enqueue("t", {}, queue="payments")
        assert drain(rt, max_jobs=max_jobs).processed == 1
        rt.close()
