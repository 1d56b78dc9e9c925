"""The idle waits of one Redis queue object that are on the server now (see
`claims`, whose `end_waits` ends them)."""

from __future__ import annotations

import collections
import contextlib
import threading
import uuid
from collections.abc import Iterator


class WaitsInFlight:
    """How many idle waits of one queue object are on the server now, by queue name,
    and the name of its list of ended-wait tokens."""

    def __init__(self) -> None:
        self.name = uuid.uuid4().hex
        self._lock = threading.Lock()
        self._count: collections.Counter[str] = collections.Counter()

    def snapshot(self) -> dict[str, int]:
        """Every queue name waited on so far, with its waits in flight now (maybe 0:
        one may be about to begin)."""
        with self._lock:
            return dict(self._count)

    @contextlib.contextmanager
    def one(self, queue: str) -> Iterator[None]:
        with self._lock:
            self._count[queue] += 1
        try:
            yield
        finally:
            with self._lock:
                self._count[queue] -= 1
