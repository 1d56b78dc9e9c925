"""asyncio: `async def` handlers on the worker's event loop, and `aenqueue`.

On memory, SQLite, PostgreSQL and Redis: an async handler's outcome is decided and
written like a sync one's; several run at once, up to the configured concurrency;
`aenqueue` writes from a running loop without blocking it.
"""

from __future__ import annotations

import asyncio
import sqlite3
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import conveyor
import pytest
from backends import BACKENDS, REDIS_TEST_DB
from conveyor.core import JobStatus, ValidationError
from conveyor.shell.async_enqueue import THREAD, AsyncWriters
from conveyor.shell.config import parse_config
from conveyor.shell.runtime import Runtime

_pg: dict[str, str] = {}


def _config(backend: str, folder: Path, **extra: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "entry_points": False,
        "workers": {"count": 0, "async_concurrency": extra.pop("async_concurrency", 10)},
        "retry": {"initial_delay_ms": 0, "jitter": False},
        **extra,
    }
    if backend == "memory":
        return {**base, "provider": "memory"}
    if backend == "sqlite":
        return {**base, "url": f"sqlite:///{folder / 'jobs.db'}"}
    if backend == "postgresql":
        from conveyor.testing.postgres_server import fresh_database

        if "url" not in _pg:
            _pg["url"] = fresh_database(prefix="conveyor_asyncio")
        return {**base, "url": _pg["url"], "auto_migrate": True}
    from conveyor.testing.redis_server import redis_url

    # A prefix of its own: nothing another test left in the database is seen here.
    redis = {"url": redis_url(REDIS_TEST_DB), "prefix": f"aio-{uuid.uuid4().hex[:8]}"}
    return {**base, "provider": "redis", "redis": redis}


def _clear(rt: Runtime) -> None:
    if rt.config.provider == "db" and rt.config.url.startswith("postgresql"):
        from conveyor.shell.adapters.sql.schema import SCHEMA

        with rt.queue.engine.begin() as conn:  # type: ignore[attr-defined]
            for table in (SCHEMA.job_queue, SCHEMA.job_store):
                conn.execute(table.delete())


@pytest.fixture
def folder() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="conveyor-asyncio-") as name:
        yield Path(name)


@pytest.fixture(params=BACKENDS)
def make(request: pytest.FixtureRequest, folder: Path) -> Iterator[Any]:
    """`make(handlers, **config)`: a runtime on the backend, emptied first."""
    made: list[Runtime] = []

    def build(handlers: dict[str, Any], **extra: Any) -> Runtime:
        rt = conveyor.build(_config(request.param, folder, **extra), handlers=handlers)
        _clear(rt)
        made.append(rt)
        return rt

    yield build
    for rt in made:
        rt.stop()
        rt.close()


# ---- async handlers ---------------------------------------------------------------


def test_an_async_handlers_result_is_recorded(make: Any) -> None:
    async def add(args: Any) -> int:
        await asyncio.sleep(0.01)
        return int(args["a"]) + int(args["b"])

    rt = make({"add": add})
    job = rt.enqueue("add", {"a": 2, "b": 3})
    stats = rt.drain()
    view = rt.get(job.id)
    assert view.state is JobStatus.COMPLETED
    assert view.job.result == 5
    assert stats.completed == 1


def test_an_async_handler_that_raises_is_retried_per_policy(make: Any) -> None:
    tries: list[int] = []

    async def flaky(args: Any) -> None:
        tries.append(1)
        await asyncio.sleep(0)
        raise ValueError("upstream said no")

    rt = make({"flaky": flaky})
    job = rt.enqueue("flaky", {}, max_retries=2)
    rt.drain(wait_scheduled=True, timeout_s=30)
    assert len(tries) == 3  # the first attempt and two retries
    (dead,) = rt.list_dead()
    assert dead.id == job.id
    assert dead.last_error is not None
    assert (dead.last_error.type, dead.last_error.message) == ("ValueError", "upstream said no")


@pytest.mark.parametrize(
    "raised", [SystemExit(4), KeyboardInterrupt(), asyncio.CancelledError("own")]
)
def test_an_async_handler_raising_a_base_exception_fails_its_attempt_and_the_loop_lives_on(
    raised: BaseException,
) -> None:
    # SystemExit and KeyboardInterrupt escaped the task and ended the process's one
    # event loop: nothing recorded the job, and drain (and every async job after it)
    # waited for ever. A handler's own CancelledError lost its message and traceback.
    async def bad(args: Any) -> None:
        await asyncio.sleep(0)
        raise raised

    async def good(args: Any) -> str:
        await asyncio.sleep(0)
        return "fine"

    rt = conveyor.build(_config("memory", Path(".")), handlers={"bad": bad, "good": good})
    jobs = [rt.enqueue("bad", {}, max_retries=0), rt.enqueue("good", {})]
    drained = threading.Thread(target=lambda: rt.drain(timeout_s=10), daemon=True)
    drained.start()
    drained.join(30)
    assert not drained.is_alive(), "drain hung"
    later = rt.enqueue("good", {})
    rt.drain(timeout_s=10)
    views = [rt.get(job.id) for job in (*jobs, later)]
    rt.close()
    assert [v.state for v in views if v] == [JobStatus.FAILED] + [JobStatus.COMPLETED] * 2
    error = views[0].job.last_error if views[0] and views[0].job else None
    assert error is not None and error.type == type(raised).__name__, error
    assert str(raised) in error.message and "in bad" in (error.traceback or ""), error


