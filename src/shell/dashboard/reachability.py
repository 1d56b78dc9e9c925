"""The dashboard's reads of the backend, with a deadline, and what a page says when
the backend is down.

The adapters ride out a dropped connection by retrying it for a quarter of the
lease (15 s by default), which is right for a worker's write and wrong for a page
an operator is looking at: during an outage each page waited that long and then
answered a bare 500. Here every page's read runs in a worker thread with a deadline
(`timeout_s`, 2 s by default): a read that fails because the server cannot be
reached (`outage.is_outage`), or that has not answered by then, becomes
`BackendUnavailable`, which the app renders as a 503 page naming the backend and
its address (password masked). A thread cannot be stopped from outside, so a read
that ran out of time goes on in its thread; until it ends, further reads do not
start another such thread but answer at once that the backend has not answered,
so an outage holds at most one thread however often pages are asked for.

Actions take the same path without the deadline (a bulk retry may take longer
than 2 s while the server is up); an outage still ends them with the 503 page.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from starlette.concurrency import run_in_threadpool

from ...core import ValidationError
from .. import outage
from ..endpoints import backend_label, config_secrets
from ..redact import one_line, redact
from ..runtime import Runtime
from ..terminal import clipped

T = TypeVar("T")
_log = logging.getLogger("conveyor.dashboard")

#: How long a page waits for the backend before it says the backend did not answer.
DEFAULT_TIMEOUT_S = 2.0


#: What `failure_text` says the backend did not do, by default.
ACTION = "carry out the action"
#: What it says of a page's read.
READ = "answer the read for this page"


class BackendUnavailable(Exception):
    """The backend could not be reached, or did not answer in time: one line for the
    page, naming the backend and its masked address."""


class BackendFailed(BackendUnavailable):
    """A read the backend failed for a reason other than an outage (a SQLite file's
    folder removed): the page says what failed (`failure_text`); `kind` names the
    error's type."""

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


class BackendReads:
    """Runs the dashboard's calls to the runtime in worker threads, with a deadline."""

    def __init__(self, runtime: Runtime, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        if timeout_s <= 0:
            raise ValidationError.of("backend_timeout_s", f"must be > 0, got {timeout_s!r}")
        self.timeout_s = timeout_s
        name, where = backend_label(runtime.config)
        self._backend = f"{name} at {where}"
        self._secrets = config_secrets(runtime.config)
        # Set when the read that ran out of time ends (in its thread, whichever loop).
        self._late: threading.Event | None = None
        self._late_since = 0.0

    async def read(self, call: Callable[..., T], *args: object) -> T:
        """`call(*args)` in a thread; `BackendUnavailable` when the server is down or
        has not answered within `timeout_s`, `BackendFailed` when the read raised."""
        try:
            return await self._run(call, args, deadline=True)
        except BackendUnavailable:
            raise
        except Exception as exc:  # the page says what failed, not a bare 500
            raise BackendFailed(self.failure_text(exc, READ), type(exc).__name__) from exc

    async def act(self, call: Callable[..., T], *args: object) -> T:
        """`call(*args)` in a thread with no deadline; `BackendUnavailable` when the
        server is down (or a read is still waiting for it)."""
        return await self._run(call, args, deadline=False)

    async def _run(self, call: Callable[..., T], args: tuple[object, ...], deadline: bool) -> T:
        late = self._late
        if late is not None and not late.is_set():
            waited = time.monotonic() - self._late_since
            raise BackendUnavailable(
                f"{self._backend} has not answered a read for {waited:.0f} s: it is "
                "unreachable or overloaded. This page will load once it answers."
            )
        began, ended = time.monotonic(), threading.Event()

        def tracked() -> T:
            try:
                return call(*args)
            finally:
                ended.set()

        task: asyncio.Future[T] = asyncio.ensure_future(run_in_threadpool(tracked))
        task.add_done_callback(_retrieve)
        # `wait` never cancels the task: a thread cannot be stopped, so a late read
        # goes on, and is the one read let wait until it ends.
        await asyncio.wait({task}, timeout=self.timeout_s if deadline else None)
        if not task.done():
            self._late, self._late_since = ended, began
            raise BackendUnavailable(
                f"{self._backend} did not answer within {self.timeout_s:g} s: it is "
                "unreachable or overloaded. This page will load once it answers."
            )
        try:
            return task.result()
        except Exception as exc:
            if not outage.is_outage(exc):
                raise
            detail = one_line(redact(f"{type(exc).__name__}: {exc}", self._secrets))
            raise BackendUnavailable(
                f"{self._backend} is unreachable ({detail[:300]}). This page will load "
                "once it is back."
            ) from None

    def failure_text(self, exc: Exception, what: str = ACTION) -> str:
        """The one line a page says when the backend failed an action (or a page's read:
        `what` it did not do): an outage's own line, or for any other reason (a locked
        SQLite file, its folder removed) what failed and why, password masked, with the
        traceback to the log."""
        if isinstance(exc, BackendUnavailable):
            return str(exc)
        _log.error("a dashboard %s failed", "action" if what == ACTION else "read", exc_info=exc)
        cause = exc.__cause__ or exc.__context__
        why = f"{type(exc).__name__}: {exc}"
        if cause is not None:
            why += f" ({type(cause).__name__}: {cause})"
        detail = one_line(redact(why, self._secrets))
        return f"{self._backend} did not {what}: {clipped(detail, 400)}"


def _retrieve(task: asyncio.Future[Any]) -> None:
    """Take a late read's outcome, so asyncio does not report it as never retrieved."""
    if not task.cancelled():
        task.exception()
