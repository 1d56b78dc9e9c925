"""The role of `SqlJobQueue` that lets idle workers wait for work through this
process's wake-up listener of the database (`sql.wakeups`)."""

from __future__ import annotations

from .base import SqlQueueBase
from .wakeups import ServerWatch, wakeups_for

__all__ = ["WaitingForWork"]


class WaitingForWork(SqlQueueBase):
    """The role of `SqlJobQueue` that lets idle workers sleep until work may be there."""

    def wait_for_work(self, queue: str, timeout_s: float) -> bool:
        """Block until a job may be ready on `queue` or `timeout_s` passes; True means
        "try a claim". All idle workers of a process share one listener per database,
        outside the pool (see `wakeups`). A parked job is announced when it is
        placed, not when it comes due: ask `next_due` how long to sleep."""
        return wakeups_for(self._db.engine).wait(self, self._db.engine, queue, timeout_s)

    def end_waits(self) -> None:
        """End every `wait_for_work` on this database now waiting in this process (a
        worker told to stop leaves its wait at once)."""
        wakeups_for(self._db.engine).end_waits()

    def report_outages_to(self, watch: ServerWatch) -> None:
        """Tell the failures of this database's wake-up listener through `watch`, the
        process's view of the server (`outage.for_queue` hands it over), so that an
        outage is told once for the process, with the workers' own failures."""
        wakeups_for(self._db.engine).report_to(watch)
