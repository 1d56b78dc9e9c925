"""Running an attempt against its deadline.

A Python thread cannot be killed, so an attempt with a timeout runs its handler
in a thread of its own while the worker waits for it, at most until the
deadline. Then exactly one of two things happens, decided under one lock by an
`AttemptGate`:

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
from collections.abc import Callable
from typing import TypeVar

from ..attempt_gate import AttemptGate

T = TypeVar("T")

__all__ = ["AttemptGate", "DeadlineRunner"]


class DeadlineRunner:
    """Runs attempts in threads of their own, each waited on until its deadline, and
    keeps count of the abandoned ones still running."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._abandoned: list[threading.Thread] = []

    def run(
        self, fn: Callable[[], T], timeout_s: float, gate: AttemptGate, *, name: str
    ) -> T | None:
        """`fn()`'s value, or None when `timeout_s` passed first and the attempt was
        abandoned. An exception `fn` raises (in time) is raised here."""
        done = threading.Event()
        box: list[T] = []
        raised: list[BaseException] = []
        # The caller's context variables (the trace span, the failure being caught)
        # follow the handler into its thread.
        context = contextvars.copy_context()

        def attempt() -> None:
            try:
                value = context.run(fn)
            except BaseException as exc:
                raised.append(exc)
            else:
                box.append(value)
            finally:
                # A late finish loses to the abandonment: its value is never read.
                gate.finish()
                done.set()

        thread = threading.Thread(target=attempt, name=name, daemon=True)
        thread.start()
        if not done.wait(timeout_s) and gate.abandon():
            with self._lock:
                self._abandoned = [t for t in self._abandoned if t.is_alive()]
                self._abandoned.append(thread)
            return None
        # Finished in time, or won the race at the deadline: the value is ready, or
        # about to be (a tenant transaction's commit may still be under way).
        done.wait()
        if raised:
            raise raised[0]
        return box[0]

    @property
    def still_running(self) -> int:
        """How many abandoned attempts' threads have not returned yet."""
        with self._lock:
            self._abandoned = [t for t in self._abandoned if t.is_alive()]
            return len(self._abandoned)
