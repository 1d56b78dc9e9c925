"""Running jobs in the caller's thread: inline mode, and draining in tests.

In inline mode (`inline = true` in the config, or `build(..., inline=True)`),
`Runtime.enqueue` and `enqueue_many` return only after the enqueued jobs' queue
has been drained in the caller's thread. The jobs take the same path as on a
worker (claim, handler, the core's decision, the executor's writes), so what a
test sees is what production does:

* a job that succeeds is `completed`, its result in the store;
* a failed attempt with retries left is `retrying`, parked for its backoff: it is
  not run again at once (`conveyor.testing.drain` runs it by moving a manual
  clock); a failure without retries left, or a `Permanent` one, is a dead letter;
* the handler's exception is recorded, not raised to the caller of `enqueue`;
* a job with a `delay` or `run_at` in the future stays scheduled until drained;
* `enqueue_in_tx` does not run inline: the job exists only once the caller
  commits.

A handler that enqueues another job runs it inline too, before it returns; an
async handler's plain `enqueue`, once it has returned (see `InlineRunner.run`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

from .async_jobs import HANDLER_LOOP
from .loop import Worker
from .reporting import WorkerStats, add_stats, stats_between

__all__ = ["InlineRunner", "add_stats", "stats_between"]


class InlineRunner:
    """Workers, one per queue and depth of nesting, that run jobs in the calling
    thread. Kept for reuse: each worker owns a heartbeat thread for its lifetime."""

    def __init__(self, make_worker: Callable[[str], Worker]) -> None:
        self._make = make_worker
        self._lock = threading.Lock()
        self._idle: dict[str, list[Worker]] = {}
        #: Queues an async handler enqueued to, left to the run waiting for it.
        self._deferred: dict[str, None] = {}
        #: How deep in runs this thread is (a handler's enqueue runs one inside one).
        self._nesting = threading.local()

    @contextmanager
    def worker(self, queue_name: str) -> Iterator[Worker]:
        """An idle worker on `queue_name`, for this thread only until the block ends.
        A worker is never shared while in use: a handler that enqueues inline gets
        another one, so the outer job's claim state stays its own."""
        with self._lock:
            idle = self._idle.setdefault(queue_name, [])
            worker = idle.pop() if idle else None
        if worker is None:
            worker = self._make(queue_name)
        try:
            yield worker
        finally:
            with self._lock:
                self._idle[queue_name].append(worker)

    def run(self, queues: Iterable[str], *, max_jobs: int | None = None) -> tuple[int, WorkerStats]:
        """Run the due jobs of each of `queues`, in order, until none has any due;
        at most `max_jobs` in all. Returns how many jobs were claimed, and what was
        done with them.

        Called from an async handler (a plain `enqueue` on the event loop), it runs
        nothing: a blocking run there would stall the loop the handler runs on, and an
        async job could never start. The queues are left to the run that waits for
        that handler, which drains them once the handler has returned."""
        if HANDLER_LOOP.is_current():
            with self._lock:
                self._deferred.update(dict.fromkeys(queues))
            return 0, WorkerStats()
        total, claimed = WorkerStats(), 0
        pending = list(dict.fromkeys(queues))
        depth = getattr(self._nesting, "depth", 0)
        self._nesting.depth = depth + 1
        try:
            while pending:
                for name in pending:
                    left = None if max_jobs is None else max_jobs - claimed
                    if left is not None and left <= 0:
                        return claimed, total
                    with self.worker(name) as worker:
                        before = worker.stats
                        claimed += worker.drain(max_jobs=left)
                        total = add_stats(total, stats_between(before, worker.stats))
                with self._lock:
                    pending, self._deferred = list(self._deferred), {}
            return claimed, total
        finally:
            self._nesting.depth = depth
            if depth == 0:
                # A run stopped early leaves its handlers' queues to whoever drains
                # them next by name: another run of other queues must not take them up.
                with self._lock:
                    self._deferred = {}
