"""The marks a worker loop leaves as it progresses, for the watchdog to read.

Each mark is one monotonic reading stored in an attribute, taken after a server
round trip the loop made anyway (a claim, a wait for work, an outcome write, a
lease renewal of a running job): the watchdog adds no write to the server and no
lock to the loop. A plain attribute store is atomic in Python, and a reader that
sees the value from a moment before only answers a moment late.
Whether the marks mean a stall is the core's rule (`conveyor.core.watchdog`).
"""

from __future__ import annotations

import time

from ...core import LoopMarks


class LoopWatch:
    """When one worker loop started, last progressed and planned to wait until."""

    __slots__ = ("_progressed", "_started", "_waiting_until")

    def __init__(self) -> None:
        self._started = time.monotonic()
        self._progressed: float | None = None
        self._waiting_until: float | None = None

    def progressed(self) -> None:
        """A round trip of the loop's answered: a claim, a wait, a write, a renewal."""
        self._progressed = time.monotonic()

    def waiting(self, seconds: float) -> None:
        """The loop chose to wait up to `seconds` now: no progress is due before then."""
        self._waiting_until = time.monotonic() + seconds

    def marks(self, *, stopping: bool = False) -> LoopMarks:
        """The marks as the core reads them."""
        return LoopMarks(self._started, self._progressed, self._waiting_until, stopping)
