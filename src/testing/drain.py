"""Drain: run every job that is due, in the calling thread, then return.

    runtime = conveyor.build({"provider": "memory"}, handlers=tasks, clock=ManualClock())
    send_receipt.enqueue({"to": "a@example.com"}, delay=3600)
    stats = drain(runtime)          # the clock moves an hour on; the job runs
    assert stats.completed == 1

Jobs run as a worker runs them (claim, handler, the core's decision, the
executor's writes), on every queue that holds work, not only the configured ones.
When nothing is due but jobs are parked (delayed, scheduled, retrying after a
failure, requeued for want of a handler) and the runtime's clock is a
`ManualClock`, `drain` sets the clock to the earliest parked job's `run_at` and
goes on, until nothing is left; so a failing job runs through its retries to its
dead letter, each backoff passing on the clock. With any other clock, parked jobs
that are not yet due stay parked.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from ..core import ValidationError, check_name
from ..core.limits import QueueLimits
from ..shell.runtime import Runtime
from ..shell.worker.inline import add_stats
from ..shell.worker.loop import WorkerStats
from .clock import ManualClock

#: A queue with no limits declared.
_NO_LIMITS = QueueLimits()

#: How many jobs one `drain` runs before it decides the work will not end.
MAX_JOBS = 10_000


class DrainLimit(RuntimeError):
    """`drain` ran its `max_jobs` and work was still due (a job that enqueues itself?)."""


def drain(
    runtime: Runtime,
    *,
    queues: str | Iterable[str] | None = None,
    advance_clock: bool = True,
    max_jobs: int = MAX_JOBS,
) -> WorkerStats:
    """Run every job of `runtime` that is due (on `queues` only, when given), moving a
    `ManualClock` on to parked jobs' `run_at` unless `advance_clock=False`; returns
    what was done. Runs at most `max_jobs` jobs, and raises `DrainLimit` when work is
    still due after them. `queues` may name one queue as a string."""
    if not isinstance(runtime, Runtime):
        raise TypeError(f"drain needs the Runtime to drain, got {type(runtime).__name__}")
    if queues is not None and (isinstance(queues, bytes) or not isinstance(queues, Iterable)):
        why = f"must be a queue name or a list of them (or None: all), got {type(queues).__name__}"
        raise ValidationError.of("queues", why)
    only = None if queues is None else [queues] if isinstance(queues, str) else list(queues)
    if only == []:
        raise ValidationError.of("queues", "must name at least one queue (or be None: all)")
    if isinstance(max_jobs, bool) or not isinstance(max_jobs, int) or max_jobs < 1:
        raise ValidationError.of("max_jobs", f"must be a whole number >= 1, got {max_jobs!r}")
    if only is not None:
        # A name no queue can have would drain nothing, and a test would pass on it.
        problems = [check_name(f"queues[{n}]", name) for n, name in enumerate(only)]
        if any(problems):
            raise ValidationError([p for p in problems if p is not None])
    clock = runtime.clock
    total, claimed = WorkerStats(), 0
    while True:
        names = only if only is not None else _queues_with_work(runtime)
        ran, stats = runtime.inline_runner.run(names, max_jobs=max_jobs - claimed)
        claimed += ran
        total = add_stats(total, stats)
        if claimed >= max_jobs:
            names = only if only is not None else _queues_with_work(runtime)
            if _work_left(runtime, names, advance_clock):
                raise DrainLimit(f"drain ran {max_jobs} jobs and work is still due")
            return total
        if ran:
            continue
        if not (advance_clock and isinstance(clock, ManualClock)):
            return total
        due = _parked_until(runtime, names)
        if not due or min(due) <= clock.now():
            # Nothing parked, or parked work this clock already reached but no claim
            # took: moving the clock would not change that.
            return total
        clock.set(min(due))


def _parked_until(runtime: Runtime, names: list[str]) -> list[datetime]:
    """When the parked jobs of each of `names` that has any come due."""
    return [d for d in map(runtime.queue.next_due, names) if d is not None]


def _work_left(runtime: Runtime, names: list[str], advance_clock: bool) -> bool:
    """Whether a drain of `names` would run another job: one is ready on a queue whose
    caps or rates cannot hold it back (whether they would, only a claim tells), or one
    is parked and either due or the drain moves the clock on to it."""
    now = runtime.clock.now()
    counts = runtime.queue.counts(now)
    free = [name for name in names if not runtime.limits.get(name, _NO_LIMITS).holds_back]
    if any(counts[name].ready for name in free if name in counts):
        return True
    due = _parked_until(runtime, names)
    moves = advance_clock and isinstance(runtime.clock, ManualClock)
    return bool(due) and (moves or min(due) <= now)


def _queues_with_work(runtime: Runtime) -> list[str]:
    counts = runtime.queue.counts(runtime.clock.now())
    return sorted(set(counts) | set(runtime.config.workers.queues))
