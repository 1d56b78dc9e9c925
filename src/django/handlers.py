"""The project's tasks as Conveyor handlers, for `manage.py conveyor worker`.

A worker runs only the tasks the Django project defines: the `Task` objects of
each installed app's `tasks` module and of the backend's `MODULES` that use a
Conveyor backend (any alias: `task.using(backend=...)` moves a call, not the
function), each registered under its module path (the job type the backend enqueues
it as). A job naming anything else finds no handler, however importable the name.

Around each task the worker does what Django's request cycle does: it closes stale
database connections before and after (`close_old_connections`). The task receives
a `TaskContext` when it `takes_context`; an `async def` task runs on the worker's
event loop. `task_started` and `task_finished` are sent after Conveyor has written
the start and the outcome, from the runtime's hooks; a failure's `task_finished` is
sent while its exception is handled, as Django's backends send it, so that the
framework's log of it (`logger.exception`) carries the task's traceback.

Every result this process builds of a running attempt names the worker running it
as the start recorded it (`Job.worker`, the id the attempt keeps once it ends), not
the runtime's process id.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from returns.result import Failure

from ..core import ErrorInfo, Job, JobStatus
from ..shell.context import JobContext
from ..shell.registry import caught, error_from_exception
from ..shell.tasks import Tasks
from .compat import TaskContext, task_backends, task_finished, task_started
from .discovery import discover
from .results import build_result, task_for

#: Names the backend alias the worker runs (set by `manage.py conveyor --backend`).
BACKEND_ENV = "CONVEYOR_DJANGO_BACKEND"


def _setup_django() -> None:
    """A worker copy started by the supervisor (`--processes`) is a fresh interpreter:
    set Django up from `DJANGO_SETTINGS_MODULE`, which `manage.py` left in the
    environment."""
    from django.apps import apps

    if not apps.ready:
        import django

        django.setup()


def backend_alias() -> str:
    """The `TASKS` alias this worker runs: `CONVEYOR_DJANGO_BACKEND`, else the first
    alias whose backend is Conveyor's."""
    return os.environ.get(BACKEND_ENV) or first_alias()


def first_alias() -> str:
    """The first `TASKS` alias whose backend is Conveyor's."""
    from .backend import first_conveyor_alias

    return first_conveyor_alias()


class DjangoTasks(Tasks):
    """The handler mapping of the project's tasks (job type -> the function a worker
    calls). `build` binds it to the worker's runtime, which hooks the signals up."""

    def __init__(self, alias: str, tasks: Mapping[str, Any]) -> None:
        super().__init__()
        self.alias = alias
        self.project = dict(tasks)
        self._starts: dict[str, Job] = {}
        self._starts_lock = threading.Lock()
        #: (job id, exception) of this thread's last failed attempt.
        self._last_failure = threading.local()
        self._handlers = {path: self._handler(path) for path in self.project}

    def __getitem__(self, job_type: str) -> Callable[..., Any]:
        return self._handlers[job_type]

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._handlers))

    def __len__(self) -> int:
        return len(self._handlers)

    def bind(self, runtime: Any) -> None:
        super().bind(runtime)
        if runtime is None:
            return
        hooks = runtime.hooks
        hooks.on_started(self._started)
        hooks.on_failed(self._failed)
        hooks.on_succeeded(lambda job: self._finished(job, JobStatus.COMPLETED, None))
        hooks.on_dead_lettered(lambda job, error: self._finished(job, JobStatus.FAILED, error))
        hooks.on_cancelled(lambda job: self._finished(job, JobStatus.CANCELLED, None))

    # ---- the signals ------------------------------------------------------------

    def resolve(self, job_type: str) -> Any:
        return self.project[job_type]

    def _result(self, job: Job, state: JobStatus) -> Any:
        task = task_for(job, self.resolve)
        return build_result(job, state, task, backend=task.backend)

    def _sender(self) -> type:
        return type(task_backends[self.alias])

    def _started(self, job: Job) -> None:
        if job.job_type not in self.project:
            return
        with self._starts_lock:
            self._starts[str(job.id)] = job
        task_started.send(sender=self._sender(), task_result=self._result(job, JobStatus.RUNNING))

    def _forget(self, job: Job) -> None:
        """The attempt is over: its start is not kept for a context any more."""
        with self._starts_lock:
            self._starts.pop(str(job.id), None)

    def _failed(self, job: Job, exc: BaseException | None) -> None:
        self._forget(job)
        # The worker tells a dead letter right after the failed attempt, in this thread.
        self._last_failure.value = (str(job.id), exc)

    def _finished(self, job: Job, state: JobStatus, error: ErrorInfo | None) -> None:
        self._forget(job)
        last = getattr(self._last_failure, "value", None)
        self._last_failure.value = None
        if job.job_type not in self.project:
            return
        result = self._result(job, state)
        if state is JobStatus.COMPLETED:
            task_finished.send(sender=self._sender(), task_result=result)
            return
        exc = last[1] if last is not None and last[0] == str(job.id) else None
        if exc is None:
            exc = TaskFailed("cancelled" if error is None else f"{error.type}: {error.message}")
        # The tasks framework logs a failure with `logger.exception`, which reads the
        # exception being handled: Django's backends send `task_finished` inside their
        # `except` block, so the task's exception and traceback reach the log.
        kept = exc.__traceback__
        try:
            raise exc
        except BaseException:
            task_finished.send(sender=self._sender(), task_result=result)
        finally:
            exc.__traceback__ = kept

    # ---- running a task ---------------------------------------------------------

    def _start_of(self, ctx: JobContext) -> Job | None:
        with self._starts_lock:
            return self._starts.get(str(ctx.job_id))

    def _context(self, ctx: JobContext, path: str) -> Any:
        """The `TaskContext` of the running attempt: its result as the start wrote it
        (so `context.attempt` counts this attempt), the worker ids it has so far."""
        job = self._start_of(ctx)
        if job is None:  # started without the hook (run by hand): what the context says
            return TaskContext(task_result=_bare_result(self.project[path], ctx, self.alias))
        return TaskContext(task_result=self._result(job, JobStatus.RUNNING))

    def _handler(self, path: str) -> Callable[..., Any]:
        task = self.project[path]

        def call_args(args: Mapping[str, Any], ctx: JobContext) -> tuple[list[Any], dict[str, Any]]:
            positional = list(args.get("args") or ())
            keywords = dict(args.get("kwargs") or {})
            if task.takes_context:
                positional.insert(0, self._context(ctx, path))
            return positional, keywords

        if task_is_async(task):

            async def run_async(args: Mapping[str, Any], ctx: JobContext) -> Any:
                from asgiref.sync import sync_to_async

                positional, keywords = call_args(_thawed(args), ctx)
                close = sync_to_async(_close_old_connections, thread_sensitive=True)
                await close()
                try:
                    return await task.func(*positional, **keywords)
                except STOPPING:
                    raise
                except BaseException as exc:
                    return _failure(exc)
                finally:
                    await close()

            return run_async

        def run(args: Mapping[str, Any], ctx: JobContext) -> Any:
            positional, keywords = call_args(_thawed(args), ctx)
            _close_old_connections()
            try:
                return task.func(*positional, **keywords)
            except STOPPING:
                raise
            except BaseException as exc:
                return _failure(exc)
            finally:
                _close_old_connections()

        return run


