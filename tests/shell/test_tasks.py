"""Tasks as functions: `@tasks.task(...)` registers a handler whose job type cannot be
misspelt at the call site, and `.enqueue` applies the task's defaults."""

from __future__ import annotations

import inspect
import sys
import textwrap
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import conveyor
import pytest
from conveyor import Priority, Tasks, ValidationError
from conveyor.shell.runtime import Runtime
from conveyor.shell.tasks import TaskNotBound
from conveyor.testing import ManualClock

BACKENDS = ("memory", "sqlite")


def config_for(backend: str, folder: Path) -> dict[str, Any]:
    if backend == "memory":
        return {"provider": "memory", "entry_points": False}
    return {"provider": "db", "url": f"sqlite:///{folder / 'jobs.db'}", "entry_points": False}


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def build(backend: str, tmp_path: Path) -> Iterator[Any]:
    made: list[Runtime] = []

    def make(handlers: Any = None, **options: Any) -> Runtime:
        folder = tmp_path / f"runtime{len(made)}"  # each its own SQLite database
        folder.mkdir()
        runtime = conveyor.build(
            config_for(backend, folder), handlers=handlers, clock=ManualClock(), **options
        )
        made.append(runtime)
        return runtime

    yield make
    for runtime in made:
        runtime.close()


# A collection at module level, as an application declares one.
tasks = Tasks()


@tasks.task
def module_level_task(args: Any) -> str:
    return "ran"


# ---- declaring --------------------------------------------------------------


def test_a_task_is_named_by_its_module_and_qualified_name() -> None:
    assert module_level_task.job_type == f"{__name__}.module_level_task"
    assert list(tasks) == [f"{__name__}.module_level_task"]


def test_name_sets_the_job_type() -> None:
    mine = Tasks()

    @mine.task(name="send-receipt")
    def send(args: Any) -> None:
        return None

    assert send.job_type == "send-receipt"
    assert list(mine) == ["send-receipt"]


def test_a_function_defined_inside_a_function_needs_a_name() -> None:
    mine = Tasks()
    with pytest.raises(ValidationError) as info:

        @mine.task
        def inner(args: Any) -> None:
            return None

    assert info.value.fields == ("job_type",)
    assert "pass name=" in str(info.value)


def test_the_collection_maps_each_job_type_to_the_function_itself() -> None:
    mine = Tasks()

    def send(args: Any, context: Any = None) -> None:
        return None

    task = mine.task(name="send")(send)
    assert mine["send"] is send
    assert dict(mine) == {"send": send}
    # Whatever inspects the handler (a context parameter, `async def`) sees the function.
    assert inspect.signature(task) == inspect.signature(send)


def test_calling_a_task_runs_the_function_in_process() -> None:
    assert module_level_task({}) == "ran"


def test_an_unknown_option_is_refused_when_the_task_is_declared() -> None:
    mine = Tasks()
    with pytest.raises(TypeError, match="quue"):
        mine.task(name="send", quue="emails")(lambda args: None)


def test_after_at_the_declaration_is_refused_saying_where_it_goes() -> None:
    # It was refused as any unknown option, with no word of where `after` is taken.
    mine = Tasks()
    with pytest.raises(TypeError, match=r"task 'a': after= is given where a job is enqueued"):
        mine.task(name="a", after=[])(lambda args: None)


def test_a_bad_default_is_refused_when_the_task_is_declared() -> None:
    mine = Tasks()
    with pytest.raises(ValidationError) as info:
        mine.task(name="send", queue="no spaces allowed", priority="urgent")(lambda args: None)
    assert set(info.value.fields) == {"queue", "priority"}


def test_two_tasks_of_one_name_in_a_collection_are_refused() -> None:
    mine = Tasks()
    mine.task(name="send")(lambda args: None)
    with pytest.raises(ValueError, match="already"):
        mine.task(name="send")(lambda args: None)


# ---- enqueueing -------------------------------------------------------------


def test_enqueue_uses_the_task_defaults(build: Any) -> None:
    mine = Tasks()
    send = mine.task(name="send", queue="emails", priority="high", max_retries=7)(lambda args: None)
    build(mine)
    job = send.enqueue({"to": "a@example.com"})
    assert (job.job_type, job.queue, job.priority, job.max_retries) == (
        "send",
        "emails",
        Priority.HIGH,
        7,
    )
    assert dict(job.args) == {"to": "a@example.com"}


