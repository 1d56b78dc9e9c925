"""Attempt timeouts on every backend: an overrun is a retryable `Timeout` failure that
follows the retry policy, its late result is discarded, and the worker moves on."""

from __future__ import annotations

import json
import multiprocessing
import os
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import conveyor
import process_handlers
import pytest
import sqlalchemy as sa
from backends import Backend
from conveyor.core import JobStatus, Policies, RetryPolicy, ValidationError
from conveyor.shell.codec import decode, encode
from conveyor.shell.lookup import find_job
from conveyor.shell.registry import Registry
from conveyor.shell.tenancy import SharedTables, TableTenantResolver, TenantScope
from conveyor.shell.worker.loop import Worker
from helpers import make_job, process_alive

#: Retries come due at once, so one drain runs a job's whole retry budget.
AT_ONCE = Policies(retry=RetryPolicy(initial_delay_ms=0, jitter=False))
#: Long enough that no test ever waits for it: a blocked handler is released by the test.
FOREVER_S = 30.0


def _now() -> datetime:
    return datetime.now(UTC)


def _worker(backend: Backend, registry: Registry, **options: Any) -> Worker:
    return Worker(
        backend.queue, backend.store, registry, policies=AT_ONCE, jitter=lambda: 0.5, **options
    )


def _blocked(release: threading.Event, result: Any = "late") -> Callable[[Any], Any]:
    """A handler that runs until the test releases it, then returns `result`."""

    def handler(args: Any) -> Any:
        release.wait(FOREVER_S)
        return result

    return handler


def _wait_until(check: Callable[[], bool], timeout_s: float = 10.0) -> None:
    end = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < end, "timed out waiting"
        time.sleep(0.01)


def _state(backend: Backend, job_id: Any) -> Any:
    view = find_job(backend.queue, backend.store, job_id, timedelta(minutes=1))
    assert view is not None and view.job is not None
    return view


# ---- the retry policy applies ----------------------------------------------


def test_an_overrunning_handler_is_failed_with_a_timeout_and_retried(backend: Backend) -> None:
    release = threading.Event()
    registry = Registry({"slow": _blocked(release)})
    policies = Policies(retry=RetryPolicy(initial_delay_ms=60_000, jitter=False))
    worker = Worker(backend.queue, backend.store, registry, policies=policies)
    job = make_job("slow", now=_now(), max_retries=2, timeout=0.2)
    backend.queue.enqueue(job)
    try:
        assert worker.drain() == 1
        view = _state(backend, job.id)
        assert view.state is JobStatus.RETRYING
        assert view.job.retry_count == 1
        assert view.job.last_error.type == "Timeout"
        assert view.job.last_error.retryable
        assert worker.stats.timed_out == 1 and worker.stats.retried == 1
    finally:
        release.set()


def test_a_timed_out_job_is_dead_lettered_when_its_retries_run_out(backend: Backend) -> None:
    release = threading.Event()
    worker = _worker(backend, Registry({"slow": _blocked(release)}))
    job = make_job("slow", now=_now(), max_retries=2, timeout=0.1)
    backend.queue.enqueue(job)
    try:
        assert worker.drain() == 3, "the first attempt and its two retries"
        [dead] = backend.store.list_dead()
        assert dead.id == job.id
        assert dead.retry_count == 2
        assert dead.last_error.type == "Timeout"
        assert [a.error.type for a in dead.attempts] == ["Timeout"] * 3
        assert worker.stats.timed_out == 3 and worker.stats.dead_lettered == 1
    finally:
        release.set()


def test_a_fast_handler_is_unaffected_by_its_timeout(backend: Backend) -> None:
    worker = _worker(backend, Registry({"quick": lambda args: args["n"] * 2}))
    job = make_job("quick", now=_now(), args={"n": 21}, timeout=5)
    backend.queue.enqueue(job)
    assert worker.drain() == 1
    done = backend.store.get(job.id)
    assert done.status is JobStatus.COMPLETED and done.result == 42
    assert worker.stats.timed_out == 0


