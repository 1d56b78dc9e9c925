"""An optional capability of a store: telling a caller that waits for a job's outcome
that the job may have finished, instead of being polled. Callers ask with
`isinstance` (`Runtime.result` does)."""

from __future__ import annotations

from typing import Protocol, runtime_checkable
from uuid import UUID

from ...core import CarriedOutcome
from .store import JobStore


class FinishWaiter(Protocol):
    """A watch on one job id (a context manager that stops watching on exit). Read the
    job after the watch is made, then wait; a signal means "read it again"."""

    def wait(self, timeout_s: float) -> bool:
        """Block until the job may have finished (True) or `timeout_s` passes (False)."""
        ...

    async def wait_async(self, timeout_s: float) -> bool:
        """`wait` on an event loop, which keeps running meanwhile."""
        ...

    def close(self) -> None:
        """Stop watching."""
        ...

    def __enter__(self) -> FinishWaiter: ...

    def __exit__(self, *_: object) -> None: ...


@runtime_checkable
class RecordCarryingWaiter(FinishWaiter, Protocol):
    """A watch whose signals may carry the record that was written, so that the
    caller can settle without reading the store (if the core says the record is the
    outcome it waits for: `carried_record_settles`)."""

    def take_carried(self) -> CarriedOutcome | None:
        """What the record the newest signal carried says of the outcome, once; None
        when it carried none (or one that does not read)."""
        ...


@runtime_checkable
class FinishWatchingStore(JobStore, Protocol):
    """A store that wakes the callers waiting for a job's outcome when its record is
    written (a condition in memory, LISTEN/NOTIFY or a commit watch on SQL, an inbox
    per process on Redis), through one listener per process."""

    def watch_finished(self, job_id: UUID) -> FinishWaiter:
        """A watch on `job_id`, registered before it returns."""
        ...
