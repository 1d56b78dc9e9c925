"""What recycling needs to know of this process: the jobs its workers have claimed,
and its resident memory. The rule itself is the core's (`conveyor.core.recycling`)."""

from __future__ import annotations

import os
import resource
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from ...core import RecyclePolicy, recycle_reason

_STATM = Path("/proc/self/statm")


def resident_mb() -> float | None:
    """This process's resident memory now, in MB; where /proc is missing, the peak
    instead (never lower than now, so a bound is never missed); None if neither."""
    try:
        pages = int(_STATM.read_text().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        pass
    try:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    except (OSError, ValueError):
        return None
    # Bytes on macOS, kilobytes elsewhere.
    return peak / 2**20 if sys.platform == "darwin" else peak / 2**10


class Recycling:
    """This process's recycling: the budget its workers claim under (`JobBudget`),
    and the reason to make way for a fresh process once there is one. Both ask the
    core's rule, so a process past its bound claims nothing more: the graceful stop
    then only waits for the jobs it already holds."""

    def __init__(
        self, policy: RecyclePolicy, memory: Callable[[], float | None] = resident_mb
    ) -> None:
        self.policy = policy
        self._memory = memory
        self._lock = threading.Lock()
        #: Jobs claimed so far by this process's workers.
        self.claimed = 0

    def reserve(self, want: int) -> int:
        with self._lock:
            if recycle_reason(self.policy, self.claimed, self._memory()) is not None:
                return 0
            left = want if self.policy.max_jobs is None else self.policy.max_jobs - self.claimed
            granted = max(0, min(want, left))
            self.claimed += granted
            return granted

    def refund(self, unused: int) -> None:
        with self._lock:
            self.claimed -= unused

    def reason(self) -> str | None:
        """Why to recycle now, or None."""
        with self._lock:
            claimed = self.claimed
        return recycle_reason(self.policy, claimed, self._memory())
