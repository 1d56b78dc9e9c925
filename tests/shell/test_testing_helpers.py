"""`conveyor.testing` for users' own apps: inline mode, what was enqueued, drain, and
the manual clock."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import conveyor
import pytest
from conveyor import JobStatus, Permanent, Tasks
from conveyor.shell.runtime import Runtime
from conveyor.testing import ManualClock, assert_enqueued, drain, enqueued_jobs
from conveyor.testing.drain import DrainLimit

REDIS_TEST_DB = 9  # a database of its own: other tests flush theirs

BACKENDS = ("memory", "sqlite")
#: For the tests that show the manual clock drives a server backend too.
EVERY_BACKEND = ("memory", "sqlite", "postgresql", "redis")


def config_for(backend: str, folder: Path) -> dict[str, Any]:
    if backend == "memory":
        return {"provider": "memory", "entry_points": False}
    if backend == "postgresql":
        from conveyor.testing.postgres_server import fresh_database

        url = fresh_database(prefix="conveyor_testing")
        return {"provider": "db", "url": url, "auto_migrate": True, "entry_points": False}
    if backend == "redis":
        from conveyor.testing.redis_server import redis_url

        redis = {"url": redis_url(REDIS_TEST_DB), "prefix": f"t{uuid.uuid4().hex[:8]}"}
        return {"provider": "redis", "redis": redis, "entry_points": False}
    return {"provider": "db", "url": f"sqlite:///{folder / 'jobs.db'}", "entry_points": False}


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


every_backend = pytest.mark.parametrize("backend", EVERY_BACKEND)


@pytest.fixture
def build(backend: str, tmp_path: Path) -> Iterator[Any]:
    made: list[Runtime] = []

    def make(handlers: Any = None, *, clock: Any = "manual", **options: Any) -> Runtime:
        folder = tmp_path / f"runtime{len(made)}"
        folder.mkdir()
        config = {**config_for(backend, folder), **options.pop("config", {})}
        runtime = conveyor.build(
            config,
            handlers=handlers,
            clock=ManualClock() if clock == "manual" else clock,
            jitter=lambda: 0.5,  # no jitter: backoffs are exact
            **options,
        )
        made.append(runtime)
        return runtime

    yield make
    for runtime in made:
        runtime.close()
        if runtime.config.url.startswith("postgresql") and runtime.config.provider == "db":
            from conveyor.testing.postgres_server import drop_database

            drop_database(runtime.config.url)


def state_of(runtime: Runtime, job: conveyor.Job) -> JobStatus:
    view = runtime.get(job.id)
    assert view is not None
    return view.state


class App:
    """A small app's tasks, and what they did."""

    def __init__(self) -> None:
        self.tasks = Tasks()
        self.sent: list[str] = []
        tasks = self.tasks

        @tasks.task(name="send", queue="emails")
        def send(args: Any) -> dict[str, Any]:
            self.sent.append(args["to"])
            return {"sent": args["to"]}

        @tasks.task(name="flaky", max_retries=2)
        def flaky(args: Any) -> None:
            raise ConnectionError("smtp down")

        @tasks.task(name="bad")
        def bad(args: Any) -> None:
            raise Permanent("bad address")

        @tasks.task(name="signup")
        def signup(args: Any) -> str:
            send.enqueue({"to": args["email"]})
            return "welcome"

        self.send, self.flaky, self.bad, self.signup = send, flaky, bad, signup


@pytest.fixture
def app() -> App:
    return App()


# ---- inline mode -------------------------------------------------------------


@every_backend
def test_inline_enqueue_runs_the_job_before_it_returns(build: Any, app: App) -> None:
    runtime = build(app.tasks, inline=True)
    job = app.send.enqueue({"to": "a@example.com"})
    assert app.sent == ["a@example.com"]
    assert state_of(runtime, job) is JobStatus.COMPLETED
    view = runtime.get(job.id)
    assert view is not None and view.job is not None
    assert view.job.result == {"sent": "a@example.com"}


def test_inline_mode_is_set_by_the_config_key(build: Any, app: App) -> None:
    runtime = build(app.tasks, config={"inline": True})
    assert runtime.inline
    app.send.enqueue({"to": "a@example.com"})
    assert app.sent == ["a@example.com"]


def test_without_inline_mode_enqueue_only_enqueues(build: Any, app: App) -> None:
    runtime = build(app.tasks)
    job = app.send.enqueue({"to": "a@example.com"})
    assert app.sent == []
    assert state_of(runtime, job) is JobStatus.PENDING


def test_a_bad_inline_config_value_names_the_key() -> None:
    with pytest.raises(conveyor.ValidationError) as info:
        conveyor.load_config({"provider": "memory", "inline": "yes"})
    assert info.value.fields == ("inline",)