def test_the_job_types_timeout_applies_when_the_job_sets_none(backend: Backend) -> None:
    release = threading.Event()
    registry = Registry()
    registry.register("slow", _blocked(release), timeout=0.1)
    worker = _worker(backend, registry)
    job = make_job("slow", now=_now(), max_retries=0)
    backend.queue.enqueue(job)
    try:
        assert worker.drain() == 1
        assert backend.store.get(job.id).last_error.type == "Timeout"
    finally:
        release.set()


def test_the_jobs_own_timeout_wins_over_the_job_types(backend: Backend) -> None:
    def takes_a_while(args: Any) -> str:
        time.sleep(0.3)
        return "done"

    registry = Registry()
    registry.register("work", takes_a_while, timeout=0.05)
    worker = _worker(backend, registry)
    job = make_job("work", now=_now(), timeout=10)
    backend.queue.enqueue(job)
    assert worker.drain() == 1
    assert backend.store.get(job.id).status is JobStatus.COMPLETED


def test_a_failure_before_the_deadline_is_recorded_as_itself_with_its_exception(
    backend: Backend,
) -> None:
    from conveyor.shell.hooks import Hooks

    def broken(args: Any) -> None:
        raise ValueError("bad input")

    hooks, heard = Hooks(), []
    hooks.on_failed(lambda job, exc: heard.append(exc))
    worker = _worker(backend, Registry({"work": broken}), hooks=hooks)
    job = make_job("work", now=_now(), max_retries=0, timeout=5)
    backend.queue.enqueue(job)
    assert worker.drain() == 1
    error = backend.store.get(job.id).last_error
    assert error.type == "ValueError" and "bad input" in (error.traceback or "")
    assert [type(exc) for exc in heard] == [ValueError]
    assert worker.stats.timed_out == 0


def test_a_timeout_failure_reaches_the_failed_hook_without_an_exception() -> None:
    from conveyor.shell.adapters.memory import MemoryJobQueue, MemoryJobStore
    from conveyor.shell.hooks import Hooks

    release = threading.Event()
    hooks, heard = Hooks(), []
    hooks.on_failed(lambda job, exc: heard.append((job.last_error.type, exc)))
    store = MemoryJobStore()
    registry = Registry({"slow": _blocked(release)})
    worker = Worker(MemoryJobQueue(store), store, registry, policies=AT_ONCE, hooks=hooks)
    worker.queue.enqueue(make_job("slow", now=_now(), max_retries=0, timeout=0.1))
    try:
        assert worker.drain() == 1
        assert heard == [("Timeout", None)]
    finally:
        release.set()


# ---- the attempt's thread ----------------------------------------------------


def test_attempts_that_finish_in_time_share_one_thread(backend: Backend) -> None:
    # Each attempt with a timeout had a thread of its own: what a handler keeps per
    # thread (Django's database connection under CONN_MAX_AGE) was never reused, and
    # each job opened a new session, closed only when collected.
    threads: list[threading.Thread] = []

    def note(args: Any) -> None:
        threads.append(threading.current_thread())

    worker = _worker(backend, Registry({"note": note}))
    for _ in range(3):
        backend.queue.enqueue(make_job("note", now=_now(), timeout=5))
    assert worker.drain() == 3
    assert len(threads) == 3 and len(set(threads)) == 1
    assert threads[0] is not threading.current_thread(), "not on the worker's own thread"


def test_an_abandoned_attempts_thread_is_not_given_the_next_attempt(backend: Backend) -> None:
    release = threading.Event()
    threads: list[threading.Thread] = []

    def slow_then_quick(args: Any) -> None:
        threads.append(threading.current_thread())
        if args.get("slow"):
            release.wait(FOREVER_S)

    worker = _worker(backend, Registry({"work": slow_then_quick}))
    backend.queue.enqueue(make_job("work", now=_now(), args={"slow": True}, timeout=0.1, max_retries=0))
    assert worker.drain() == 1
    backend.queue.enqueue(make_job("work", now=_now(), timeout=5))
    assert worker.drain() == 1, "the next attempt ran while the abandoned one still runs"
    assert len(threads) == 2 and threads[0] is not threads[1]
    release.set()
    _wait_until(lambda: worker.overruns.still_running == 0)