class TaskFailed(Exception):
    """A task's failure whose exception this process does not hold (its lease ran out
    in another worker, it was cancelled): what Conveyor recorded, for the log."""


def task_is_async(task: Any) -> bool:
    import inspect

    return inspect.iscoroutinefunction(task.func)


def _thawed(args: Mapping[str, Any]) -> dict[str, Any]:
    from ..core import thaw

    found = thaw(args)
    return found if isinstance(found, dict) else {}


def _close_old_connections() -> None:
    from django.db import close_old_connections

    close_old_connections()


#: What stops the task rather than fails it (an interrupt, an exit, a cancelled
#: coroutine): Conveyor's runner decides what they mean, as for any handler.
STOPPING = (KeyboardInterrupt, SystemExit, GeneratorExit, asyncio.CancelledError)


def _failure(exc: BaseException) -> Failure[ErrorInfo]:
    """The attempt's failure, typed by the exception class's full path (what Django's
    `TaskError.exception_class_path` names), with its traceback; a BaseException
    subclass of the task's own is one too, as Django's backends count it."""
    caught(exc)
    info = error_from_exception(exc)
    kind = type(exc)
    path = f"{kind.__module__}.{kind.__qualname__}"
    return Failure(ErrorInfo(path, info.message, info.retryable, info.traceback))


def _bare_result(task: Any, ctx: JobContext, alias: str) -> Any:
    """A running result from the context alone, which names no worker: one unknown
    ("") id per attempt."""
    from .compat import TaskResult, TaskResultStatus

    return TaskResult(
        task=task,
        id=str(ctx.job_id),
        status=TaskResultStatus.RUNNING,
        enqueued_at=None,
        started_at=None,
        finished_at=None,
        last_attempted_at=None,
        args=[],
        kwargs={},
        backend=alias,
        errors=[],
        worker_ids=[""] * max(ctx.attempt, 1),
    )


def project_tasks() -> DjangoTasks:
    """The handler mapping a Django worker's config names (`handlers`): the project's
    tasks on the backend this worker runs."""
    _setup_django()
    alias = backend_alias()
    backend = task_backends[alias]
    from .backend import ConveyorBackend

    modules = backend.settings.modules
    return DjangoTasks(alias, discover(ConveyorBackend, modules, where=f"TASKS[{alias!r}]"))
