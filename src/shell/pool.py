"""A worker pool: `worker_count` worker threads on one queue, stopped gracefully."""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from typing import Any

from .ports import JobQueue, JobStore
from .registry import Registry
from .worker import Worker, WorkerStats

log = logging.getLogger("conveyor.worker")


class WorkerPool:
    """`worker_count` worker threads on one queue.

    `stop(grace_s)` asks every worker to finish its current job and waits up to
    `grace_s`; a job still running then is left to its lease (reclaimed later),
    never acked unfinished.
    """

    def __init__(
        self,
        queue: JobQueue,
        store: JobStore,
        registry: Registry,
        *,
        worker_count: int = 1,
        queue_name: str = "default",
        **worker_options: Any,
    ) -> None:
        if worker_count < 0:
            raise ValueError("worker_count must be >= 0")
        self.queue_name = queue_name
        self.workers = [
            Worker(queue, store, registry, queue_name=queue_name, **worker_options)
            for _ in range(worker_count)
        ]
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        if self._threads:
            return
        if self.workers:
            self.workers[0].warn_if_empty()
            self.workers[0].check_clock()  # refuse here, in the caller, not in each thread
        for i, worker in enumerate(self.workers):
            worker._warned_empty = True
            worker._clock_checked = True
            thread = threading.Thread(
                target=worker.run, name=f"conveyor-{self.queue_name}-{i}", daemon=True
            )
            thread.start()
            self._threads.append(thread)

    def running(self) -> tuple[str, ...]:
        """The ids of the jobs the pool's workers are running now."""
        return tuple(job for worker in self.workers for job in worker.running())

    def stop(self, grace_s: float = 30.0) -> bool:
        """Stop every worker; True if all finished within `grace_s`."""
        for worker in self.workers:
            worker.stop()
        end = time.monotonic() + grace_s
        for thread in self._threads:
            thread.join(max(0.0, end - time.monotonic()))
        alive = [t for t in self._threads if t.is_alive()]
        if alive:
            log.warning(
                "%d worker(s) on %r still busy after %.1fs; their jobs are left to the lease",
                len(alive),
                self.queue_name,
                grace_s,
            )
        self._threads = alive
        return not alive

    @property
    def stats(self) -> WorkerStats:
        total: Counter[str] = Counter()
        for worker in self.workers:
            total.update(worker._counts)
        return WorkerStats(**total)