@every_backend
def test_an_inline_failure_leaves_its_retry_parked_and_does_not_raise(build: Any, app: App) -> None:
    runtime = build(app.tasks, inline=True)
    job = app.flaky.enqueue()
    assert state_of(runtime, job) is JobStatus.RETRYING
    view = runtime.get(job.id)
    assert view is not None and view.job is not None
    assert view.job.last_error is not None
    assert view.job.last_error.type == "ConnectionError"


def test_an_inline_permanent_failure_is_dead_lettered_at_once(build: Any, app: App) -> None:
    runtime = build(app.tasks, inline=True)
    job = app.bad.enqueue()
    assert state_of(runtime, job) is JobStatus.FAILED
    assert [j.id for j in runtime.list_dead()] == [job.id]


def test_an_inline_job_with_a_delay_stays_scheduled(build: Any, app: App) -> None:
    runtime = build(app.tasks, inline=True)
    job = app.send.enqueue({"to": "a"}, delay=timedelta(minutes=5))
    assert app.sent == []
    assert state_of(runtime, job) is JobStatus.SCHEDULED


def test_a_job_enqueued_by_an_inline_handler_runs_before_the_handler_returns(
    build: Any, app: App
) -> None:
    runtime = build(app.tasks, inline=True)
    job = app.signup.enqueue({"email": "new@example.com"})
    assert app.sent == ["new@example.com"]
    assert state_of(runtime, job) is JobStatus.COMPLETED
    assert_enqueued(runtime, app.send, {"to": "new@example.com"}, state="completed")


def test_inline_enqueue_many_runs_every_job(build: Any, app: App) -> None:
    build(app.tasks, inline=True)
    app.send.enqueue_many([{"to": "a"}, {"to": "b"}])
    assert sorted(app.sent) == ["a", "b"]


def test_inline_mode_does_not_warn_of_queues_no_pool_polls(
    build: Any, app: App, caplog: pytest.LogCaptureFixture
) -> None:
    build(app.tasks, inline=True)
    with caplog.at_level(logging.WARNING, logger="conveyor.runtime"):
        app.send.enqueue({"to": "a"})  # on "emails", which no pool is configured for
    assert "no worker pool" not in caplog.text


def test_enqueue_in_a_transaction_is_not_run_inline(tmp_path: Path, app: App) -> None:
    from conveyor.shell.adapters.sql import make_engine

    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    runtime = conveyor.build({"provider": "db", "url": url}, handlers=app.tasks, inline=True)
    engine = make_engine(url)
    try:
        with engine.begin() as conn:
            job = runtime.enqueue_in_tx(conn, "send", {"to": "a"}, queue="emails")
        assert app.sent == []
        assert state_of(runtime, job) is JobStatus.PENDING
        drain(runtime)
        assert app.sent == ["a"]
    finally:
        engine.dispose()
        runtime.close()


# ---- what was enqueued -----------------------------------------------------------


def test_enqueued_jobs_lists_waiting_and_finished_jobs_oldest_first(build: Any, app: App) -> None:
    runtime = build(app.tasks)
    clock = runtime.clock
    first = app.send.enqueue({"to": "a"})
    clock.advance(seconds=1)
    second = app.flaky.enqueue()
    clock.advance(seconds=1)
    third = app.send.enqueue({"to": "b"}, delay=60)
    drain(runtime, advance_clock=False)
    assert [(j.id, j.status) for j in enqueued_jobs(runtime)] == [
        (first.id, JobStatus.COMPLETED),
        (second.id, JobStatus.RETRYING),
        (third.id, JobStatus.SCHEDULED),
    ]


def test_enqueued_jobs_filters_by_task_job_type_queue_and_state(build: Any, app: App) -> None:
    runtime = build(app.tasks)
    app.send.enqueue({"to": "a"})
    app.send.enqueue({"to": "b"}, queue="bulk")
    app.flaky.enqueue()
    assert [j.args["to"] for j in enqueued_jobs(runtime, app.send, queue="emails")] == ["a"]
    assert len(enqueued_jobs(runtime, "send")) == 2
    assert [j.job_type for j in enqueued_jobs(runtime, state="pending", queue="default")] == [
        "flaky"
    ]
    assert enqueued_jobs(runtime, app.send, state=JobStatus.COMPLETED) == []


def test_assert_enqueued_returns_the_matching_jobs(build: Any, app: App) -> None:
    runtime = build(app.tasks)
    job = app.send.enqueue({"to": "a"}, priority="high")
    found = assert_enqueued(runtime, app.send, {"to": "a"}, queue="emails", priority="high")
    assert [j.id for j in found] == [job.id]