def test_async_jobs_run_concurrently(make: Any) -> None:
    started = 0
    everyone_in = asyncio.Event()

    async def gather(args: Any) -> str:
        nonlocal started
        started += 1
        if started == 10:
            everyone_in.set()
        # Only released once all ten are running at the same time.
        await asyncio.wait_for(everyone_in.wait(), timeout=20)
        return "met"

    rt = make({"gather": gather}, async_concurrency=10)
    jobs = rt.enqueue_many("gather", [{"n": n} for n in range(10)])
    stats = rt.drain()
    assert stats.completed == 10
    assert {rt.get(j.id).job.result for j in jobs} == {"met"}


def test_async_concurrency_bounds_how_many_run_at_once(make: Any) -> None:
    running = 0
    most = 0
    three_in, release = threading.Event(), threading.Event()

    async def work(args: Any) -> None:
        nonlocal running, most
        running += 1
        most = max(most, running)
        if running == 3:
            three_in.set()
        while not release.is_set():
            await asyncio.sleep(0.005)
        running -= 1

    def let_go() -> None:
        # Time enough for the worker to start a fourth, were it allowed to.
        three_in.wait(20)
        time.sleep(0.3)
        release.set()

    rt = make({"work": work}, async_concurrency=3)
    rt.enqueue_many("work", [{} for _ in range(6)])
    threading.Thread(target=let_go, daemon=True).start()
    assert rt.drain().completed == 6
    assert most == 3


def test_an_async_job_that_finishes_while_a_sync_job_runs_is_written_meanwhile(
    make: Any,
) -> None:
    # The worker's thread wrote async outcomes between jobs, so an async job that
    # finished while the same worker ran a long sync one waited for its end.
    seen: list[JobStatus] = []
    quick_id: list[Any] = []

    async def quick(args: Any) -> str:
        await asyncio.sleep(0.05)
        return "quick"

    def long(args: Any) -> str:
        deadline = time.monotonic() + 10
        state = None
        while time.monotonic() < deadline:
            state = rt.get(quick_id[0]).state
            if state is JobStatus.COMPLETED:
                break
            time.sleep(0.02)
        seen.append(state)
        return "long"

    rt = make({"quick": quick, "long": long})
    quick_id.append(rt.enqueue("quick", {}).id)
    rt.enqueue("long", {})
    # On a thread of its own, as a worker's (a drain on the main thread keeps its sync
    # handlers there: see the next test).
    drained: list[Any] = []
    drainer = threading.Thread(target=lambda: drained.append(rt.drain()))
    drainer.start()
    drainer.join(30)
    assert [stats.completed for stats in drained] == [2]
    assert seen == [JobStatus.COMPLETED]


def test_a_drain_on_the_main_thread_runs_a_sync_handler_there_beside_async_jobs(
    make: Any,
) -> None:
    # It ran on the worker's second thread: a Ctrl-C then landed in the drain's wait,
    # not in the handler, which ran on while its claim was let go (a second run of the
    # job overlapped it), and its SystemExit became a retried failure.
    ran_on: list[threading.Thread] = []

    async def slow(args: Any) -> None:
        await asyncio.sleep(0.3)

    def leave(args: Any) -> None:
        ran_on.append(threading.current_thread())
        raise SystemExit(3)

    rt = make({"slow": slow, "leave": leave})
    slow_job = rt.enqueue("slow", {})
    rt.enqueue("leave", {})
    worker = rt.worker("default")
    with pytest.raises(SystemExit):
        worker.drain()
    assert ran_on == [threading.main_thread()]
    # The async job was cancelled with the drain and left to its lease, as the sync
    # one was: this worker renews neither claim, nor writes either job.
    assert worker.running() == ()
    worker.drain()
    assert rt.get(slow_job.id).state is JobStatus.RUNNING


