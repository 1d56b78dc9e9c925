"""Shared test helpers: the instant the tests start at, a job maker, and the crash
tools (`Crash`, where-is-my-job), which live in the shipped contract
(`conveyor.testing.contract.support`), whose cases use them too; and a real Redis
client that counts the commands it sends."""

from __future__ import annotations

import collections
import os
from pathlib import Path
from typing import Any

import redis
from conveyor.testing.contract.support import T0, Crash, locate, make_job

__all__ = ["T0", "CountingRedis", "Crash", "locate", "make_job"]


class CountingRedis(redis.Redis):
    """A real client that also tallies the commands it sends (to count round trips)."""

    sent: collections.Counter[str]

    def execute_command(self, *args: Any, **options: Any) -> Any:
        self.sent = getattr(self, "sent", collections.Counter())
        self.sent[str(args[0]).upper()] += 1
        return super().execute_command(*args, **options)


def process_alive(pid: int) -> bool:
    """Whether process `pid` runs (a zombie, dead but not yet reaped, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return True
