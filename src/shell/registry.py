"""Handlers, per process: job type -> the function that runs it.

A handler takes the job's args (a read-only mapping) and returns a JSON value
(success), a `returns` `Success`/`Failure`, or raises. An exception is a
retryable failure typed by its class; raise `Permanent` (or return
`Failure(Permanent(...))`) for a failure another attempt cannot fix.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from traceback import format_exception
from typing import Any

import attrs
from returns.result import Failure, Success

from ..core import ErrorInfo, Failed, Outcome, Succeeded, ValidationError, check_name
from ..core.validation import Limits
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


class Registry:
    """The `HandlerRegistry` of this process. Register before starting workers."""

    def __init__(self, handlers: Mapping[str, Handler] | None = None) -> None:
        self._lock = threading.Lock()
        self._entries: dict[str, Registration] = {}
        for job_type, handler in (handlers or {}).items():
            self.register(job_type, handler)

    def register(
        self,
        job_type: str,
        handler: Callable[..., Any],
        *,
        tenant_scoped: bool = False,
        replace: bool = False,
    ) -> None:
        """Run `handler` for jobs of `job_type`. A second registration of one type is an
        error unless `replace=True` (two modules claiming one type is usually a bug)."""
        problem = check_name("job_type", job_type, Limits())
        if problem is not None:
            raise ValidationError((problem,))
        if not callable(handler):
            raise ValidationError.of("handler", f"for {job_type!r} is not callable")
        with self._lock:
            if job_type in self._entries and not replace:
                raise ValueError(
                    f"a handler for {job_type!r} is already registered; pass replace=True"
                )
            self._entries[job_type] = Registration(handler, tenant_scoped)

    def handler(
        self, job_type: str, *, tenant_scoped: bool = False
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Decorator form of `register`."""

        def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
            self.register(job_type, fn, tenant_scoped=tenant_scoped)
            return fn

        return wrap

    def lookup(self, job_type: str) -> Handler | None:
        entry = self.registration(job_type)
        return entry.handler if entry else None

    def registration(self, job_type: str) -> Registration | None:
        with self._lock:
            return self._entries.get(job_type)

    def job_types(self) -> frozenset[str]:
        with self._lock:
            return frozenset(self._entries)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)


MAX_MESSAGE = 2000


def describe(exc: BaseException) -> str:
    """`str(exc)`, or its repr when that is empty (`assert x > 0` has no message)."""
    return str(exc) or repr(exc)


def error_from_exception(exc: BaseException) -> ErrorInfo:
    """A handler's exception as an error record: typed by its class, retryable unless
    it is `Permanent`, with its formatted traceback (the core keeps its end)."""
    message = describe(exc)[:MAX_MESSAGE]
    trace = "".join(format_exception(exc))
    if isinstance(exc, Permanent):
        return ErrorInfo(exc.type or type(exc).__name__, message, False, trace)
    return ErrorInfo(type(exc).__name__, message, True, trace)


@attrs.define(slots=True)
class Caught:
    """The exception behind the failed outcome made inside a `catching()` block, if any."""

    exception: BaseException | None = None


# The core's `Failed` holds a description only; the exception object (for the log's
# traceback and for error trackers) travels beside it, per thread, to the worker.
_catching: ContextVar[Caught | None] = ContextVar("conveyor_catching", default=None)


@contextmanager
def catching() -> Iterator[Caught]:
    """Collect the exception behind a failure produced inside the block: a handler's
    raise, a returned `Failure(exc)`, or whatever a caller notes with `caught`."""
    found = Caught()
    token = _catching.set(found)
    try:
        yield found
    finally:
        _catching.reset(token)


def caught(exc: BaseException) -> None:
    """Note `exc` as the cause of the failure being produced, for an enclosing
    `catching()` block (a no-op outside one)."""
    found = _catching.get()
    if found is not None:
        found.exception = exc


def outcome_of(returned: Any) -> Outcome:
    """Interpret what a handler returned."""
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
            return Failed(ErrorInfo("failure", str(reason)[:MAX_MESSAGE], retryable=True))
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
    except Exception as exc:
        caught(exc)
        return Failed(error_from_exception(exc))
    return outcome_of(returned)