def test_attempts_started_from_a_running_one_at_any_depth_do_not_wait_on_it() -> None:
    # The kept thread is busy with the outermost handler: an attempt it starts, and
    # one that one starts, each queued behind it and timed out.
    from conveyor.shell.worker.timeouts import AttemptGate, DeadlineRunner

    runner = DeadlineRunner()

    def level(depth: int) -> int | None:
        if depth == 0:
            return 5
        return runner.run(lambda: level(depth - 1), 2.0, AttemptGate(), name=f"at {depth}")

    assert level(3) == 5
    runner.close()


def test_an_attempt_interrupted_by_ctrl_c_leaves_the_next_one_a_free_thread() -> None:
    # The interrupted wait left the handler running on the kept thread, and the next
    # attempt queued behind it: a false Timeout, its handler run after all.
    import signal

    from conveyor.shell.worker.timeouts import AttemptGate, DeadlineRunner

    runner = DeadlineRunner()
    main = threading.main_thread().ident
    assert main == threading.get_ident(), "a test of a Ctrl-C in the main thread"
    release = threading.Event()

    def interrupted() -> None:
        signal.pthread_kill(main, signal.SIGINT)
        release.wait(FOREVER_S)

    try:
        with pytest.raises(KeyboardInterrupt):
            runner.run(interrupted, FOREVER_S, AttemptGate(), name="interrupted")
        assert runner.run(lambda: "next", 5.0, AttemptGate(), name="next") == "next"
        assert runner.still_running == 1, "the interrupted handler, left to finish"
    finally:
        release.set()
        runner.close()


def test_a_ctrl_c_that_lands_before_the_submit_returns_still_leaves_the_handler_its_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The handler started and the Ctrl-C came before `submit_if_idle` returned its
    # future: the runner, holding no future, kept the busy thread as its own and did
    # not count the handler still running.
    import signal

    from conveyor.shell.worker import second_thread
    from conveyor.shell.worker.timeouts import AttemptGate, DeadlineRunner

    main = threading.main_thread().ident
    assert main == threading.get_ident(), "a test of a Ctrl-C in the main thread"
    signalled, release = threading.Event(), threading.Event()
    submit_if_idle = second_thread.SecondThread.submit_if_idle

    def slow_return(self: second_thread.SecondThread, call: Any, *, name: str | None = None) -> Any:
        running = submit_if_idle(self, call, name=name)
        signalled.wait(FOREVER_S)  # the Ctrl-C lands here, before the future is returned
        return running

    def interrupted() -> None:
        signal.pthread_kill(main, signal.SIGINT)
        signalled.set()
        release.wait(FOREVER_S)

    monkeypatch.setattr(second_thread.SecondThread, "submit_if_idle", slow_return)
    runner = DeadlineRunner()
    try:
        with pytest.raises(KeyboardInterrupt):
            runner.run(interrupted, FOREVER_S, AttemptGate(), name="interrupted")
        assert runner.still_running == 1, "the interrupted handler, left to finish"
        monkeypatch.undo()
        assert runner.run(lambda: "next", 5.0, AttemptGate(), name="next") == "next"
    finally:
        release.set()
        runner.close()


def test_a_ctrl_c_handled_before_the_wait_blocks_lands_while_the_handler_runs() -> None:
    # A signal that reaches the main thread just before its wait blocks wakes nothing
    # (`_thread.interrupt_main` schedules the handler with no signal at all, which is
    # that case every time): the Ctrl-C landed only when the wait ended, at the
    # attempt's deadline, after the handler had given up.
    import _thread

    from conveyor.shell.worker.timeouts import AttemptGate, DeadlineRunner

    assert threading.current_thread() is threading.main_thread()
    runner = DeadlineRunner()
    landed = threading.Event()
    seen: list[bool] = []

    def interrupted() -> None:
        _thread.interrupt_main()
        seen.append(landed.wait(FOREVER_S))

    try:
        with pytest.raises(KeyboardInterrupt):
            runner.run(interrupted, 2 * FOREVER_S, AttemptGate(), name="interrupted")
        landed.set()
        _wait_until(lambda: bool(seen))
        assert seen == [True], "the Ctrl-C landed while the handler still ran"
    finally:
        landed.set()
        runner.close()