def test_an_interrupted_drain_cancels_its_async_jobs_and_leaves_them_to_their_leases(
    make: Any,
) -> None:
    # `Runtime.drain` drops its workers: one interrupted (a Ctrl-C in a notebook, a
    # handler's SystemExit) left its async job running and its heartbeat renewing
    # that claim for as long as the process lived, so no worker could reclaim it.
    events: list[str] = []
    left: list[str] = []

    async def slow(args: Any) -> str:
        events.append("start")
        try:
            await asyncio.sleep(0.5)
        except asyncio.CancelledError:
            events.append("cancelled")
            raise
        events.append("done")
        return "ok"

    def leave(args: Any) -> None:
        if not left:
            left.append("once")
            raise SystemExit(3)

    rt = make({"slow": slow, "leave": leave}, lease_ms=300)
    job = rt.enqueue("slow", {})
    rt.enqueue("leave", {})
    with pytest.raises(SystemExit):
        rt.drain()
    deadline = time.monotonic() + 10
    while "cancelled" not in events and time.monotonic() < deadline:
        time.sleep(0.01)
    while rt.get(job.id).state is not JobStatus.COMPLETED and time.monotonic() < deadline:
        rt.drain(timeout_s=2)  # reclaims it once its lease has run out
        time.sleep(0.05)
    assert rt.get(job.id).state is JobStatus.COMPLETED
    assert events == ["start", "cancelled", "start", "done"]


def test_a_running_async_job_keeps_its_claim_past_the_lease(make: Any) -> None:
    runs: list[str] = []

    async def slow(args: Any) -> None:
        runs.append("run")
        await asyncio.sleep(1.0)

    # The heartbeat renews every lease_ms / 3; another worker reclaims after lease_ms.
    rt = make({"slow": slow}, lease_ms=300)
    job = rt.enqueue("slow", {})
    first = threading.Thread(target=rt.drain)
    first.start()
    time.sleep(0.6)
    rt.drain()  # a second worker meanwhile finds nothing to reclaim or run
    first.join(10)
    assert runs == ["run"]
    assert rt.get(job.id).state is JobStatus.COMPLETED


def test_stopping_a_worker_writes_its_running_async_jobs_first(make: Any) -> None:
    began = threading.Event()

    async def slow(args: Any) -> str:
        began.set()
        await asyncio.sleep(0.3)
        return "done"

    rt = make({"slow": slow}, workers={"count": 1, "poll_interval_ms": 20})
    job = rt.enqueue("slow", {})
    rt.start()
    assert began.wait(10)
    assert rt.stop(grace_s=10)
    assert rt.get(job.id).state is JobStatus.COMPLETED


def test_an_async_handler_past_its_timeout_is_cancelled_and_retried() -> None:
    cancelled: list[int] = []

    async def stuck(args: Any) -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.append(1)
            raise

    rt = conveyor.build(
        {"provider": "memory", "entry_points": False, "retry": {"initial_delay_ms": 0}}
    )
    rt.registry.register("stuck", stuck, timeout=0.05)
    job = rt.enqueue("stuck", {}, max_retries=1)
    stats = rt.drain(wait_scheduled=True, timeout_s=20)
    assert len(cancelled) == 2  # each attempt stopped at its deadline
    (dead,) = rt.list_dead()
    assert dead.id == job.id and dead.last_error is not None
    assert dead.last_error.type == "Timeout"
    assert stats.timed_out == 2


def test_an_async_handler_receives_the_job_context() -> None:
    seen: list[tuple[str, int]] = []

    async def report(args: Any, ctx: conveyor.JobContext) -> None:
        seen.append((ctx.job_type, ctx.attempt))

    rt = conveyor.build({"provider": "memory", "entry_points": False}, handlers={"r": report})
    rt.enqueue("r", {})
    rt.drain()
    assert seen == [("r", 1)]


def test_an_async_handler_blocking_on_another_async_job_gets_an_error_not_a_hang() -> None:
    errors: list[str] = []

    async def child(args: Any) -> None:
        return None

    async def parent(args: Any) -> None:
        # On a queue only the inner worker polls, so the outer drain cannot take it first.
        rt.enqueue("child", {}, queue="children")
        try:
            rt.worker("children").drain()  # would wait for the loop this handler runs on
        except RuntimeError as exc:
            errors.append(str(exc))

    rt = conveyor.build(
        {"provider": "memory", "entry_points": False},
        handlers={"parent": parent, "child": child},
    )
    rt.enqueue("parent", {})
    rt.drain()
    assert len(errors) == 1 and "aenqueue" in errors[0]


def test_an_async_handler_waiting_with_the_blocking_result_gets_an_error_not_a_hang() -> None:
    errors: list[str] = []

    async def child(args: Any) -> int:
        return 1

    async def parent(args: Any) -> None:
        job = rt.enqueue("child", {})
        try:
            # The child would run on the loop this wait blocks: it could only run out.
            rt.result(job.id, timeout=2)
        except RuntimeError as exc:
            errors.append(str(exc))

    rt = conveyor.build(
        {"provider": "memory", "entry_points": False},
        handlers={"parent": parent, "child": child},
    )
    try:
        parent_job = rt.enqueue("parent", {})
        rt.start()
        assert rt.result(parent_job.id, timeout=10) is None
        assert len(errors) == 1 and "await runtime.aresult" in errors[0], errors
    finally:
        rt.stop(grace_s=5)
        rt.close()


