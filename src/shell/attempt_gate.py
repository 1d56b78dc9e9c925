"""Who has the last word on one attempt with a deadline: the handler, finishing, or
the worker, abandoning it (see `conveyor.shell.worker.timeouts`). Its own module
because the tenancy scope, below the worker, asks the gate before it commits a
handler's transaction."""

from __future__ import annotations

import threading


class AttemptGate:
    """Who has the last word on one attempt: the handler, finishing, or the worker,
    abandoning it at its deadline. Whichever comes first wins; the other learns so."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._finished = False
        self._abandoned = False

    def finish(self) -> bool:
        """The handler is done (or about to commit its work): False when the attempt
        was already abandoned, and its work must be discarded."""
        with self._lock:
            if self._abandoned:
                return False
            self._finished = True
            return True

    def abandon(self) -> bool:
        """The deadline passed: False when the handler finished first."""
        with self._lock:
            if self._finished:
                return False
            self._abandoned = True
            return True

    @property
    def abandoned(self) -> bool:
        with self._lock:
            return self._abandoned
