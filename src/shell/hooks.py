"""Lifecycle hooks: callbacks for what happens to jobs (error trackers, metrics, audit).

    runtime = conveyor.build(config, handlers=...)
    runtime.hooks.on_failed(lambda job, exc: sentry_sdk.capture_exception(exc))

| event | when | the callback gets |
|---|---|---|
| `enqueued` | the job is queued (not for `enqueue_in_tx`: see below) | `job` |
| `started` | a worker starts it (its handler, if any here, runs next) | `job` |
| `succeeded` | its completed record is written | `job` (with `result`) |
| `failed` | an attempt failed and its retry or dead letter is written | `job`, `exc` |
| `dead_lettered` | its dead letter is written (any reason) | `job`, `error` |
| `cancelled` | its cancelled record is written (queued, or its holder refused) | `job` |

Callbacks run after the write they report, in the worker's thread, so an
error tracker never hears of a job the store does not hold; an outcome whose
write was lost (the claim expired) is not reported, and the job runs again.
`exc` is the exception the handler raised or returned in a `Failure`, or None
when the failure carries none (a returned `Failure("why")`, a tenant error).
A callback that raises is logged on `conveyor.hooks` and ignored: it never
stops the worker nor changes what happens to the job. Keep callbacks quick;
the worker waits for them. Job args are in `job.reveal()`, never in `repr(job)`.

A job enqueued with `enqueue_in_tx` is not reported as enqueued: it exists only
once the caller commits, which the runtime does not see.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from ..core import ErrorInfo, Job

log = logging.getLogger("conveyor.hooks")

JobCallback = Callable[[Job], object]
FailedCallback = Callable[[Job, BaseException | None], object]
DeadLetterCallback = Callable[[Job, ErrorInfo], object]

C = TypeVar("C", bound=Callable[..., object])


class Hooks:
    """The callbacks registered for each lifecycle event. Thread-safe; each `on_*`
    returns its callback, so it also works as a decorator."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._callbacks: dict[str, tuple[Callable[..., object], ...]] = {}

    def _add(self, event: str, callback: C) -> C:
        if not callable(callback):
            raise TypeError(f"a {event} hook must be callable, got {type(callback).__name__}")
        with self._lock:
            self._callbacks[event] = (*self._callbacks.get(event, ()), callback)
        return callback

    def on_enqueued(self, callback: JobCallback) -> JobCallback:
        return self._add("enqueued", callback)

    def on_started(self, callback: JobCallback) -> JobCallback:
        return self._add("started", callback)

    def on_succeeded(self, callback: JobCallback) -> JobCallback:
        return self._add("succeeded", callback)

    def on_failed(self, callback: FailedCallback) -> FailedCallback:
        return self._add("failed", callback)

    def on_dead_lettered(self, callback: DeadLetterCallback) -> DeadLetterCallback:
        return self._add("dead_lettered", callback)

    def on_cancelled(self, callback: JobCallback) -> JobCallback:
        return self._add("cancelled", callback)

    # ---- called by the runtime, the workers and the lease keeper -------------

    def enqueued(self, job: Job) -> None:
        self._call("enqueued", job)

    def started(self, job: Job) -> None:
        self._call("started", job)

    def succeeded(self, job: Job) -> None:
        self._call("succeeded", job)

    def failed(self, job: Job, exc: BaseException | None) -> None:
        self._call("failed", job, exc)

    def dead_lettered(self, job: Job, error: ErrorInfo) -> None:
        self._call("dead_lettered", job, error)

    def cancelled(self, job: Job) -> None:
        self._call("cancelled", job)

    def _call(self, event: str, job: Job, *rest: Any) -> None:
        # Read without the lock: the tuple is replaced whole, never changed in place.
        for callback in self._callbacks.get(event, ()):
            try:
                callback(job, *rest)
            except Exception:
                # The job's fate is already written; a broken tracker must not change it.
                log.exception(
                    "%s hook %s failed for job %s (%s); ignored",
                    event,
                    getattr(callback, "__qualname__", repr(callback)),
                    job.id,
                    job.job_type,
                )
