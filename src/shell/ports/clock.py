"""Where the shell reads the time and draws jitter, and what a handler is."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Protocol


class Clock(Protocol):
    """Where the shell reads the time. The core never does."""

    def now(self) -> datetime: ...


class SystemClock:
    """The wall clock, in UTC."""

    def now(self) -> datetime:
        return datetime.now(UTC)


#: A jitter source: returns a sample in [0, 1).
Jitter = Callable[[], float]

#: A handler takes the job's args and returns a JSON value, a `returns` Result, or raises.
Handler = Callable[[Mapping[str, Any]], Any]


class HandlerRegistry(Protocol):
    """Job type -> handler, per process. Register before starting workers."""

    def register(self, job_type: str, handler: Handler) -> None: ...

    def lookup(self, job_type: str) -> Handler | None: ...

    def job_types(self) -> frozenset[str]: ...
