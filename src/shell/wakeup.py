"""A wake-up for a loop that waits for several things at once (a stop signal, a child
process's exit, the end of a graceful stop), given from any thread or from a signal
handler.

A signal handler runs in the main thread between two of its lines, possibly inside
`threading.Event.wait`, which holds the event's lock for a few lines before and after
it sleeps: a handler that sets that event there waits for a lock its own thread
holds, for ever. A byte written down a pipe takes no lock, so a handler and the
other threads wake the loop the same way, at once, and the loop sleeps in `poll`
between its looks. POSIX only, as the worker's signals and process groups are.
"""

from __future__ import annotations

import contextlib
import os
import select


class Wakeup:
    """One waiter's wake-ups: `wake` from anywhere, `wait` in the waiting loop."""

    def __init__(self) -> None:
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        os.set_blocking(self._write, False)
        self._poll = select.poll()
        self._poll.register(self._read, select.POLLIN)

    def wake(self) -> None:
        """Wake the waiter, now or at its next `wait`. Safe in a signal handler."""
        # OSError: the pipe is full (a wake-up is pending already) or closed.
        with contextlib.suppress(OSError):
            os.write(self._write, b"\0")

    def wait(self, timeout_s: float) -> bool:
        """Sleep until a wake-up or `timeout_s`; True when woken. Wake-ups given since
        the last wait count at once, and are all used up by it."""
        if not self._poll.poll(max(0, round(timeout_s * 1000))):
            return False
        try:
            while os.read(self._read, 512):
                pass
        except OSError:
            pass  # drained (or closed)
        return True

    def close(self) -> None:
        for fd in (self._read, self._write):
            with contextlib.suppress(OSError):
                os.close(fd)


class Flag:
    """A yes-or-no a signal handler may set: a plain attribute, so setting it takes no
    lock (unlike `threading.Event.set`, which a second signal could enter while the
    first one's call holds the event's lock)."""

    def __init__(self) -> None:
        self._set = False

    def set(self) -> None:
        self._set = True

    def is_set(self) -> bool:
        return self._set
