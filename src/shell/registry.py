"""Handlers, per process: job type -> the function that runs it.

A handler takes the job's args (a read-only mapping) and returns a JSON value
(success), a `returns` `Success`/`Failure`, or raises. A handler with a second
positional parameter also receives the attempt's `JobContext` (told apart once,
when it is registered). An exception is a
retryable failure typed by its class; raise `Permanent` (or return
`Failure(Permanent(...))`) for a failure another attempt cannot fix.
"""

from __future__ import annotations

import inspect
import pickle
import threading
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from datetime import timedelta
from traceback import format_exception
from typing import Any

import attrs
from returns.result import Failure, Success

from ..core import (
    MAX_MESSAGE_CHARS,
    ErrorInfo,
    Failed,
    Outcome,
    Succeeded,
    ValidationError,
    cap_message,
    check_name,
    parse_timeout,
    timeout_for,
)
from ..core.errors import FieldError
from ..core.validation import Limits
from .main_guard import main_never_imported, only_under_main_guard
from .ports import Handler


class Permanent(Exception):
    """Raise from a handler for a failure that must not be retried (dead-letter now)."""

    def __init__(self, message: str, *, type: str | None = None) -> None:
        super().__init__(message)
        self.type = type


@attrs.frozen(slots=True)
class Registration:
    """A handler and how to run it."""

    handler: Callable[..., Any]
    tenant_scoped: bool = False
    #: Whether the handler takes the job context as its second parameter.
    takes_context: bool = False
    #: How long one attempt of this type may run, when the job sets no timeout.
    timeout_ms: int | None = None
    #: "thread" (the worker's own) or "process" (a child killed at the deadline).
    execution: str = "thread"

    def arguments(self, args: Any, context: Any) -> tuple[Any, ...]:
        """What to call the handler with: the args, and the context if it takes one."""
        return (args, context) if self.takes_context else (args,)


def takes_context(handler: Callable[..., Any]) -> bool:
    """Whether `handler` accepts a second positional argument (`def h(args, ctx)`,
    `*args`, or a second parameter with a default). A callable whose signature
    cannot be read is called with the args alone, as before contexts existed."""
    try:
        params = inspect.signature(handler).parameters.values()
    except (TypeError, ValueError):
        return False
    positional = 0
    for param in params:
        if param.kind is inspect.Parameter.VAR_POSITIONAL:
            return True
        if param.kind in (param.POSITIONAL_ONLY, param.POSITIONAL_OR_KEYWORD):
            positional += 1
    return positional >= 2


def _callable_with(handler: Callable[..., Any], positional: int) -> bool:
    """Whether `handler` can be called with `positional` arguments alone (True when
    its signature cannot be read: it is then tried as before)."""
    try:
        signature = inspect.signature(handler)
    except (TypeError, ValueError):
        return True
    try:
        signature.bind(*[None] * positional)
    except TypeError:
        return False
    return True


#: Where a job type's attempts run: the worker's thread (the default) or a child process
#: (see `conveyor.shell.worker.process_execution`).
EXECUTIONS = ("thread", "process")


def check_process_handler(handler: Callable[..., Any]) -> str | None:
    """Why `handler` cannot run in a child process, or None when it can: the child is
    sent the handler by name, so it must pickle."""
    try:
        pickle.dumps(handler)
    except Exception:
        return "must be a module-level function to run in a process (it is sent by name)"
    if only_under_main_guard(handler):
        return 'is defined under `if __name__ == "__main__":`, which a process never runs'
    if main_never_imported(handler):
        return "is defined in a `__main__.py`, which a process never imports: move it to a module"
    return None


def _check_process_execution(
    job_type: str, handler: Callable[..., Any], execution: str, tenant_scoped: bool
) -> None:
    if execution not in EXECUTIONS:
        raise ValidationError.of("execution", f"must be one of {', '.join(EXECUTIONS)}")
    if tenant_scoped or inspect.iscoroutinefunction(handler):
        # A tenant's transaction and an event loop both live in the worker's process.
        raise ValidationError.of(
            "execution", f"for {job_type!r}: a tenant-scoped or async handler runs in a thread"
        )
    problem = check_process_handler(handler)
    if problem is not None:
        raise ValidationError.of("handler", f"for {job_type!r} {problem}")


