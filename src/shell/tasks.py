"""Tasks: functions registered as handlers that know how to enqueue themselves.

    tasks = conveyor.Tasks()

    @tasks.task(queue="emails", priority="high", max_retries=5)
    def send_receipt(args):
        ...

    send_receipt.enqueue({"to": "a@example.com"})         # the task's defaults
    send_receipt.enqueue({"to": "b@example.com"}, priority="low")  # overridden here
    send_receipt({"to": "c@example.com"})                 # runs now, in this process

The job type comes from the function (its module and qualified name) or from
`name=`, so a call site cannot misspell it. A `Tasks` collection is itself a
mapping of job type to function, so a config lists it like any other handler
mapping (`handlers = ["myapp.jobs:tasks"]`) and `build(handlers=tasks)` takes it.

Which runtime a task enqueues on, in order:

1. the `runtime=` given to `enqueue` / `enqueue_many`;
2. the runtime its collection is bound to: `build` binds every `Tasks` collection
   it registers handlers from (its `handlers=` argument, the config's `handlers`
   and the `conveyor.handlers` entry points), the last build winning;
   `tasks.bind(runtime)` binds one by hand;
3. none: `enqueue` raises `TaskNotBound`, saying so.

The worker runs the function itself, not a wrapper: its signature (a second
parameter for the job context) and whether it is `async def` are the function's own.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, Protocol, TypeVar, overload

from ..core import Priority, ValidationError, check_name
from .runtime.enqueue_options import ENQUEUE_OPTIONS, EnqueueOptions

if TYPE_CHECKING:
    from ..core import Job
    from .registry import Registry

P = ParamSpec("P")
R = TypeVar("R")


class TaskNotBound(RuntimeError):
    """A task was enqueued with no runtime to enqueue on."""


def default_job_type(fn: Callable[..., Any]) -> str:
    """The job type a task gets without `name=`: `module.qualified_name`."""
    return f"{fn.__module__}.{fn.__qualname__}"


def _unnamed_hint(fn: Callable[..., Any]) -> str:
    """Why a task's default name is no job type, for the function it comes from."""
    if fn.__module__ == "__main__" or "<locals>" in fn.__qualname__:
        # The name could be made valid, but no worker could import the function by it.
        return (
            " (from the function's name: a function in a script run as __main__ or "
            "inside another function has no name another process can import; pass name=...)"
        )
    return " (from the function's name; pass name=...)"


class TaskRuntime(Protocol):
    """What a task enqueues on: a `conveyor.Runtime` (its `enqueue` and `enqueue_many`)."""

    @property
    def enqueue(self) -> Callable[..., Job]: ...

    @property
    def enqueue_many(self) -> Callable[..., list[Job]]: ...

    @property
    def enqueue_in_tx(self) -> Callable[..., Job]: ...


def _check_defaults(job_type: str, defaults: Mapping[str, Any]) -> None:
    """Refuse unknown options and invalid values when the task is declared, not at
    its first enqueue: the defaults make one `EnqueueOptions`, and a probe job."""
    unknown = set(defaults) - ENQUEUE_OPTIONS
    if "after" in unknown:  # each job waits for jobs of its own
        raise TypeError(
            f"task {job_type!r}: after= is given where a job is enqueued "
            "(task.enqueue(args, after=[...])), not where the task is declared"
        )
    if unknown:
        raise TypeError(f"task {job_type!r}: unexpected options: {sorted(unknown)}")
    EnqueueOptions.of(defaults).job(job_type, None, datetime.now(UTC))


