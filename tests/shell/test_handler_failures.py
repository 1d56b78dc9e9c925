"""Whatever a handler raises is its attempt's failure, recorded, and the worker goes
on: an exception whose `str()` raises, a `BaseException` subclass raised in a
worker's thread, a `Permanent` whose type is no text, an async handler that swallows
the cancel at its deadline. Each used to strand the job in `running` (or lose it, or
record it completed) and, for some, end the worker's thread."""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import conveyor
import pytest


class StrRaises(Exception):
    def __str__(self) -> str:
        raise RuntimeError("str fails")


class Custom(BaseException):
    pass


def _config(where: str, tmp_path: Path, **more: Any) -> dict[str, Any]:
    if where == "memory":
        return {"provider": "memory", **more}
    return {"provider": "db", "url": f"sqlite:///{tmp_path / 'jobs.db'}", **more}


def _last_error(rt: conveyor.Runtime, job: conveyor.Job) -> tuple[str, dict[str, Any]]:
    shown = rt.get(job.id)
    assert shown is not None, "the job is still there"
    view = shown.to_dict()
    return view["state"], view["last_error"]


@pytest.mark.parametrize("where", ["memory", "sqlite"])
def test_an_exception_whose_str_raises_is_a_recorded_failure(where: str, tmp_path: Path) -> None:
    def handler(args: Any) -> None:
        raise StrRaises()

    rt = conveyor.build(_config(where, tmp_path), handlers={"h": handler}, env={})
    try:
        job = rt.enqueue("h", {}, max_retries=0)
        assert rt.drain().dead_lettered == 1
        state, error = _last_error(rt, job)
    finally:
        rt.close()
    assert state == "failed"
    assert error["type"] == "StrRaises" and error["message"] == "StrRaises()"


@pytest.mark.parametrize("raised", [Custom, KeyboardInterrupt, SystemExit, GeneratorExit])
def test_a_base_exception_in_a_workers_thread_fails_the_attempt_and_the_worker_goes_on(
    raised: type[BaseException],
) -> None:
    def handler(args: Any) -> None:
        raise raised("from the handler")

    config = {"provider": "memory", "workers": {"count": 1, "poll_interval_ms": 20}}
    rt = conveyor.build(config, handlers={"h": handler, "ok": lambda args: "ok"}, env={})
    rt.start()
    try:
        bad = rt.enqueue("h", {}, max_retries=0)
        good = rt.enqueue("ok", {})
        assert rt.result(good.id, timeout=10) == "ok", "the worker ran the next job"
        with pytest.raises(conveyor.JobFailed):
            rt.result(bad.id, timeout=10)
        state, error = _last_error(rt, bad)
    finally:
        assert rt.stop(grace_s=5)
        rt.close()
    assert state == "failed" and error["type"] == raised.__name__


def test_ctrl_c_during_a_drain_in_the_main_thread_still_stops_it() -> None:
    def handler(args: Any) -> None:
        raise KeyboardInterrupt

    rt = conveyor.build({"provider": "memory"}, handlers={"h": handler}, env={})
    try:
        rt.enqueue("h", {})
        with pytest.raises(KeyboardInterrupt):
            rt.drain()
    finally:
        rt.close()


def test_a_permanent_type_that_is_no_text_is_kept_as_text(tmp_path: Path) -> None:
    def handler(args: Any) -> None:
        raise conveyor.Permanent("no such account", type=404)  # type: ignore[arg-type]

    rt = conveyor.build(_config("sqlite", tmp_path), handlers={"h": handler}, env={})
    try:
        job = rt.enqueue("h", {})
        rt.drain()
        state, error = _last_error(rt, job)
        assert [d.id for d in rt.list_dead()] == [job.id]
    finally:
        rt.close()
    assert state == "failed" and error["type"] == "404" and not error["retryable"]


async def _swallows_the_cancel(args: Any) -> str:
    for _ in range(3):
        try:
            await asyncio.sleep(0.2)
        except asyncio.CancelledError:
            pass
    return "finished anyway"


async def _blocks_the_loop(args: Any) -> str:
    time.sleep(0.3)  # never lets the loop run the deadline's cancel
    return "blocked"


async def _blocks_then_awaits(args: Any) -> str:
    time.sleep(0.3)
    await asyncio.sleep(0)  # the deadline's cancel comes after this step has ended
    return "blocked, then awaited"


async def _blocks_then_raises(args: Any) -> str:
    time.sleep(0.3)
    raise ValueError("late")


@pytest.mark.parametrize(
    "handler", [_swallows_the_cancel, _blocks_the_loop, _blocks_then_awaits, _blocks_then_raises]
)
def test_an_async_handler_that_ends_after_its_deadline_is_a_timeout(handler: Any) -> None:
    # It swallowed the deadline's cancel, or blocked the loop so the cancel never ran,
    # and was recorded completed (or as its own late error): a sync handler is a
    # Timeout there.
    rt = conveyor.build({"provider": "memory"}, handlers={"b": handler}, env={})
    try:
        job = rt.enqueue("b", {}, timeout=0.05, max_retries=0)
        stats = rt.drain()
        state, error = _last_error(rt, job)
    finally:
        rt.close()
    assert stats.timed_out == 1
    assert state == "failed" and error["type"] == "Timeout"