class Registry:
    """The `HandlerRegistry` of this process. Register before starting workers."""

    def __init__(self, handlers: Mapping[str, Handler] | None = None) -> None:
        self._lock = threading.Lock()
        self._entries: dict[str, Registration] = {}
        #: Per-type timeouts from the config, in ms: they override the registered ones.
        self._configured_timeouts: dict[str, int] = {}
        #: The enqueue defaults each task declares (`conveyor.shell.tasks`), by job type.
        self._task_defaults: dict[str, Mapping[str, Any]] = {}
        for job_type, handler in (handlers or {}).items():
            self.register(job_type, handler)

    def register(
        self,
        job_type: str,
        handler: Callable[..., Any],
        *,
        tenant_scoped: bool = False,
        replace: bool = False,
        timeout: timedelta | float | None = None,
        execution: str = "thread",
    ) -> None:
        """Run `handler` for jobs of `job_type`. A second registration of one type is an
        error unless `replace=True` (two modules claiming one type is usually a bug).
        `timeout` (seconds or a timedelta) bounds each attempt of a job that sets
        none itself; see `conveyor.shell.worker.timeouts` for what happens to an overrun.
        `execution="process"` runs each attempt in a child process that is killed at
        its deadline (see `conveyor.shell.worker.process_execution`)."""
        problem = check_name("job_type", job_type, Limits())
        if problem is not None:
            raise ValidationError((problem,))
        if not callable(handler):
            raise ValidationError.of("handler", f"for {job_type!r} is not callable")
        if tenant_scoped and inspect.iscoroutinefunction(handler):
            # Its tenant's scope is a transaction on this thread, over before a loop ran it.
            raise ValidationError.of(
                "handler", f"for {job_type!r} is tenant-scoped, so it cannot be async def"
            )
        timeout_ms = None if timeout is None else parse_timeout("timeout", timeout)
        if isinstance(timeout_ms, FieldError):
            raise ValidationError((timeout_ms,))
        if execution != "thread":
            _check_process_execution(job_type, handler, execution, tenant_scoped)
        # A tenant-scoped handler's second parameter is its tenant context already.
        context = not tenant_scoped and takes_context(handler)
        if not tenant_scoped and not _callable_with(handler, 2 if context else 1):
            # Refused now, not at each attempt (a TypeError, every retry spent on it).
            raise ValidationError.of(
                "handler",
                f"for {job_type!r} must take the job's args, and may take the job context "
                "as a second parameter: `def handler(args)` or `def handler(args, ctx)`",
            )
        with self._lock:
            if job_type in self._entries and not replace:
                raise ValueError(
                    f"a handler for {job_type!r} is already registered; pass replace=True"
                )
            self._entries[job_type] = Registration(
                handler,
                tenant_scoped,
                takes_context=context,
                timeout_ms=timeout_ms,
                execution=execution,
            )

    def handler(
        self,
        job_type: str,
        *,
        tenant_scoped: bool = False,
        timeout: timedelta | float | None = None,
        execution: str = "thread",
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Decorator form of `register`."""

        def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
            self.register(
                job_type, fn, tenant_scoped=tenant_scoped, timeout=timeout, execution=execution
            )
            return fn

        return wrap

    def merge(self, other: Registry) -> None:
        """Take every registration of `other` with its options (a config's handler
        module may offer a whole registry); a job type already registered here is
        refused, all of `other` with it."""
        with other._lock:
            entries, defaults = dict(other._entries), dict(other._task_defaults)
        with self._lock:
            taken = sorted(set(entries) & set(self._entries))
            if taken:
                raise ValueError(f"a handler for {taken[0]!r} is already registered")
            self._entries.update(entries)
            self._task_defaults.update(defaults)

    def note_task_defaults(self, job_type: str, defaults: Mapping[str, Any]) -> None:
        """Keep the enqueue defaults the task of `job_type` declares (its queue,
        priority, retries...), for enqueues by name that want them: the CLI's."""
        with self._lock:
            self._task_defaults[job_type] = dict(defaults)

    def task_defaults(self, job_type: str) -> dict[str, Any]:
        """The enqueue defaults the task of `job_type` declares; empty for a plain
        handler or an unknown type."""
        with self._lock:
            return dict(self._task_defaults.get(job_type, {}))

    def lookup(self, job_type: str) -> Handler | None:
        entry = self.registration(job_type)
        return entry.handler if entry else None

    def registration(self, job_type: str) -> Registration | None:
        with self._lock:
            return self._entries.get(job_type)

    def configure_timeouts(self, timeouts_ms: Mapping[str, int]) -> None:
        """Per-type timeouts from the config (job type -> ms). They take precedence
        over those given at registration, and apply to types registered later too."""
        with self._lock:
            self._configured_timeouts.update(timeouts_ms)

    def timeout_ms(self, job_type: str, job_timeout_ms: int | None = None) -> int | None:
        """The timeout of an attempt of a `job_type` job whose own is `job_timeout_ms`."""
        with self._lock:
            entry = self._entries.get(job_type)
            configured = self._configured_timeouts.get(job_type)
        registered = entry.timeout_ms if entry is not None else None
        return timeout_for(job_timeout_ms, configured_ms=configured, registered_ms=registered)

    def job_types(self) -> frozenset[str]:
        with self._lock:
            return frozenset(self._entries)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)