def test_the_kept_thread_takes_a_call_only_when_idle_and_is_idle_once_one_returned() -> None:
    # The look at "busy" and the submit were two steps, and "busy" was cleared after
    # the waiter woke: a call could queue behind another and time out falsely.
    from conveyor.shell.worker.second_thread import SecondThread

    kept = SecondThread("test")
    release = threading.Event()
    first = kept.submit(lambda: release.wait(FOREVER_S))
    assert kept.submit_if_idle(lambda: "queued") is None
    release.set()
    assert first.result(5) is True
    for n in range(200):  # idle as soon as a caller has its result, every time
        running = kept.submit_if_idle(lambda n=n: n)
        assert running is not None and running.result(5) == n
    kept.close()


def test_a_thread_that_failed_to_start_leaves_the_next_call_one_that_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from conveyor.shell.worker.second_thread import SecondThread

    kept = SecondThread("test")
    real = threading.Thread.start
    failures = [RuntimeError("can't start new thread")]

    def start_once_failing(self: threading.Thread) -> None:
        if failures:
            raise failures.pop()
        real(self)

    monkeypatch.setattr(threading.Thread, "start", start_once_failing)
    with pytest.raises(RuntimeError):
        kept.submit(lambda: 1)
    assert kept.submit(lambda: 2).result(5) == 2
    kept.close()


# ---- the abandoned attempt -------------------------------------------------


def test_a_late_result_is_discarded(backend: Backend) -> None:
    release = threading.Event()
    worker = _worker(backend, Registry({"slow": _blocked(release, result="too late")}))
    job = make_job("slow", now=_now(), max_retries=0, timeout=0.1)
    backend.queue.enqueue(job)
    assert worker.drain() == 1
    assert worker.overruns.still_running == 1
    release.set()
    _wait_until(lambda: worker.overruns.still_running == 0)
    stored = backend.store.get(job.id)
    assert stored.status is JobStatus.FAILED and stored.result is None
    assert stored.last_error.type == "Timeout"
    assert worker.stats.completed == 0


def test_a_late_failure_is_discarded_too(backend: Backend) -> None:
    release = threading.Event()

    def fails_late(args: Any) -> None:
        release.wait(FOREVER_S)
        raise RuntimeError("too late to matter")

    worker = _worker(backend, Registry({"slow": fails_late}))
    job = make_job("slow", now=_now(), max_retries=0, timeout=0.1)
    backend.queue.enqueue(job)
    assert worker.drain() == 1
    release.set()
    _wait_until(lambda: worker.overruns.still_running == 0)
    assert backend.store.get(job.id).last_error.type == "Timeout"


def test_the_claim_is_released_at_the_deadline_while_the_handler_still_runs(
    backend: Backend,
) -> None:
    release = threading.Event()
    worker = _worker(backend, Registry({"slow": _blocked(release)}))
    job = make_job("slow", now=_now(), max_retries=0, timeout=0.1)
    backend.queue.enqueue(job)
    try:
        began = time.monotonic()
        assert worker.drain() == 1
        assert time.monotonic() - began < FOREVER_S / 3, "the worker waited for the handler"
        assert worker.overruns.still_running == 1
        counts = backend.queue.counts(_now())
        assert sum(c.in_flight for c in counts.values()) == 0
        assert not worker._heartbeat._held, "the heartbeat still renews the abandoned claim"
    finally:
        release.set()