class Task(Generic[P, R]):
    """A function registered as the handler of `job_type`, with its enqueue defaults.

    Calling the task calls the function, in this process. `enqueue` and
    `enqueue_many` put jobs of `job_type` on a runtime (see the module docs for
    which one) with the task's defaults, overridden by the options given there.
    """

    def __init__(
        self,
        fn: Callable[P, R],
        job_type: str,
        defaults: Mapping[str, Any],
        tasks: Tasks,
    ) -> None:
        self.fn = fn
        self.job_type = job_type
        #: The enqueue options this task's jobs get unless a call says otherwise.
        self.defaults: Mapping[str, Any] = MappingProxyType(dict(defaults))
        self.tasks = tasks
        # Name, docstring and `__wrapped__` (so `inspect.signature` sees the function's).
        functools.update_wrapper(self, fn)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<Task {self.job_type!r}>"

    def options(self, **overrides: Any) -> dict[str, Any]:
        """The enqueue options of one call: the task's defaults, then `overrides`. A
        call's `run_at` replaces a default `delay` and the other way round (they are
        one setting given two ways), and a call's `unique_key=None` drops the task's
        `unique_for` and `unique_states` with its key."""
        unknown = sorted(set(overrides) - ENQUEUE_OPTIONS - {"after"})
        if unknown:
            # Most often the job's args given as keywords: say where they go.
            raise TypeError(
                f"task {self.job_type!r}: unexpected options {unknown}; the job's args "
                f"go in one mapping: {self.job_type}.enqueue({{{unknown[0]!r}: ...}})"
            )
        merged = {**self.defaults, **overrides}
        for given, other in (("run_at", "delay"), ("delay", "run_at")):
            if given in overrides and other not in overrides:
                merged.pop(other, None)
        if "unique_key" in overrides and overrides["unique_key"] is None:
            for held in ("unique_for", "unique_states"):
                if held not in overrides:
                    merged.pop(held, None)
        return merged

    def enqueue(
        self,
        args: Mapping[str, Any] | None = None,
        *,
        runtime: TaskRuntime | None = None,
        **options: Any,
    ) -> Job:
        """Enqueue one job of this task with `args`; `options` are `Runtime.enqueue`'s
        keyword options and override the task's defaults. Raises `ValidationError`
        for bad input and `TaskNotBound` when there is no runtime."""
        return self.tasks.runtime_for(self, runtime).enqueue(
            self.job_type, args, **self.options(**options)
        )

    def enqueue_in_tx(
        self,
        conn: Any,
        args: Mapping[str, Any] | None = None,
        *,
        runtime: TaskRuntime | None = None,
        **options: Any,
    ) -> Job:
        """Enqueue one job of this task inside the caller's open transaction on `conn`
        (see `Runtime.enqueue_in_tx`), with the task's defaults overridden by
        `options`: it commits or rolls back with the caller's own writes."""
        return self.tasks.runtime_for(self, runtime).enqueue_in_tx(
            conn, self.job_type, args, **self.options(**options)
        )

    def enqueue_many(
        self,
        args_list: Sequence[Mapping[str, Any] | None],
        *,
        runtime: TaskRuntime | None = None,
        **options: Any,
    ) -> list[Job]:
        """Enqueue one job per args mapping in one round trip (see
        `Runtime.enqueue_many`), with the task's defaults overridden by `options`."""
        return self.tasks.runtime_for(self, runtime).enqueue_many(
            self.job_type, args_list, **self.options(**options)
        )


