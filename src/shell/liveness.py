"""The liveness mark a supervised worker process leaves for its supervisor.

A process that is stopped (SIGSTOP), or hung where no thread of its own runs, can
answer nothing, so its supervisor (`conveyor worker --processes N`) cannot ask it.
Instead each copy keeps a file of its own fresh: it touches the file (its mtime)
about once a second while the watchdog finds it live, and writes the reason into
it once the watchdog finds it stalled. The supervisor only looks: a mark older than
the stall limit, or one holding a reason, means the copy is replaced. Nothing is
written to the job server for this, and the file is in a folder the supervisor
made for its run.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import attrs

#: The environment variable that tells a supervised copy where its mark is.
LIVENESS_FILE_ENV = "CONVEYOR_LIVENESS_FILE"
#: How often a live copy touches its mark, at most.
TOUCH_EVERY_S = 1.0


class LivenessMark:
    """The child's side: keeps the mark at `path` fresh, or says why it is not."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._touched = 0.0
        self._reported = False

    @classmethod
    def from_env(cls) -> LivenessMark | None:
        """The mark the supervisor asked for, if any."""
        where = os.environ.get(LIVENESS_FILE_ENV)
        return cls(Path(where)) if where else None

    def touch(self) -> None:
        """Live: refresh the mark's time (once a second at most)."""
        now = time.monotonic()
        if now - self._touched < TOUCH_EVERY_S:
            return
        self._touched = now
        try:
            os.utime(self.path)
        except OSError:
            self.path.touch()

    def report(self, reason: str) -> None:
        """Stalled: write why, once, for the supervisor to read and act on."""
        if not self._reported:
            self._reported = True
            self.path.write_text(reason, encoding="utf-8")


@attrs.frozen(slots=True)
class MarkReading:
    """What the supervisor found in one copy's mark."""

    #: Seconds since the copy last touched the mark.
    age_s: float
    #: The reason the copy gave for being stalled, or "" while it gave none.
    reason: str


def read_mark(path: Path) -> MarkReading | None:
    """The supervisor's side: the mark's age and any reason in it; None when missing."""
    try:
        stat = path.stat()
        reason = path.read_text(encoding="utf-8").strip() if stat.st_size else ""
    except OSError:
        return None
    return MarkReading(max(0.0, time.time() - stat.st_mtime), reason)