def test_the_worker_keeps_running_jobs_while_an_abandoned_handler_runs(
    backend: Backend,
) -> None:
    release = threading.Event()
    registry = Registry({"slow": _blocked(release), "quick": lambda args: args["n"]})
    worker = _worker(backend, registry, poll_interval_ms=20)
    slow = make_job("slow", now=_now(), max_retries=0, timeout=0.1)
    backend.queue.enqueue(slow)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        _wait_until(lambda: worker.stats.timed_out == 1)
        quick = [make_job("quick", now=_now(), args={"n": n}) for n in range(3)]
        for job in quick:
            backend.queue.enqueue(job)
        _wait_until(lambda: worker.stats.completed == 3)
        assert [backend.store.get(j.id).result for j in quick] == [0, 1, 2]
        assert worker.overruns.still_running == 1, "the slow handler was still running"
        assert thread.is_alive()
    finally:
        release.set()
        worker.stop()
        thread.join(10)
        backend.queue.close()  # its wake-up listener, on SQL, outlives the worker
    assert not thread.is_alive()


def test_a_cooperative_handler_sees_it_timed_out_and_stops(backend: Backend) -> None:
    stopped = threading.Event()

    def cooperative(args: Any, ctx: conveyor.JobContext) -> str:
        while not ctx.should_stop():
            time.sleep(0.01)
        stopped.set()
        return "stopped"

    worker = _worker(backend, Registry({"loop": cooperative}))
    backend.queue.enqueue(make_job("loop", now=_now(), max_retries=0, timeout=0.1))
    assert worker.drain() == 1
    assert stopped.wait(5), "the handler never saw its timeout"
    _wait_until(lambda: worker.overruns.still_running == 0)


# ---- the public API, the config and the wire format --------------------------


def test_enqueue_takes_a_timeout_and_the_retry_policy_applies(tmp_path: Any) -> None:
    release = threading.Event()
    config = {
        "provider": "db",
        "url": f"sqlite:///{tmp_path / 'jobs.db'}",
        "retry": {"initial_delay_ms": 0, "jitter": False},
    }
    runtime = conveyor.build(config, handlers={"slow": _blocked(release)})
    try:
        job = runtime.enqueue("slow", {}, max_retries=1, timeout=timedelta(milliseconds=100))
        assert job.timeout_ms == 100
        stats = runtime.drain()
        assert (stats.timed_out, stats.retried, stats.dead_lettered) == (2, 1, 1)
        view = runtime.get(job.id)
        assert view.dead and view.job.last_error.type == "Timeout"
    finally:
        release.set()
        runtime.close()


def test_a_bad_enqueue_timeout_names_the_field() -> None:
    runtime = conveyor.build({"provider": "memory"})
    with pytest.raises(ValidationError) as caught:
        runtime.enqueue("slow", {}, timeout=-1)
    assert caught.value.fields == ("timeout",)