#: The longest error message kept (the core cuts a longer one behind a marker).
MAX_MESSAGE = MAX_MESSAGE_CHARS


def describe(exc: BaseException) -> str:
    """`str(exc)`, or its repr when that is empty (`assert x > 0` has no message).
    Never raises: an exception whose `__str__` itself raises is still a failure to
    record, not a crash of the worker that caught it."""
    for text in (str, repr):
        try:
            found = text(exc)
        except Exception:
            continue
        if found:
            return found
    return f"<{type(exc).__name__}: its str() and repr() raised>"


def error_from_exception(exc: BaseException) -> ErrorInfo:
    """A handler's exception as an error record: typed by its class, retryable unless
    it is `Permanent`, with its formatted traceback (the core keeps its end)."""
    message = cap_message(describe(exc))
    trace = "".join(format_exception(exc))
    if isinstance(exc, Permanent):
        # `type` is the handler's to give: text is what every store keeps.
        return ErrorInfo(str(exc.type or type(exc).__name__), message, False, trace)
    return ErrorInfo(type(exc).__name__, message, True, trace)


@attrs.define(slots=True)
class Caught:
    """The exception behind the failed outcome made inside a `catching()` block, if any."""

    exception: BaseException | None = None


# The core's `Failed` holds a description only; the exception object (for the log's
# traceback and for error trackers) travels beside it, per thread, to the worker.
_catching: ContextVar[Caught | None] = ContextVar("conveyor_catching", default=None)


class _Catching:
    # A plain context manager, not `@contextmanager`: it is entered once per job, and a
    # generator-based one costs several calls more each time.
    __slots__ = ("_token",)

    def __enter__(self) -> Caught:
        found = Caught()
        self._token = _catching.set(found)
        return found

    def __exit__(self, *exc: object) -> None:
        _catching.reset(self._token)


def catching() -> _Catching:
    """Collect the exception behind a failure produced inside the block: a handler's
    raise, a returned `Failure(exc)`, or whatever a caller notes with `caught`."""
    return _Catching()


def caught(exc: BaseException) -> None:
    """Note `exc` as the cause of the failure being produced, for an enclosing
    `catching()` block (a no-op outside one)."""
    found = _catching.get()
    if found is not None:
        found.exception = exc


def outcome_of(returned: Any) -> Outcome:
    """Interpret what a handler returned."""
    if returned is None:  # the common case, without the two class checks below
        return Succeeded(None)
    match returned:
        case Success():
            return Succeeded(returned.unwrap())
        case Failure():
            reason = returned.failure()
            if isinstance(reason, ErrorInfo):
                return Failed(reason)
            if isinstance(reason, BaseException):
                caught(reason)
                return Failed(error_from_exception(reason))
            return Failed(ErrorInfo("failure", cap_message(_text(reason)), retryable=True))
        case _:
            return Succeeded(returned)


def run_handler_catching(
    handler: Callable[..., Any], *args: Any
) -> tuple[Outcome, BaseException | None]:
    """Call a handler: its outcome, and the exception behind a failure (None for a
    success or a failure returned without one). Never raises for a handler's own
    exception."""
    with catching() as found:
        outcome = run_handler(handler, *args)
    return outcome, found.exception


def run_handler(handler: Callable[..., Any], *args: Any) -> Outcome:
    """Call a handler and turn whatever happens into an `Outcome`; never raises
    for a handler's own exception. The exception behind a failure goes to an
    enclosing `catching()` block."""
    try:
        returned = handler(*args)
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt | SystemExit) and _in_main_thread():
            # Ctrl-C (or an exit) in the main thread, as during an inline job or a
            # drain(): the process is being stopped, not this job failing.
            raise
        # Anything else a handler raises, BaseException subclasses included (in a
        # worker's thread they would end the thread and strand the claim), is a
        # failed attempt for the retry policy to judge, as on the event loop.
        caught(exc)
        return Failed(error_from_exception(exc))
    return outcome_of(returned)


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _text(value: object) -> str:
    try:
        return str(value)
    except Exception:
        return f"<{type(value).__name__}: its str() raised>"