def test_options_given_at_the_call_override_the_task_defaults(build: Any) -> None:
    mine = Tasks()
    send = mine.task(name="send", queue="emails", priority="high")(lambda args: None)
    runtime = build(mine)
    job = send.enqueue({"to": "a"}, priority="low", delay=60)
    assert (job.queue, job.priority) == ("emails", Priority.LOW)
    assert job.run_at == runtime.clock.now() + timedelta(seconds=60)


def test_options_a_task_does_not_name_pass_through_as_defaults(build: Any) -> None:
    mine = Tasks()
    send = mine.task(name="send", tenant_id="acme")(lambda args: None)
    build(mine)
    assert send.enqueue().tenant_id == "acme"


def test_enqueue_many_uses_the_task_defaults(build: Any) -> None:
    mine = Tasks()
    send = mine.task(name="send", queue="emails")(lambda args: None)
    build(mine)
    jobs = send.enqueue_many([{"n": 1}, {"n": 2}], priority="critical")
    assert [(j.job_type, j.queue, j.priority, j.args["n"]) for j in jobs] == [
        ("send", "emails", Priority.CRITICAL, 1),
        ("send", "emails", Priority.CRITICAL, 2),
    ]


def test_a_worker_runs_the_function_of_an_enqueued_task(build: Any) -> None:
    mine = Tasks()
    seen: list[Any] = []

    @mine.task(name="send")
    def send(args: Any) -> dict[str, Any]:
        seen.append(args["to"])
        return {"sent": args["to"]}

    runtime = build(mine)
    job = send.enqueue({"to": "a@example.com"})
    assert runtime.drain().completed == 1
    assert seen == ["a@example.com"]
    view = runtime.get(job.id)
    assert view is not None and view.job is not None
    assert view.job.result == {"sent": "a@example.com"}


def test_bad_args_at_enqueue_raise_a_validation_error(build: Any) -> None:
    mine = Tasks()
    send = mine.task(name="send")(lambda args: None)
    build(mine)
    with pytest.raises(ValidationError) as info:
        send.enqueue({"when": object()})
    assert info.value.fields == ("args",)


# ---- which runtime ------------------------------------------------------------


def test_build_binds_a_collection_given_as_handlers(build: Any) -> None:
    mine = Tasks()
    send = mine.task(name="send")(lambda args: None)
    runtime = build(mine)
    assert mine.runtime is runtime
    assert runtime.registry.job_types() == {"send"}
    send.enqueue()
    assert runtime.status().queues[0].ready == 1


def test_the_last_build_with_a_collection_is_the_one_its_tasks_use(build: Any) -> None:
    mine = Tasks()
    send = mine.task(name="send")(lambda args: None)
    first, second = build(mine), build(mine)
    job = send.enqueue()
    assert second.get(job.id) is not None
    assert first.get(job.id) is None


def test_an_explicit_runtime_overrides_the_bound_one(build: Any) -> None:
    mine = Tasks()
    send = mine.task(name="send")(lambda args: None)
    bound = build(mine)
    other = build()
    job = send.enqueue(runtime=other)
    assert other.get(job.id) is not None
    assert bound.get(job.id) is None
    [many] = send.enqueue_many([{}], runtime=other)
    assert other.get(many.id) is not None


def test_bind_binds_a_collection_by_hand(build: Any) -> None:
    mine = Tasks()
    send = mine.task(name="send")(lambda args: None)
    runtime = build()
    mine.bind(runtime)
    assert runtime.get(send.enqueue().id) is not None


def test_enqueue_without_a_runtime_says_how_to_give_one() -> None:
    mine = Tasks()
    send = mine.task(name="send")(lambda args: None)
    with pytest.raises(TaskNotBound, match="'send' has no runtime"):
        send.enqueue({})


def test_args_given_as_keywords_are_told_to_go_in_one_mapping(build: Any) -> None:
    # It said "EnqueueMethods.enqueue() got an unexpected keyword argument 'to'".
    mine = Tasks()
    send = mine.task(name="send")(lambda args: None)
    build(mine)
    with pytest.raises(TypeError) as refused:
        send.enqueue(to="a@example.com")
    assert str(refused.value) == (
        "task 'send': unexpected options ['to']; the job's args go in one mapping: "
        "send.enqueue({'to': ...})"
    )


