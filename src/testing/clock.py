"""A clock tests move by hand.

Give it to `conveyor.build(..., clock=clock)` (or to a `Worker`) and time stands
still until the test moves it::

    from datetime import timedelta
    from conveyor.testing import ManualClock

    clock = ManualClock()                    # 2026-01-01 00:00 UTC unless told
    clock.advance(seconds=30)                # any `timedelta` keyword
    clock.advance(timedelta(minutes=5))      # or a timedelta
    clock.advance(250)                       # or a number: milliseconds
    clock.set(clock.now() + timedelta(hours=1))

Times are timezone-aware UTC, like every time in Conveyor. `conveyor.testing.drain`
moves a manual clock to each scheduled job's `run_at` in turn.
"""

from __future__ import annotations

import math
import threading
from datetime import UTC, datetime, timedelta

#: Where a `ManualClock` starts unless given a time.
DEFAULT_START = datetime(2026, 1, 1, tzinfo=UTC)


class ManualClock:
    """A `Clock` that only moves when told to. Thread-safe."""

    def __init__(self, start: datetime | None = None) -> None:
        if start is not None:
            _aware("start", start)
        self._now = start or DEFAULT_START
        self._lock = threading.Lock()

    def now(self) -> datetime:
        """The time the clock shows."""
        with self._lock:
            return self._now

    def advance(self, ms: float | timedelta = 0, **delta: float) -> datetime:
        """Move forward by `ms` (a `timedelta`, or a number of milliseconds) plus any
        `timedelta` keywords (`seconds=5`, `minutes=1`); returns the new time."""
        if not isinstance(ms, timedelta) and (
            isinstance(ms, bool) or not isinstance(ms, int | float) or not math.isfinite(ms)
        ):
            raise ValueError(f"ms must be a timedelta or a number of milliseconds, got {ms!r}")
        step = ms if isinstance(ms, timedelta) else timedelta(milliseconds=ms)
        with self._lock:
            self._now += step + timedelta(**delta)
            return self._now

    def set(self, when: datetime) -> None:
        """Show `when` from now on (it may be earlier: a clock stepped back)."""
        _aware("when", when)
        with self._lock:
            self._now = when


def _aware(name: str, value: object) -> None:
    if not isinstance(value, datetime) or value.utcoffset() is None:
        raise ValueError(
            f"{name} must be a timezone-aware datetime (e.g. datetime(..., tzinfo=UTC)), "
            f"got {value!r}"
        )
