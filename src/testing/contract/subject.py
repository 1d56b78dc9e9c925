"""What the contract checks: a `Subject` (your queue and store, fresh and empty, with
the hooks some cases need), the capabilities a case `Need`s, and the `Difference`s a
backend declares where it genuinely cannot agree."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from ...core import Job
from ...shell.executor import Executor
from ...shell.ports import (
    BatchingJobQueue,
    CancellingJobQueue,
    FindingManyJobQueue,
    FinishingJobQueue,
    LimitedJobQueue,
    LimitReportingJobQueue,
    TransactionalJobQueue,
    WakingJobQueue,
)
from ...shell.ports.workflows import WorkflowJobQueue


def _nothing() -> None:
    return None


@attrs.define
class Subject:
    """One adapter under test: a fresh, empty `queue` (a `JobQueue`, and whichever of
    the optional capabilities it offers) and the `store` it finishes into.

    The hooks are optional; a case that needs one the subject lacks is reported as
    not applicable, never as passed:

    * `peer()`: another process's view of the same data, a new (queue, store) pair
      over new connections (cases of concurrent claimers and reclaimers);
    * `corrupt(job, payload)`: overwrite the stored payload of a queued job with
      `payload`, as a foreign writer might (cases of undecodable payloads);
    * `engine`: for a `TransactionalJobQueue`, the SQLAlchemy engine of the caller's
      database, whose connections `enqueue_in_tx` takes;
    * `async_writer()`: the writer `Runtime.aenqueue` uses over this queue's data (an
      object with async `enqueue`, `enqueue_many` and `aclose`);
    * `promote_per_claim`: the most due jobs one claim promotes, when the adapter
      bounds it.

    `cleanup()` runs after each case. `executor` is the executor the cases drive
    (the project's own; its tests swap in a broken one to show the cases catch it).
    """

    name: str
    queue: Any
    store: Any
    cleanup: Callable[[], None] = _nothing
    peer: Callable[[], tuple[Any, Any]] | None = None
    corrupt: Callable[[Job, str], None] | None = None
    engine: Any = None
    async_writer: Callable[[], Any] | None = None
    promote_per_claim: int | None = None
    executor: type[Executor] = Executor

    def peers(self, n: int) -> list[tuple[Any, Any]]:
        """`n` views of this subject's data: other processes' when it has `peer`,
        else its own queue and store `n` times."""
        return [self.peer() if self.peer else (self.queue, self.store) for _ in range(n)]


@attrs.frozen
class Need:
    """A capability a case needs: `label` says which, `holds(subject)` whether the
    subject has it."""

    label: str
    holds: Callable[[Subject], bool] = attrs.field(eq=False)


def _finishes(s: Subject) -> bool:
    return isinstance(s.queue, FinishingJobQueue) and s.queue.finishes_with(s.store)


FINISHING = Need("a FinishingJobQueue that finishes into the subject's store", _finishes)
BATCHING = Need(
    "a BatchingJobQueue (dequeue_many, finish_many, start_claim)",
    lambda s: _finishes(s) and isinstance(s.queue, BatchingJobQueue),
)
CANCELLING = Need(
    "a CancellingJobQueue that finishes into the subject's store",
    lambda s: _finishes(s) and isinstance(s.queue, CancellingJobQueue),
)
LIMITED = Need(
    "a LimitedJobQueue (dequeue_limited)",
    lambda s: _finishes(s) and isinstance(s.queue, LimitedJobQueue),
)
LIMIT_REPORTING = Need(
    "a LimitReportingJobQueue (limit_usage)",
    lambda s: _finishes(s) and isinstance(s.queue, LimitReportingJobQueue),
)
WAKING = Need("a WakingJobQueue (wait_for_work)", lambda s: isinstance(s.queue, WakingJobQueue))
FINDING_MANY = Need(
    "a FindingManyJobQueue (find_many)", lambda s: isinstance(s.queue, FindingManyJobQueue)
)
TRANSACTIONAL = Need(
    "a TransactionalJobQueue and the subject's engine",
    lambda s: isinstance(s.queue, TransactionalJobQueue) and s.engine is not None,
)
WORKFLOWS = Need(
    "a WorkflowJobQueue (jobs that wait for other jobs; not yet on Redis)",
    lambda s: _finishes(s) and isinstance(s.queue, WorkflowJobQueue),
)
PEER = Need("the subject's peer hook (another process's view)", lambda s: s.peer is not None)
CORRUPT = Need("the subject's corrupt hook", lambda s: s.corrupt is not None)
ASYNC_WRITER = Need("the subject's async_writer hook", lambda s: s.async_writer is not None)
PROMOTION_BOUND = Need(
    "the subject's promote_per_claim bound", lambda s: s.promote_per_claim is not None
)
SERVER_CLOCK = Need(
    "a queue whose leases run on a server's clock (server_time)",
    lambda s: s.queue.server_time() is not None,
)


@attrs.frozen
class Difference:
    """Where one backend genuinely cannot agree with a case: `reason`, and the
    documented behaviour asserted `instead` (nothing is dropped)."""

    reason: str
    instead: Callable[[Subject], None] = attrs.field(eq=False)


#: (case name, subject name) -> the difference declared for that pair.
Differences = dict[tuple[str, str], Difference]


class NotApplicable(Exception):
    """The case needs a capability or hook the subject lacks (`missing` says which)."""

    def __init__(self, case: str, missing: list[str]) -> None:
        super().__init__(f"{case} needs {'; '.join(missing)}")
        self.case = case
        self.missing = missing
