"""The job context: a handler with a second parameter learns which attempt it runs."""

from __future__ import annotations

import functools
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
import conveyor
import pytest
from backends import Backend
from conveyor.core import Policies, RetryPolicy
from conveyor.shell.context import JobContext
from conveyor.shell.registry import Registry, takes_context
from conveyor.shell.worker.loop import Worker
from helpers import make_job

AT_ONCE = Policies(retry=RetryPolicy(initial_delay_ms=0, jitter=False))


def _worker(backend: Backend, registry: Registry, queue_name: str = "default") -> Worker:
    return Worker(
        backend.queue,
        backend.store,
        registry,
        queue_name=queue_name,
        policies=AT_ONCE,
        jitter=lambda: 0.5,
    )


def _recording() -> tuple[list[JobContext], Any]:
    seen: list[JobContext] = []

    def handler(args: Any, ctx: JobContext) -> None:
        seen.append(ctx)

    return seen, handler


# ---- what the context holds, on every backend ------------------------------


def test_a_two_parameter_handler_receives_the_job_context(backend: Backend) -> None:
    seen, handler = _recording()
    job = make_job("work", now=datetime.now(UTC), queue="mail", tenant_id="acme")
    backend.queue.enqueue(job)
    assert _worker(backend, Registry({"work": handler}), "mail").drain() == 1
    [ctx] = seen
    assert (ctx.job_id, ctx.job_type, ctx.queue, ctx.tenant_id) == (job.id, "work", "mail", "acme")
    assert ctx.attempt == 1
    assert ctx.deadline is None, "no timeout, no deadline"
    assert not ctx.cancel_requested() and not ctx.timed_out() and not ctx.should_stop()


def test_the_context_counts_attempts_across_retries(backend: Backend) -> None:
    seen: list[int] = []

    def flaky(args: Any, ctx: JobContext) -> str:
        seen.append(ctx.attempt)
        if ctx.attempt < 3:
            raise ConnectionError("not yet")
        return "done"

    backend.queue.enqueue(make_job("work", now=datetime.now(UTC), max_retries=5))
    assert _worker(backend, Registry({"work": flaky})).drain() == 3
    assert seen == [1, 2, 3]


def test_the_deadline_is_the_attempts_start_plus_its_timeout(backend: Backend) -> None:
    seen, handler = _recording()
    job = make_job("work", now=datetime.now(UTC), timeout=30)
    backend.queue.enqueue(job)
    assert _worker(backend, Registry({"work": handler})).drain() == 1
    [ctx] = seen
    started = backend.store.get(job.id).started_at
    assert ctx.deadline == started + timedelta(seconds=30)


# ---- one-parameter handlers, and telling them apart -------------------------


def test_a_one_parameter_handler_is_called_with_the_args_alone(backend: Backend) -> None:
    calls: list[tuple[Any, ...]] = []

    def old_style(args: Any) -> None:
        calls.append((args,))

    registry = Registry({"old": old_style})
    backend.queue.enqueue(make_job("old", now=datetime.now(UTC), args={"n": 1}))
    assert _worker(backend, registry).drain() == 1
    assert calls == [({"n": 1},)]


def _two(args: Any, ctx: Any) -> None: ...


def _one(args: Any) -> None: ...


def _defaulted(args: Any, ctx: Any = None) -> None: ...


def _varargs(*given: Any) -> None: ...


def _keyword_only(args: Any, *, ctx: Any = None) -> None: ...


class _Callable:
    def __call__(self, args: Any, ctx: Any) -> None: ...


@pytest.mark.parametrize(
    "handler",
    [_two, _defaulted, _varargs, _Callable(), lambda args, ctx: None],
    ids=["two", "defaulted", "varargs", "callable-object", "lambda"],
)
def test_a_handler_with_a_second_positional_parameter_takes_the_context(handler: Any) -> None:
    assert takes_context(handler)


@pytest.mark.parametrize(
    "handler",
    [_one, _keyword_only, functools.partial(_two, {}), lambda args: None, len],
    ids=["one", "keyword-only", "partial-bound", "lambda", "builtin"],
)
def test_a_handler_without_one_is_called_with_the_args_alone(handler: Any) -> None:
    assert not takes_context(handler)


def test_arity_is_read_once_at_registration() -> None:
    registry = Registry({"two": _two, "one": _one})
    assert registry.registration("two").takes_context
    assert not registry.registration("one").takes_context


def test_a_tenant_scoped_handlers_second_parameter_stays_its_tenant_context() -> None:
    registry = Registry()
    registry.register("t", _two, tenant_scoped=True)
    assert not registry.registration("t").takes_context


# ---- the context as a value ---------------------------------------------------


def test_the_context_is_frozen() -> None:
    ctx = JobContext(job_id=make_job("w").id, job_type="w", attempt=1, queue="default")
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        ctx.attempt = 2  # type: ignore[misc]


def test_the_cancel_check_is_whatever_the_worker_supplies() -> None:
    asked: list[bool] = []

    def check() -> bool:
        asked.append(True)
        return True

    ctx = JobContext(
        job_id=make_job("w").id, job_type="w", attempt=1, queue="default", cancel_check=check
    )
    assert ctx.cancel_requested() and ctx.should_stop()
    assert len(asked) == 2


def test_the_context_is_exported_from_the_package() -> None:
    assert conveyor.JobContext is JobContext


def test_a_handler_given_to_build_receives_the_context() -> None:
    seen, handler = _recording()
    runtime = conveyor.build({"provider": "memory"}, handlers={"work": handler})
    job = runtime.enqueue("work", {}, timeout=5)
    runtime.drain()
    [ctx] = seen
    assert ctx.job_id == job.id and ctx.deadline is not None