@every_backend
def test_assert_enqueued_fails_listing_the_jobs_of_that_type(build: Any, app: App) -> None:
    runtime = build(app.tasks)
    app.send.enqueue({"to": "a"})
    with pytest.raises(AssertionError) as info:
        assert_enqueued(runtime, app.send, {"to": "b"})
    message = str(info.value)
    assert "expected at least 1 'send' job(s) with args {'to': 'b'}; found 0" in message
    assert "send {'to': 'a'} on 'emails' (pending)" in message


def test_assert_enqueued_checks_an_exact_count(build: Any, app: App) -> None:
    runtime = build(app.tasks)
    app.send.enqueue_many([{"to": "a"}, {"to": "a"}])
    assert len(assert_enqueued(runtime, app.send, count=2)) == 2
    assert_enqueued(runtime, app.flaky, count=0)
    with pytest.raises(AssertionError, match="expected 1 'send'"):
        assert_enqueued(runtime, app.send, {"to": "a"}, count=1)


def test_assert_enqueued_compares_args_as_json(build: Any, app: App) -> None:
    runtime = build(app.tasks)
    app.send.enqueue({"to": "a", "cc": ["b", "c"]})
    assert_enqueued(runtime, "send", {"to": "a", "cc": ["b", "c"]})
    with pytest.raises(AssertionError):
        assert_enqueued(runtime, "send", {"to": "a"})


def test_assert_enqueued_tells_true_from_1(build: Any, app: App) -> None:
    # {"paid": 1} matched {"paid": True} (Python's 1 == True): a test asserting a flag
    # passed on a count.
    runtime = build(app.tasks)
    app.send.enqueue({"to": "a", "paid": 1, "flags": [0]})
    assert_enqueued(runtime, "send", {"to": "a", "paid": 1, "flags": [0]})
    for wrong in (
        {"to": "a", "paid": True, "flags": [0]},
        {"to": "a", "paid": 1, "flags": [False]},
    ):
        with pytest.raises(AssertionError):
            assert_enqueued(runtime, "send", wrong)


def test_a_bad_state_name_is_a_validation_error(build: Any, app: App) -> None:
    runtime = build(app.tasks)
    with pytest.raises(conveyor.ValidationError) as info:
        assert_enqueued(runtime, app.send, state="finished")
    assert info.value.fields == ("state",)


# ---- drain ---------------------------------------------------------------------


def test_drain_runs_every_due_job_on_every_queue(build: Any, app: App) -> None:
    runtime = build(app.tasks)
    app.send.enqueue({"to": "a"})
    app.send.enqueue({"to": "b"}, queue="bulk")
    stats = drain(runtime)
    assert (stats.processed, stats.completed) == (2, 2)
    assert sorted(app.sent) == ["a", "b"]


@every_backend
def test_drain_moves_a_manual_clock_to_run_scheduled_jobs(build: Any, app: App) -> None:
    runtime = build(app.tasks)
    start = runtime.clock.now()
    app.send.enqueue({"to": "later"}, delay=timedelta(hours=1))
    app.send.enqueue({"to": "soon"}, delay=60)
    assert drain(runtime).completed == 2
    assert app.sent == ["soon", "later"]
    assert runtime.clock.now() == start + timedelta(hours=1)


@every_backend
def test_drain_runs_a_failing_job_through_its_retries_to_its_dead_letter(
    build: Any, app: App
) -> None:
    runtime = build(app.tasks, inline=True)
    start = runtime.clock.now()
    job = app.flaky.enqueue()  # attempt 1 runs inline; 2 retries are left
    stats = drain(runtime)
    assert (stats.processed, stats.retried, stats.dead_lettered) == (2, 1, 1)
    assert state_of(runtime, job) is JobStatus.FAILED
    # Backoffs of 1 s and 2 s (the default policy, no jitter) passed on the clock.
    assert runtime.clock.now() == start + timedelta(seconds=3)


def test_drain_leaves_jobs_not_yet_due_without_a_manual_clock(build: Any, app: App) -> None:
    runtime = build(app.tasks, clock=None)
    job = app.send.enqueue({"to": "a"}, delay=3600)
    assert drain(runtime).processed == 0
    assert state_of(runtime, job) is JobStatus.SCHEDULED


def test_drain_does_not_move_the_clock_when_told_not_to(build: Any, app: App) -> None:
    runtime = build(app.tasks)
    start = runtime.clock.now()
    app.send.enqueue({"to": "a"}, delay=60)
    assert drain(runtime, advance_clock=False).processed == 0
    assert runtime.clock.now() == start


def test_drain_runs_only_the_queues_it_is_given(build: Any, app: App) -> None:
    runtime = build(app.tasks)
    app.send.enqueue({"to": "a"})
    app.send.enqueue({"to": "b"}, queue="bulk")
    drain(runtime, queues=["bulk"])
    assert app.sent == ["b"]