def test_async_concurrency_must_be_a_positive_integer() -> None:
    with pytest.raises(ValidationError) as info:
        parse_config({"workers": {"async_concurrency": 0}})
    assert str(info.value) == "workers.async_concurrency: must be >= 1, got 0"
    assert parse_config({}).workers.async_concurrency == 10


def test_a_tenant_scoped_handler_cannot_be_async() -> None:
    async def scoped(args: Any, ctx: Any) -> None:
        return None

    registry = conveyor.Registry()
    with pytest.raises(ValidationError, match="handler"):
        registry.register("scoped", scoped, tenant_scoped=True)


# ---- aenqueue -----------------------------------------------------------------------

#: The path `aenqueue` takes on each backend, with the dev extras installed.
DRIVERS = {
    "memory": "memory",
    "sqlite": THREAD,  # by choice: see docs/asyncio.md
    "postgresql": "postgresql+asyncpg",
    "redis": "redis.asyncio",
}


def test_aenqueue_takes_the_documented_path_on_each_backend(make: Any) -> None:
    rt = make({})
    backend = "sqlite" if rt.config.url.startswith("sqlite") else "postgresql"
    if rt.config.provider != "db":
        backend = rt.config.provider
    assert rt.async_writers.driver == DRIVERS[backend]


def test_aenqueue_works_in_a_running_loop(make: Any) -> None:
    ran: list[int] = []
    rt = make({"count": lambda args: ran.append(int(args["n"]))})

    async def main() -> tuple[Any, list[Any]]:
        one = await rt.aenqueue("count", {"n": 1}, priority="high")
        many = await rt.aenqueue_many("count", [{"n": 2}, {"n": 3}])
        await rt.aclose()
        return one, many

    one, many = asyncio.run(main())
    assert rt.get(one.id).state is JobStatus.PENDING
    assert rt.get(one.id).job.priority.value == "high"
    assert [rt.get(j.id).state for j in many] == [JobStatus.PENDING] * 2
    rt.drain()
    assert ran == [1, 2, 3]


def test_aenqueue_from_an_async_handler_reaches_the_queue(make: Any) -> None:
    rt: Runtime

    async def fan_out(args: Any) -> None:
        await rt.aenqueue("leaf", {"from": "fan_out"})

    seen: list[str] = []
    rt = make({"fan_out": fan_out, "leaf": lambda args: seen.append(args["from"])})
    rt.enqueue("fan_out", {})
    rt.drain()
    assert seen == ["fan_out"]


def test_aenqueue_without_an_async_driver_runs_the_sync_enqueue_in_a_thread(
    make: Any,
) -> None:
    rt = make({})
    rt.async_writers = AsyncWriters(rt.config, rt.queue, native=False)

    job = asyncio.run(rt.aenqueue("t", {"a": 1}))
    assert rt.async_writers.driver == THREAD
    assert rt.get(job.id).state is JobStatus.PENDING


def test_the_loop_keeps_running_while_aenqueue_waits_for_a_sqlite_writer(
    folder: Path,
) -> None:
    rt = conveyor.build(_config("sqlite", folder))
    # Another process's writer holds SQLite's one write lock.
    writer = sqlite3.connect(folder / "jobs.db", isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")

    async def main() -> tuple[int, bool, Any]:
        enqueue = asyncio.ensure_future(rt.aenqueue("t", {}))
        ticks = 0
        for _ in range(30):
            await asyncio.sleep(0.01)
            ticks += 1  # progress of another coroutine on the same loop
        waiting = not enqueue.done()
        writer.execute("COMMIT")
        job = await enqueue
        await rt.aclose()
        return ticks, waiting, job

    try:
        ticks, waiting, job = asyncio.run(main())
    finally:
        writer.close()
        rt.close()
    assert waiting  # the enqueue was behind the lock all that time...
    assert ticks == 30  # ...and the loop ran everything else meanwhile
    assert conveyor.build(_config("sqlite", folder)).get(job.id) is not None


def test_aenqueue_with_a_caller_chosen_id_returns_the_job_already_there(
    folder: Path,
) -> None:
    rt = conveyor.build(_config("sqlite", folder))
    job_id = uuid.uuid4()

    async def main() -> tuple[Any, Any]:
        first = await rt.aenqueue("t", {"v": 1}, id=job_id)
        second = await rt.aenqueue("t", {"v": 2}, id=job_id)
        await rt.aclose()
        return first, second

    first, second = asyncio.run(main())
    rt.close()
    assert first.id == second.id == job_id
    assert second.args["v"] == 1
