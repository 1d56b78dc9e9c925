"""A clock tests move by hand."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta


class ManualClock:
    """A `Clock` that only moves when told to. Thread-safe."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2026, 1, 1, tzinfo=UTC)
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def advance(self, ms: float = 0, **delta: float) -> datetime:
        with self._lock:
            self._now += timedelta(milliseconds=ms, **delta)
            return self._now

    def set(self, when: datetime) -> None:
        with self._lock:
            self._now = when