@pytest.mark.parametrize("queues", [["emails", ""], ["bad queue!"], [5]])
def test_drain_refuses_a_queue_name_no_queue_can_have(build: Any, app: App, queues: Any) -> None:
    # It drained nothing, silently: the test then passed on nothing run.
    runtime = build(app.tasks)
    with pytest.raises(conveyor.ValidationError) as refused:
        drain(runtime, queues=queues)
    assert refused.value.fields[0].startswith("queues[")


def test_drain_stops_at_its_limit_when_work_does_not_end(build: Any) -> None:
    tasks = Tasks()

    @tasks.task(name="again")
    def again(args: Any) -> None:
        again.enqueue()

    runtime = build(tasks)
    again.enqueue()
    with pytest.raises(DrainLimit, match="drain ran 5 jobs"):
        drain(runtime, max_jobs=5)


# ---- the manual clock ---------------------------------------------------------------


def test_the_manual_clock_moves_by_a_timedelta_seconds_or_milliseconds() -> None:
    start = datetime(2030, 5, 1, tzinfo=UTC)
    clock = ManualClock(start)
    assert clock.advance(timedelta(minutes=1)) == start + timedelta(minutes=1)
    assert clock.advance(seconds=30) == start + timedelta(seconds=90)
    assert clock.advance(500) == start + timedelta(seconds=90, milliseconds=500)
    assert clock.now() == start + timedelta(seconds=90, milliseconds=500)


@pytest.mark.parametrize("when", ["2030-01-01", 1893456000, None])
def test_the_manual_clock_refuses_a_time_that_is_no_datetime(when: Any) -> None:
    # set("2030-01-01") raised AttributeError: 'str' object has no attribute 'utcoffset'.
    with pytest.raises(ValueError, match="must be a timezone-aware datetime"):
        ManualClock().set(when)
    with pytest.raises(ValueError, match="must be a timezone-aware datetime"):
        ManualClock(when or "x")


@pytest.mark.parametrize("step", [True, "5", float("nan")])
def test_the_manual_clock_refuses_a_step_that_is_no_duration(step: Any) -> None:
    # advance(True) moved the clock 1 ms.
    with pytest.raises(ValueError, match="must be a timedelta or a number of milliseconds"):
        ManualClock().advance(step)


def test_drain_refuses_limits_that_would_drain_nothing(build: Any, app: App) -> None:
    # queues=[] drained nothing and reported 0 jobs; max_jobs=-1 said "drain ran -1 jobs".
    runtime = build(app.tasks)
    app.send.enqueue({"to": "a"})
    with pytest.raises(conveyor.ValidationError) as empty:
        drain(runtime, queues=[])
    with pytest.raises(conveyor.ValidationError) as negative:
        drain(runtime, max_jobs=-1)
    assert (empty.value.fields, negative.value.fields) == (("queues",), ("max_jobs",))
    assert_enqueued(runtime, "send", state="pending")


def test_the_manual_clock_starts_at_a_fixed_date_by_default() -> None:
    assert ManualClock().now() == datetime(2026, 1, 1, tzinfo=UTC)


def test_the_manual_clock_refuses_a_time_without_a_zone() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        ManualClock(datetime(2030, 1, 1))
    with pytest.raises(ValueError, match="timezone-aware"):
        ManualClock().set(datetime(2030, 1, 1))


@pytest.mark.parametrize(
    "first",
    [
        "from conveyor.testing import DrainLimit",
        "from conveyor.testing.drain import DrainLimit",
        "import conveyor.testing.drain",
    ],
)
def test_drain_is_the_function_whatever_was_imported_first(first: str) -> None:
    # Loading the module `conveyor.testing.drain` (for DrainLimit, say in a conftest)
    # made the package's `drain` that module: "'module' object is not callable".
    import subprocess
    import sys

    code = (
        f"{first}\n"
        "import types\n"
        "from conveyor.testing import drain\n"
        "assert callable(drain) and not isinstance(drain, types.ModuleType), drain\n"
        "import conveyor.testing\n"
        "assert conveyor.testing.drain is drain\n"
        "from conveyor.testing.drain import DrainLimit\n"
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "ok", done.stderr


def test_a_cluster_node_whose_bus_port_was_taken_since_it_was_picked_starts_on_others() -> None:
    # The bus port (client port + 10000) lies where the system hands out ports to
    # clients: one taken between the pick and the start failed the whole test run.
    import socket

    from conveyor.testing.redis_cluster import BUS_OFFSET, RedisCluster

    cluster = RedisCluster(masters=1, replicas_each=0)
    picked = cluster.servers[0].port
    squatter = socket.socket()
    try:
        squatter.bind(("127.0.0.1", picked + BUS_OFFSET))
        squatter.listen(1)
        cluster.start()
        assert cluster.servers[0].port != picked
        cluster.wait_healthy()
    finally:
        squatter.close()
        cluster.cleanup()