class Tasks(Mapping[str, Callable[..., Any]]):
    """A collection of tasks, and the mapping of job type to function that registers
    them (`build(handlers=tasks)`, or `handlers = ["module:tasks"]` in a config)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tasks: dict[str, Task[Any, Any]] = {}
        self._runtime: TaskRuntime | None = None

    @overload
    def task(self, fn: Callable[P, R], /) -> Task[P, R]: ...

    @overload
    def task(
        self,
        fn: None = None,
        /,
        *,
        name: str | None = None,
        queue: str | None = None,
        priority: Priority | str | None = None,
        max_retries: int | None = None,
        **options: Any,
    ) -> Callable[[Callable[P, R]], Task[P, R]]: ...

    def task(
        self,
        fn: Callable[P, R] | None = None,
        /,
        *,
        name: str | None = None,
        queue: str | None = None,
        priority: Priority | str | None = None,
        max_retries: int | None = None,
        **options: Any,
    ) -> Task[P, R] | Callable[[Callable[P, R]], Task[P, R]]:
        """Register a function as a task: `@tasks.task` or `@tasks.task(queue=...)`.

        `name` is the job type (default: the function's module and qualified name;
        give one to keep the type stable when the function moves or is renamed,
        since queued jobs carry it). `queue`, `priority`, `max_retries` and any other
        `Runtime.enqueue` option become the task's defaults; None leaves the
        runtime's default. Bad names and values raise `ValidationError` here.
        """
        defaults = {"queue": queue, "priority": priority, "max_retries": max_retries}
        defaults = {k: v for k, v in defaults.items() if v is not None} | options
        for option in ("execution", "tenant_scoped"):
            if option in options:
                # How a worker runs the handler, not an enqueue default: a registration's.
                raise TypeError(
                    f"{option}= is not a task option: register the function with a "
                    f"conveyor.Registry (registry.register(job_type, fn, {option}=...)) "
                    "and give that registry to build(handlers=registry)"
                )

        def register(fn: Callable[P, R]) -> Task[P, R]:
            job_type = default_job_type(fn) if name is None else name
            problem = check_name("job_type", job_type)
            if problem is not None:
                hint = "" if name is not None else _unnamed_hint(fn)
                raise ValidationError.of("job_type", f"{job_type!r} {problem.reason}{hint}")
            _check_defaults(job_type, defaults)
            made = Task(fn, job_type, defaults, self)
            with self._lock:
                if job_type in self._tasks:
                    raise ValueError(f"a task named {job_type!r} is already in this collection")
                self._tasks[job_type] = made
            return made

        return register if fn is None else register(fn)

    def tasks(self) -> list[Task[Any, Any]]:
        """The tasks of this collection, in the order they were declared."""
        with self._lock:
            return list(self._tasks.values())

    # ---- the handler mapping ------------------------------------------------

    def __getitem__(self, job_type: str) -> Callable[..., Any]:
        with self._lock:
            return self._tasks[job_type].fn

    def __iter__(self) -> Iterator[str]:
        with self._lock:
            return iter(list(self._tasks))

    def __len__(self) -> int:
        with self._lock:
            return len(self._tasks)

    # ---- the runtime ----------------------------------------------------------

    @property
    def runtime(self) -> TaskRuntime | None:
        """The runtime this collection's tasks enqueue on by default, if bound."""
        with self._lock:
            return self._runtime

    def bind(self, runtime: TaskRuntime | None) -> None:
        """Make `runtime` the one these tasks enqueue on by default (None unbinds).
        `build` does this for the collections it registers handlers from."""
        if runtime is not None and not callable(getattr(runtime, "enqueue", None)):
            # Told here, not as an AttributeError at some task's first enqueue.
            what = type(runtime).__name__
            raise ValidationError.of("runtime", f"must be a Runtime (or None), got {what}")
        with self._lock:
            self._runtime = runtime

    def release(self, runtime: TaskRuntime) -> None:
        """Unbind, when bound to `runtime` (which is closing): a task enqueued after
        raises `TaskNotBound` rather than write through a closed runtime."""
        with self._lock:
            if self._runtime is runtime:
                self._runtime = None

    def runtime_for(self, task: Task[Any, Any], runtime: TaskRuntime | None = None) -> TaskRuntime:
        """`runtime` when given, else the bound one; `TaskNotBound` when neither."""
        found = runtime if runtime is not None else self.runtime
        if found is None:
            raise TaskNotBound(
                f"task {task.job_type!r} has no runtime: build one with its collection "
                "(conveyor.build(handlers=tasks), or the config's handlers), call "
                "tasks.bind(runtime), or pass runtime=..."
            )
        return found


def bind_collections(
    runtime: TaskRuntime, sources: Iterable[object], registry: Registry | None = None
) -> None:
    """Bind every `Tasks` collection among `sources` (handler mappings) to `runtime`,
    and note each task's enqueue defaults in `registry` (for the CLI's enqueue by
    name)."""
    for source in sources:
        if isinstance(source, Tasks):
            source.bind(runtime)
            if registry is not None:
                for task in source.tasks():
                    registry.note_task_defaults(task.job_type, task.defaults)