def test_the_cli_enqueues_with_a_timeout_in_seconds(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from conveyor.shell import cli

    monkeypatch.chdir(tmp_path)
    (tmp_path / "conveyor.toml").write_text('provider = "db"\nurl = "sqlite:///jobs.db"\n')
    assert cli.main(["enqueue", "slow", "{}", "--timeout", "1.5"]) == 0
    job_id = capsys.readouterr().out.strip()
    runtime = conveyor.build()
    try:
        assert runtime.get(job_id).job.timeout_ms == 1500
    finally:
        runtime.close()


def test_a_bad_cli_timeout_exits_2_in_one_line_naming_the_field(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from conveyor.shell import cli

    monkeypatch.chdir(tmp_path)
    (tmp_path / "conveyor.toml").write_text('provider = "db"\nurl = "sqlite:///jobs.db"\n')
    assert cli.main(["enqueue", "slow", "{}", "--timeout", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert "timeout" in err and "\n" not in err


def test_the_configured_timeout_of_a_job_type_applies() -> None:
    release = threading.Event()
    config = {
        "provider": "memory",
        "retry": {"initial_delay_ms": 0, "jitter": False},
        "timeouts_ms": {"slow": 100},
    }
    runtime = conveyor.build(config, handlers={"slow": _blocked(release)})
    try:
        job = runtime.enqueue("slow", {}, max_retries=0)
        assert runtime.drain().timed_out == 1
        assert runtime.get(job.id).job.last_error.type == "Timeout"
    finally:
        release.set()


def test_the_configured_timeout_wins_over_the_registered_one() -> None:
    registry = Registry()
    registry.register("work", lambda args: None, timeout=1)
    registry.configure_timeouts({"work": 250})
    assert registry.timeout_ms("work") == 250
    assert registry.timeout_ms("work", 40) == 40, "the job's own still wins"


def test_a_bad_configured_timeout_is_one_line_naming_the_key() -> None:
    with pytest.raises(ValidationError) as caught:
        conveyor.load_config({"provider": "memory", "timeouts_ms": {"slow": 0}}, env={})
    assert caught.value.fields == ("timeouts_ms.slow",)
    assert "\n" not in str(caught.value)


def test_every_bad_configured_timeout_is_named_under_its_job_type() -> None:
    table = {"slow": 0, "ok": 5, "odd": "x"}
    with pytest.raises(ValidationError) as caught:
        conveyor.load_config({"provider": "memory", "timeouts_ms": table}, env={})
    assert caught.value.fields == ("timeouts_ms.slow", "timeouts_ms.odd")


def test_a_bad_registered_timeout_is_rejected() -> None:
    with pytest.raises(ValidationError) as caught:
        Registry().register("work", lambda args: None, timeout=0)
    assert caught.value.fields == ("timeout",)


def test_the_jobs_timeout_survives_the_wire_format() -> None:
    job = make_job("work", timeout=2.5)
    assert decode(encode(job)).unwrap().timeout_ms == 2500


def test_a_document_without_a_timeout_decodes_to_none() -> None:
    doc = json.loads(encode(make_job("work")))
    del doc["timeout_ms"]
    assert decode(json.dumps(doc)).unwrap().timeout_ms is None


@pytest.mark.parametrize("forged", [0, -5, True, "30"])
def test_a_forged_timeout_is_a_decode_error(forged: Any) -> None:
    doc = json.loads(encode(make_job("work", timeout=1)))
    doc["timeout_ms"] = forged
    assert "timeout_ms" in str(decode(json.dumps(doc)).failure())


# ---- a tenant's work does not land after its attempt timed out ---------------


@pytest.fixture(params=["sqlite", "postgresql"])
def tenant_engine(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[sa.Engine]:
    if request.param == "postgresql":
        from conveyor.testing.postgres_server import drop_database, fresh_database

        url = fresh_database(prefix="conveyor_timeouts")
    else:
        url = f"sqlite:///{tmp_path / 'tenants.db'}"
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE tenants (id text primary key, schema_name text)"))
        conn.execute(sa.text("CREATE TABLE notes (tenant_id text, body text)"))
        conn.execute(sa.text("INSERT INTO tenants VALUES ('a', NULL)"))
    yield engine
    engine.dispose()
    if request.param == "postgresql":
        drop_database(url)


def test_a_tenant_handlers_work_is_rolled_back_when_its_attempt_timed_out(
    tenant_engine: sa.Engine,
) -> None:
    release = threading.Event()

    def write_then_wait(args: Any, ctx: Any) -> str:
        ctx.conn.execute(sa.text("INSERT INTO notes VALUES ('a', 'late')"))
        assert ctx.job is not None and ctx.job.deadline is not None
        release.wait(FOREVER_S)
        return "written"

    registry = Registry()
    registry.register("note", write_then_wait, tenant_scoped=True)
    scope = TenantScope(tenant_engine, TableTenantResolver(tenant_engine), SharedTables())
    from conveyor.shell.adapters.memory import MemoryJobQueue, MemoryJobStore

    store = MemoryJobStore()
    worker = Worker(MemoryJobQueue(store), store, registry, policies=AT_ONCE, tenancy=scope)
    job = make_job("note", now=_now(), tenant_id="a", max_retries=0, timeout=0.2)
    worker.queue.enqueue(job)
    assert worker.drain() == 1
    release.set()
    _wait_until(lambda: worker.overruns.still_running == 0)
    assert store.get(job.id).last_error.type == "Timeout"
    with tenant_engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM notes")).scalar() == 0


# ---- process execution: the overrunning child is killed ------------------------

#: Long enough for a child process to start on a busy machine.
PROCESS_TIMEOUT_S = 2.0


def _process_registry(job_type: str, handler: Any, **options: Any) -> Registry:
    registry = Registry()
    registry.register(job_type, handler, execution="process", **options)
    return registry


@pytest.fixture
def process_registry() -> Iterator[Callable[..., Registry]]:
    """`process_registry(job_type, handler)`: a registry whose handler runs in a child
    process (multiprocessing's spawn). After the test no such child is left running."""
    yield _process_registry
    assert not multiprocessing.active_children(), "a handler's process outlived its test"


def test_an_overrunning_process_is_killed_and_its_job_follows_the_retry_policy(
    backend: Backend, tmp_path: Any, process_registry: Callable[..., Registry]
) -> None:
    registry = process_registry("hang", process_handlers.report_pid_then_hang)
    worker = _worker(backend, registry)
    pid_file = tmp_path / "pid"
    job = make_job(
        "hang",
        now=_now(),
        args={"pid_file": str(pid_file)},
        max_retries=1,
        timeout=PROCESS_TIMEOUT_S,
    )
    backend.queue.enqueue(job)
    assert worker.drain() == 2, "the attempt and its one retry"
    assert pid_file.exists(), "the handler never started in its process"
    assert not process_alive(int(pid_file.read_text())), "the overrunning process still runs"
    [dead] = backend.store.list_dead()
    assert dead.id == job.id and dead.retry_count == 1
    assert [a.error.type for a in dead.attempts] == ["Timeout", "Timeout"]
    assert worker.overruns.still_running == 0, "no thread was left behind"


def test_a_process_handler_returns_its_result(
    process_registry: Callable[..., Registry],
) -> None:
    worker, store = _memory_worker(process_registry("double", process_handlers.double))
    job = make_job("double", now=_now(), args={"n": 21}, timeout=30)
    worker.queue.enqueue(job)
    assert worker.drain() == 1
    assert store.get(job.id).result == 42


def test_a_process_handler_receives_the_job_context_in_its_process(
    process_registry: Callable[..., Registry],
) -> None:
    worker, store = _memory_worker(process_registry("ctx", process_handlers.with_context))
    job = make_job("ctx", now=_now())
    worker.queue.enqueue(job)
    assert worker.drain() == 1
    result = store.get(job.id).result
    assert result["job_id"] == str(job.id) and result["attempt"] == 1
    assert result["pid"] != os.getpid()


def test_a_process_handlers_exception_is_its_failure_with_the_traceback(
    process_registry: Callable[..., Registry],
) -> None:
    worker, store = _memory_worker(process_registry("fails", process_handlers.fails))
    job = make_job("fails", now=_now(), max_retries=0)
    worker.queue.enqueue(job)
    assert worker.drain() == 1
    error = store.get(job.id).last_error
    assert error.type == "ValueError" and "bad input" in (error.traceback or "")


def test_a_process_that_dies_without_an_answer_is_a_retryable_failure(
    process_registry: Callable[..., Registry],
) -> None:
    worker, store = _memory_worker(process_registry("dies", process_handlers.dies))
    job = make_job("dies", now=_now(), max_retries=0)
    worker.queue.enqueue(job)
    assert worker.drain() == 1
    error = store.get(job.id).last_error
    assert error.type == "process-died" and error.retryable and "exit code 3" in error.message


def test_a_process_handlers_sys_exit_is_its_failure_as_on_a_thread(
    process_registry: Callable[..., Registry],
) -> None:
    # It ended the child: "process-died ... (exit code 3)", where a thread says SystemExit.
    worker, store = _memory_worker(process_registry("exits", process_handlers.exits))
    job = make_job("exits", now=_now(), max_retries=0)
    worker.queue.enqueue(job)
    assert worker.drain() == 1
    error = store.get(job.id).last_error
    assert (error.type, error.message) == ("SystemExit", "3")


@pytest.mark.parametrize(
    ("handler", "options", "field"),
    [
        (lambda args: None, {}, "handler"),
        (process_handlers.double, {"tenant_scoped": True}, "execution"),
        (process_handlers.double, {"execution": "fork"}, "execution"),
    ],
    ids=["lambda", "tenant-scoped", "unknown-execution"],
)
def test_what_cannot_run_in_a_process_is_refused_at_registration(
    handler: Any, options: dict[str, Any], field: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        Registry().register("work", handler, **{"execution": "process", **options})
    assert caught.value.fields == (field,)


def _memory_worker(registry: Registry) -> tuple[Worker, Any]:
    from conveyor.shell.adapters.memory import MemoryJobQueue, MemoryJobStore

    store = MemoryJobStore()
    return Worker(MemoryJobQueue(store), store, registry, policies=AT_ONCE), store


# ---- a worker process with handlers that ignore their deadline -----------------

HANGING_HANDLERS = """
import os, pathlib, time
OUT = pathlib.Path(os.environ["SHIP_OUT"])
def hang(args):
    time.sleep(3600)  # ignores its deadline: the thread is abandoned
def ship(args):
    with OUT.open("a") as f:
        f.write(str(args["n"]) + "\\n")
HANDLERS = {"hang": hang, "ship": ship}
"""


def test_a_worker_process_keeps_working_past_hung_handlers_and_stops_cleanly(
    tmp_path: Any,
) -> None:
    import signal
    import subprocess
    import sys

    (tmp_path / "hanging_handlers.py").write_text(HANGING_HANDLERS)
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    (tmp_path / "conveyor.toml").write_text(
        f'provider = "db"\nurl = "{url}"\n'
        'handlers = ["hanging_handlers:HANDLERS"]\nentry_points = false\n'
        "[retry]\ninitial_delay_ms = 0\njitter = false\n"
        "[timeouts_ms]\nhang = 300\n"
        "[workers]\ncount = 1\npoll_interval_ms = 20\n"
    )
    producer = conveyor.build({"provider": "db", "url": url, "entry_points": False})
    out = tmp_path / "shipped.txt"
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "SHIP_OUT": str(out)}
    env.pop("CONVEYOR_URL", None)
    worker = subprocess.Popen(
        [sys.executable, "-m", "conveyor.shell.cli", "worker"],
        cwd=tmp_path,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        hung = producer.enqueue("hang", {}, max_retries=1)
        for n in range(3):
            producer.enqueue("ship", {"n": n})
        _wait_until(lambda: out.exists() and len(out.read_text().split()) == 3, 30)
        _wait_until(lambda: producer.get(hung.id).dead, 30)
        dead = producer.get(hung.id).job
        assert [a.error.type for a in dead.attempts] == ["Timeout", "Timeout"]
    finally:
        worker.send_signal(signal.SIGTERM)
        code = worker.wait(timeout=30)
        producer.close()
    stderr = worker.stderr.read() if worker.stderr else ""
    assert code == 0, stderr
    assert "abandoned" in stderr, "each abandonment is logged"


def test_a_process_whose_job_is_cancelled_is_killed_and_recorded_cancelled(
    tmp_path: Any, process_registry: Callable[..., Registry]
) -> None:
    registry = process_registry("hang", process_handlers.report_pid_then_hang)
    runtime = conveyor.build({"provider": "memory"}, registry=registry)
    pid_file = tmp_path / "pid"
    job = runtime.enqueue("hang", {"pid_file": str(pid_file)}, timeout=60)
    drained = threading.Thread(target=runtime.drain, daemon=True)
    drained.start()
    _wait_until(pid_file.exists, 30)
    runtime.cancel(job.id)
    drained.join(30)
    assert not drained.is_alive(), "the worker still waits for its child"
    assert not process_alive(int(pid_file.read_text()))
    assert runtime.get(job.id).state is JobStatus.CANCELLED