def test_closing_the_runtime_a_collection_is_bound_to_unbinds_it() -> None:
    # A test that forgot its fixture enqueued into the previous test's closed runtime.
    mine = Tasks()
    send = mine.task(name="send")(lambda args: None)
    first = conveyor.build({"provider": "memory"}, handlers=mine, env={})
    second = conveyor.build({"provider": "memory"}, handlers=Tasks(), env={})
    first.close()
    with pytest.raises(TaskNotBound, match="'send' has no runtime"):
        send.enqueue({})
    mine.bind(second)
    first.close()  # closed again: the collection is another runtime's now
    assert mine.runtime is second
    second.close()


@pytest.fixture
def app_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    (tmp_path / "billing_jobs.py").write_text(
        textwrap.dedent(
            """
            import conveyor

            tasks = conveyor.Tasks()

            @tasks.task(queue="billing")
            def charge(args):
                return {"charged": args["cents"]}
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    sys.modules.pop("billing_jobs", None)


def test_build_binds_a_collection_listed_in_the_config_handlers(
    app_module: Path, backend: str, tmp_path: Path
) -> None:
    import billing_jobs

    config = {**config_for(backend, tmp_path), "handlers": ["billing_jobs:tasks"]}
    config["workers"] = {"queues": ["billing"]}
    runtime = conveyor.build(config)
    try:
        assert billing_jobs.tasks.runtime is runtime
        job = billing_jobs.charge.enqueue({"cents": 250})
        assert (job.job_type, job.queue) == ("billing_jobs.charge", "billing")
        assert runtime.drain().completed == 1
    finally:
        runtime.close()


def test_args_may_be_given_by_keyword(build: Any) -> None:
    mine = Tasks()
    send = mine.task(name="send")(lambda args: None)
    build(mine)
    assert dict(send.enqueue(args={"to": "a"}).args) == {"to": "a"}


def test_a_misspelt_option_at_the_call_is_refused(build: Any) -> None:
    mine = Tasks()
    send = mine.task(name="send")(lambda args: None)
    build(mine)
    with pytest.raises(TypeError, match="priorty"):
        send.enqueue({}, priorty="high")


def test_a_calls_run_at_or_delay_replaces_the_tasks_other_one(build: Any) -> None:
    later = Tasks()

    @later.task(name="later", delay=30)
    def waits(args: Any) -> None:
        return None

    @later.task(name="at-noon", run_at=ManualClock().now() + timedelta(hours=2))
    def at_noon(args: Any) -> None:
        return None

    build(later)  # binds the collection: its tasks enqueue there
    now = ManualClock().now()
    assert waits.enqueue({}, run_at=now + timedelta(seconds=5)).run_at == now + timedelta(seconds=5)
    assert at_noon.enqueue({}, delay=60).run_at == now + timedelta(seconds=60)
    assert waits.enqueue({}).run_at == now + timedelta(seconds=30), "the default still applies"


def test_a_calls_unique_key_none_drops_the_tasks_unique_options(build: Any) -> None:
    once = Tasks()

    @once.task(name="digest", unique_key="digest", unique_for=3600)
    def digest(args: Any) -> None:
        return None

    build(once)
    first, second = digest.enqueue({}), digest.enqueue({})
    assert first.id == second.id, "the task's key holds"
    free = [digest.enqueue({}, unique_key=None) for _ in range(2)]
    assert len({job.id for job in free}) == 2 and first.id not in {job.id for job in free}


def test_a_task_enqueues_in_the_callers_transaction_with_its_defaults(tmp_path: Path) -> None:
    # Tasks had no transactional enqueue, and enqueueing by name dropped the task's
    # queue and priority: the job went to "default", where no worker of it looked.
    import sqlalchemy as sa

    tasks = Tasks()

    @tasks.task(name="send-receipt", queue="emails", priority="high", max_retries=7)
    def send_receipt(args: Any) -> None:
        return None

    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    runtime = conveyor.build({"url": url, "entry_points": False}, handlers=tasks)
    app = sa.create_engine(url)
    try:
        with pytest.raises(RuntimeError, match="no order"), app.begin() as conn:
            send_receipt.enqueue_in_tx(conn, {"order": 1}, runtime=runtime)
            raise RuntimeError("no order")
        with app.begin() as conn:
            job = send_receipt.enqueue_in_tx(conn, {"order": 2}, runtime=runtime, max_retries=2)
        view = runtime.get(job.id)
        listed = runtime.list_jobs()
    finally:
        app.dispose()
        runtime.close()
    assert (job.queue, job.priority, job.max_retries) == ("emails", Priority.HIGH, 2)
    assert view is not None and view.job is not None and view.job.args["order"] == 2
    assert [v.job_id for v in listed] == [str(job.id)], "the rolled-back one left nothing"