def test_an_async_handler_within_its_deadline_keeps_its_result() -> None:
    async def quick(args: Any) -> str:
        await asyncio.sleep(0.01)
        return "in time"

    rt = conveyor.build({"provider": "memory"}, handlers={"q": quick}, env={})
    try:
        job = rt.enqueue("q", {}, timeout=5)
        rt.drain()
        assert rt.result(job.id, timeout=5) == "in time"
    finally:
        rt.close()


def test_a_result_refused_as_too_large_or_not_json_is_a_failed_attempt_everywhere(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The attempt was dead-lettered with no WARNING, no on_failed and no duration
    # sample, unlike every other failed attempt.
    from conveyor.shell.metrics import instrument
    from prometheus_client import CollectorRegistry

    handlers = {"big": lambda args: "x" * 500, "odd": lambda args: {1}}
    rt = conveyor.build({"provider": "memory", "max_result_bytes": 100}, handlers=handlers, env={})
    failed: list[str] = []
    rt.hooks.on_failed(lambda job, exc: failed.append(job.job_type))
    registry = CollectorRegistry()
    instrument(rt, registry=registry)
    try:
        for job_type in handlers:
            rt.enqueue(job_type, {}, max_retries=3)
        with caplog.at_level(logging.WARNING, logger="conveyor"):
            rt.drain()
    finally:
        rt.close()
    assert sorted(failed) == ["big", "odd"]
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("(big) attempt 1 failed: result-too-large" in m for m in warned), warned
    assert any("(odd) attempt 1 failed: invalid-result" in m for m in warned), warned
    for job_type in handlers:
        labels = {"queue": "default", "job_type": job_type}
        count = registry.get_sample_value("conveyor_job_duration_seconds_count", labels)
        assert count == 1, (job_type, count)


class _RowsThatRaise(list[Any]):
    def __iter__(self) -> Any:
        raise RuntimeError("the cursor is closed")


@pytest.mark.parametrize("where", ["memory", "sqlite"])
def test_a_result_that_raises_as_it_is_read_dead_letters_and_spares_its_batch(
    where: str, tmp_path: Path
) -> None:
    # The error escaped the core's decision: the round failed, nothing was written, and
    # the job and the rest of its batch waited for their leases.
    handlers = {"odd": lambda args: {"rows": _RowsThatRaise([1])}, "ok": lambda args: args["i"]}
    config: dict[str, Any] = {"provider": "memory", "workers": {"prefetch": 4}}
    if where == "sqlite":
        config = {**config, "provider": "db", "url": f"sqlite:///{tmp_path / 'jobs.db'}"}
    rt = conveyor.build(config, handlers=handlers, env={})
    try:
        odd = rt.enqueue("odd", {}, max_retries=3)
        rest = [rt.enqueue("ok", {"i": i}) for i in range(3)]
        rt.drain(timeout_s=5)
        views = [rt.get(job.id) for job in (odd, *rest)]
    finally:
        rt.close()
    assert [v.state.value for v in views if v is not None] == ["failed"] + ["completed"] * 3
    error = views[0].job.last_error if views[0] is not None and views[0].job else None
    assert error is not None and error.type == "invalid-result" and not error.retryable
    assert "$.rows" in error.message and "RuntimeError" in error.message


# ---- bad waits and listings: refused as invalid input, not a busy loop or a crash --


@pytest.mark.parametrize("timeout", [float("nan"), -1, timedelta(seconds=-1), "1", True])
def test_a_result_timeout_that_is_no_duration_is_invalid_input(timeout: object) -> None:
    rt = conveyor.build({"provider": "memory"}, handlers={"ok": lambda args: 1}, env={})
    try:
        job = rt.enqueue("ok", {})
        with pytest.raises(conveyor.ValidationError, match="timeout: must be >= 0 seconds"):
            rt.result(job.id, timeout=timeout)  # type: ignore[arg-type]
        with pytest.raises(conveyor.ValidationError, match="timeout: must be >= 0 seconds"):
            asyncio.run(rt.aresult(job.id, timeout=timeout))  # type: ignore[arg-type]
    finally:
        rt.close()


@pytest.mark.parametrize("where", ["memory", "sqlite"])
@pytest.mark.parametrize("limit", [-1, 2.5, "2", True])
def test_list_dead_refuses_a_limit_that_is_no_count(
    where: str, limit: object, tmp_path: Path
) -> None:
    rt = conveyor.build(_config(where, tmp_path), env={})
    try:
        with pytest.raises(conveyor.ValidationError, match="limit: must be an integer >= 0"):
            rt.list_dead(limit=limit)  # type: ignore[arg-type]
    finally:
        rt.close()


@pytest.mark.parametrize("where", ["memory", "sqlite"])
@pytest.mark.parametrize("tenant", ["", "a:b", 7])
def test_a_read_of_an_empty_or_malformed_tenant_is_refused_naming_tenant_id(
    where: str, tenant: object, tmp_path: Path
) -> None:
    rt = conveyor.build(_config(where, tmp_path), env={})
    try:
        reads = (
            lambda: rt.list_dead(tenant_id=tenant),  # type: ignore[arg-type]
            lambda: rt.list_jobs(tenant_id=tenant),  # type: ignore[arg-type]
            lambda: rt.status(tenant_id=tenant),  # type: ignore[arg-type]
        )
        for read in reads:
            with pytest.raises(conveyor.ValidationError, match=r"tenant_id: (must|may)"):
                read()
        assert rt.list_dead(tenant_id="acme") == [] and rt.list_jobs(tenant_id="acme") == []
    finally:
        rt.close()


def test_start_and_stop_cycles_leave_no_heartbeat_thread_behind() -> None:
    import threading
    import time

    def beats() -> int:
        return sum(t.name == "conveyor-heartbeat" for t in threading.enumerate())

    before = beats()
    config = {"provider": "memory", "workers": {"count": 1}, "lease_ms": 400}
    rt = conveyor.build(config, handlers={"ok": lambda args: 1}, env={})
    try:
        for _ in range(3):
            rt.start()
            assert rt.result(rt.enqueue("ok", {}).id, timeout=10) == 1
            assert rt.stop(grace_s=5)
    finally:
        rt.close()
    # A heartbeat with nothing to keep ends within a quarter of its interval.
    deadline = time.monotonic() + 5
    while beats() > before and time.monotonic() < deadline:
        time.sleep(0.02)
    # At most as many as before: another test's heartbeat may end meanwhile.
    assert beats() <= before


def test_a_stopped_worker_s_heartbeat_ends_with_it() -> None:
    import threading

    seen: list[threading.Thread] = []

    def note_heartbeats(args: object) -> int:
        seen.extend(t for t in threading.enumerate() if t.name == "conveyor-heartbeat")
        return 1

    before = set(threading.enumerate())
    # The default lease: its heartbeat looks for work left every few seconds.
    rt = conveyor.build({"provider": "memory"}, handlers={"note": note_heartbeats}, env={})
    try:
        rt.start()
        assert rt.result(rt.enqueue("note", {}).id, timeout=10) == 1
        assert rt.stop(grace_s=5)
    finally:
        rt.close()
    ours = [t for t in seen if t not in before]
    assert ours, "the job ran while its worker's heartbeat kept its lease"
    for thread in ours:
        # Well under the heartbeat's own look (a quarter of the renewal interval).
        thread.join(timeout=1.0)
        assert not thread.is_alive()


@pytest.mark.parametrize("where", ["memory", "sqlite"])
@pytest.mark.parametrize("partition", ["a\ud800", "a\x00b", "tab\there"])
def test_a_partition_with_control_characters_or_a_lone_surrogate_is_refused(
    where: str, partition: str, tmp_path: Path
) -> None:
    rt = conveyor.build(_config(where, tmp_path), env={})
    try:
        with pytest.raises(conveyor.ValidationError, match="partition: must not hold control"):
            rt.enqueue("t", {}, partition=partition)
        assert rt.enqueue("t", {}, partition="tenant 7 / eu").id is not None
    finally:
        rt.close()


# ---- the wrong kind of argument: a ValidationError naming it, not a bare TypeError --


def _memory() -> conveyor.Runtime:
    return conveyor.build({"provider": "memory"}, env={})


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda rt: rt.enqueue(5, {}), "job_type: must be a string or a workflow, got int"),
        (lambda rt: rt.enqueue(None, {}), "job_type: must be a string or a workflow"),
        (lambda rt: rt.enqueue_many("t", {"a": 1}), "args_list: must be a list of args"),
        (lambda rt: rt.enqueue_many("t", "abc"), "args_list: must be a list of args"),
        (lambda rt: rt.workflow("zz"), "workflow_id: 'zz' is not"),
        (lambda rt: rt.drain(timeout_s=None), "timeout_s: must be a number of seconds"),
        (lambda rt: rt.drain(timeout_s=float("nan")), "timeout_s: must be >= 0 seconds"),
    ],
)
def test_a_call_given_the_wrong_kind_of_argument_names_it(call: Any, field: str) -> None:
    rt = _memory()
    try:
        with pytest.raises(conveyor.ValidationError) as refused:
            call(rt)
    finally:
        rt.close()
    assert field in str(refused.value)


def test_enqueue_many_takes_any_iterable_of_args() -> None:
    rt = _memory()
    try:
        jobs = rt.enqueue_many("t", ({"i": i} for i in range(3)))
        more = asyncio.run(rt.aenqueue_many("t", ({"i": i} for i in range(2))))
    finally:
        rt.close()
    assert [j.args["i"] for j in jobs] == [0, 1, 2] and len(more) == 2


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: conveyor.build([1, 2], env={}), "config: must be a mapping"),
        (
            lambda: conveyor.build({"provider": "memory"}, handlers=[print], env={}),
            "handlers: must be a mapping of job type to handler",
        ),
    ],
)
def test_build_given_the_wrong_kind_of_config_or_handlers_names_it(make: Any, field: str) -> None:
    with pytest.raises(conveyor.ValidationError, match=field):
        make()
