"""Running an attempt against its deadline.

A Python thread cannot be killed, so an attempt with a timeout runs its handler
on a thread the worker keeps for that (`SecondThread`, reused from attempt to
attempt) while the worker waits for it, at most until the deadline. Then exactly
one of two things happens, decided under one lock by an `AttemptGate`:

* the handler finished first: its outcome is used as usual;
* the deadline passed first: the attempt is *abandoned*. The worker records a
  `Timeout` failure through the ordinary decision (so the retry policy applies)
  and moves on to its next job. The handler's thread keeps running until the
  handler returns; whatever it returns or raises then is discarded. It writes
  nothing of the job's: every write of the job is the worker's, and the worker
  has already written the timeout. A tenant-scoped handler's transaction is
  rolled back instead of committed.

A handler that may overrun should check `ctx.should_stop()` (or `ctx.deadline`)
and return early, so that its thread, and whatever it holds, is freed.

For work that must be stopped for real, a job type registered with
`execution="process"` runs in a child process that is killed at the deadline
instead (see `conveyor.shell.worker.process_execution`).
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Callable
from concurrent import futures
from typing import TypeVar

from ..attempt_gate import AttemptGate
from .second_thread import SecondThread

T = TypeVar("T")

__all__ = ["AttemptGate", "DeadlineRunner"]


#: On the main thread, the longest a wait blocks before it looks for a signal: one
#: that arrives just before a lock's wait begins is otherwise handled only when the
#: wait ends (a Ctrl-C at the deadline of a long attempt, not at once).
_SIGNAL_CHECK_S = 0.25


def _wait(running: futures.Future[T], timeout_s: float) -> None:
    """Wait until `running` is done or `timeout_s` has passed; a Ctrl-C lands here."""
    if threading.current_thread() is not threading.main_thread():
        futures.wait([running], timeout_s)
        return
    end = time.monotonic() + timeout_s
    while not running.done() and (left := end - time.monotonic()) > 0:
        futures.wait([running], min(left, _SIGNAL_CHECK_S))


class DeadlineRunner:
    """Runs attempts on a thread it keeps (`SecondThread`), each waited on until its
    deadline; an abandoned attempt keeps that thread and the next gets a new one. It
    keeps count of the abandoned ones still running."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._thread = SecondThread("conveyor-attempts")
        self._abandoned: list[SecondThread] = []

    def run(
        self, fn: Callable[[], T], timeout_s: float, gate: AttemptGate, *, name: str
    ) -> T | None:
        """`fn()`'s value, or None when `timeout_s` passed first and the attempt was
        abandoned. An exception `fn` raises (in time) is raised here."""
        # The caller's context variables (the trace span, the failure being caught)
        # follow the handler into its thread.
        context = contextvars.copy_context()

        def attempt() -> T:
            try:
                return context.run(fn)
            finally:
                # A late finish loses to the abandonment: its value is never read.
                gate.finish()

        with self._lock:
            thread = self._thread
        running: futures.Future[T] | None = None
        try:
            running = thread.submit_if_idle(attempt, name=name)
            if running is None:
                # The kept thread is busy (with the handler that started this attempt,
                # at any depth): this one gets a thread of its own, not a place behind.
                thread = SecondThread("conveyor-attempts")
                running = thread.submit(attempt, name=name)
                thread.close()  # it ends after this one call
            _wait(running, timeout_s)
        except BaseException:
            # Interrupted while the handler runs on (a Ctrl-C in a drain, even one that
            # lands before the submit returned its future): it keeps the thread, as an
            # abandoned attempt does, and the next attempt gets another.
            if thread.busy:
                self._let_go(thread)
            raise
        if not running.done() and gate.abandon():
            self._let_go(thread)
            return None
        # Finished in time, or won the race at the deadline: the value is ready, or
        # about to be (a tenant transaction's commit may still be under way).
        return running.result()

    def _let_go(self, thread: SecondThread) -> None:
        """`thread` is left to a handler still running: it ends when that returns."""
        with self._lock:
            thread.close()
            self._abandoned = [t for t in self._abandoned if t.alive] + [thread]
            if thread is self._thread:
                self._thread = SecondThread("conveyor-attempts")

    def close(self) -> None:
        """Let the kept thread go (a later attempt starts another)."""
        with self._lock:
            self._thread.close()

    @property
    def still_running(self) -> int:
        """How many abandoned attempts' threads have not returned yet."""
        with self._lock:
            self._abandoned = [t for t in self._abandoned if t.alive]
            return len(self._abandoned)
