"""The runtime's workers: their settings, the pools' start and stop, and draining.

`Runtime.start` runs one `WorkerPool` per configured queue (none on a web node,
`workers.count = 0`), after checking this host's clock against the lease
server's; `stop` lets running jobs finish within the grace period, `stop_now`
hands every claim back at once; `drain` processes in the caller's thread until
no configured queue has work due. Each queue's workers claim under its limits.
`WorkerMethods` are `Runtime`'s methods for them (mixed into it).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Self

import attrs

from ...core import ValidationError
from .. import outage
from ..endpoints import backend_url
from ..ports import Clock, Jitter, JobQueue, JobStore
from ..presence import WorkerInfo
from ..worker import WorkerPool
from ..worker.claiming import JobBudget
from ..worker.lease_keeper import check_clock
from ..worker.loop import Worker, WorkerStats
from .enqueue_warnings import warn_of_config_types, warn_of_unpolled_limits
from .presence_beat import PresenceBeat, worker_info

if TYPE_CHECKING:
    from ...core import Policies
    from ...core.limits import QueueLimits
    from ..config import Config, WorkersConfig
    from ..cron import Cron
    from ..hooks import Hooks
    from ..registry import Registry
    from ..retention import Pruner
    from ..tenancy import TenantScope
    from ..tracing import JobTracer
    from ..worker.forced_stop import HandedBack

log = logging.getLogger("conveyor.runtime")


def worker_options(
    workers: WorkersConfig,
    *,
    policies: Policies,
    clock: Clock,
    hooks: Hooks,
    pruner: Pruner,
    jitter: Jitter | None = None,
    tenancy: TenantScope | None = None,
    tracer: JobTracer | None = None,
) -> dict[str, Any]:
    """The `Worker` keyword arguments of a runtime's workers."""
    options: dict[str, Any] = {
        "policies": policies,
        "clock": clock,
        "poll_interval_ms": workers.poll_interval_ms,
        "prefetch": workers.prefetch,
        "async_concurrency": workers.async_concurrency,
    }
    if jitter is not None:
        options["jitter"] = jitter
    if tenancy is not None:
        options["tenancy"] = tenancy
    options["hooks"] = hooks
    if tracer is not None:
        options["tracer"] = tracer
    options["pruner"] = pruner
    return options


def wait_for_clock(
    queue: JobQueue, clock: Clock, lease_ms: int, *, key: str, timeout_s: float
) -> None:
    """Refuse, in one line, a clock off the lease server's (it would take live claims).
    This is the first round trip on Redis: a server not up yet is waited for, up to
    `timeout_s`, then `ServerUnreachable` names the config `key`."""
    outage.until_reachable(
        lambda: check_clock(queue, clock, lease_ms),
        state=outage.for_queue(queue),
        key=key,
        timeout_s=timeout_s,
    )


def start_pools(
    pools: list[WorkerPool],
    queue: JobQueue,
    store: JobStore,
    registry: Registry,
    workers: WorkersConfig,
    limits: Mapping[str, QueueLimits],
    options: Mapping[str, Any],
) -> None:
    """Start a pool of `workers.count` workers per queue of `workers.queues`, each
    added to `pools` as it starts."""
    for name in workers.queues:
        pool = WorkerPool(
            queue,
            store,
            registry,
            worker_count=workers.count,
            queue_name=name,
            limits=limits.get(name),
            **options,
        )
        pool.start()
        pools.append(pool)


def stop_pools(pools: Sequence[WorkerPool], grace_s: float) -> bool:
    """Stop every pool, letting in-flight jobs finish within `grace_s` in all; True
    when every job finished."""
    # Every worker of every pool is told first: a pool still waiting for its turn
    # would otherwise go on claiming while the first waits out its grace.
    for pool in pools:
        for worker in pool.workers:
            worker.stop()
    end = time.monotonic() + grace_s
    return all([pool.stop(max(0.0, end - time.monotonic())) for pool in pools])


def stop_pools_now(pools: Sequence[WorkerPool]) -> HandedBack:
    """Stop without waiting for running jobs: every claim the pools hold goes back to
    ready now (see `conveyor.shell.worker.forced_stop`)."""
    from ..worker.forced_stop import hand_back_all

    return hand_back_all(worker for pool in pools for worker in pool.workers)


def drain(
    workers: Sequence[Worker],
    queue: JobQueue,
    clock: Clock,
    queues: Sequence[str],
    *,
    timeout_s: float,
    wait_scheduled: bool,
) -> WorkerStats:
    """Run `workers` in this thread until none of `queues` has work due (with
    `wait_scheduled`, until nothing is scheduled either) or `timeout_s` passes; work
    a cap or a rate holds back is waited for. Their stats, summed."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        worked = sum(w.drain() for w in workers)
        if worked:
            continue
        waits = [s for s in (w.held_back_for_s() for w in workers) if s is not None]
        if waits:
            time.sleep(max(0.001, min(min(waits), end - time.monotonic())))
            continue
        if not wait_scheduled:
            break
        counts = queue.counts(clock.now())
        pending = sum(
            c.scheduled + c.ready + c.in_flight for name, c in counts.items() if name in queues
        )
        if pending == 0:
            break
        time.sleep(0.02)
    total: dict[str, int] = {}
    for w in workers:
        for key, value in attrs.asdict(w.stats).items():
            total[key] = total.get(key, 0) + value
    return WorkerStats(**total)


class WorkerMethods:
    """`Runtime`'s workers (mixed into it): a worker to drive by hand, the pools'
    start and stop, and draining in the caller's thread."""

    config: Config
    queue: JobQueue
    store: JobStore
    registry: Registry
    policies: Policies
    clock: Clock
    hooks: Hooks
    pruner: Pruner
    jitter: Jitter | None
    tenancy: TenantScope | None
    tracer: JobTracer | None
    limits: dict[str, QueueLimits]
    worker_id: str
    pools: list[WorkerPool]
    cron: Cron
    _beat: PresenceBeat

    def worker(self, queue_name: str = "default", **options: Any) -> Worker:
        """A worker on `queue_name` with this runtime's settings, to run jobs in the
        calling thread (`worker.drain()`); `start` runs pools of them instead. `options`
        are `Worker` keyword arguments that replace this runtime's."""
        merged = {**self._worker_options(), **options}
        if queue_name in self.limits:
            merged.setdefault("limits", self.limits[queue_name])
        return Worker(self.queue, self.store, self.registry, queue_name=queue_name, **merged)

    def _worker_options(self) -> dict[str, Any]:
        return worker_options(
            self.config.workers,
            policies=self.policies,
            clock=self.clock,
            hooks=self.hooks,
            pruner=self.pruner,
            jitter=self.jitter,
            tenancy=self.tenancy,
            tracer=self.tracer,
        )

    def start(self, *, job_budget: JobBudget | None = None) -> Self:
        """Start one pool per configured queue (nothing on a web node). A `job_budget`
        bounds the jobs all of them claim together (see `--max-jobs-per-child`)."""
        workers = self.config.workers
        if self.pools or workers.count == 0:
            if workers.count == 0:
                log.info("workers.count = 0: this node enqueues only and processes nothing")
            return self
        wait_for_clock(
            self.queue,
            self.clock,
            self.policies.lease.lease_ms,
            key=backend_url(self.config)[0],
            timeout_s=self.config.startup_timeout_ms / 1000,
        )
        options = self._worker_options()
        if job_budget is not None:
            options["job_budget"] = job_budget
        start_pools(
            self.pools, self.queue, self.store, self.registry, workers, self.limits, options
        )
        self._beat.start()
        warn_of_config_types(self.registry, self.config.timeouts_ms, self.config.cron)
        warn_of_unpolled_limits(self.limits, workers.queues)
        # Every worker process ticks; slot ids keep each slot to one job.
        self.cron.start()
        return self

    def _info(self) -> WorkerInfo:
        return worker_info(self.worker_id, self.pools, self.clock.now())

    def stop(self, grace_s: float | None = None) -> bool:
        """Stop every pool, letting in-flight jobs finish within the grace period."""
        grace = self.config.workers.grace_ms / 1000 if grace_s is None else grace_s
        clean = stop_pools(self.pools, grace)
        self.pools = []
        self._leave()
        return clean

    def stop_now(self) -> HandedBack:
        """Stop without waiting for running jobs (a second Ctrl-C): every claim the
        pools hold goes back to ready now instead of after its lease, a running job's
        attempt recorded as interrupted. Handlers still running are abandoned: end the
        process next. Says which jobs went back (see `conveyor.shell.worker.forced_stop`)."""
        pools, self.pools = self.pools, []
        handed = stop_pools_now(pools)
        self._leave()
        return handed

    def _leave(self) -> None:
        """Stop cron and the presence beat, and take this process off the live list."""
        self.cron.stop()
        self._beat.stop()

    def drain(self, *, timeout_s: float = 60.0, wait_scheduled: bool = False) -> WorkerStats:
        """Process in this thread until no configured queue has work due (and, with
        `wait_scheduled`, until nothing is scheduled either), or `timeout_s` passes.
        Each queue is claimed under its limits, as the pools claim it: fair shares
        take turns, and work a cap or a rate holds back is waited for (the next
        token, or a slot another worker frees) within `timeout_s`."""
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float):
            raise ValidationError.of("timeout_s", f"must be a number of seconds, got {timeout_s!r}")
        if not timeout_s >= 0:
            raise ValidationError.of("timeout_s", f"must be >= 0 seconds, got {timeout_s!r}")
        queues = self.config.workers.queues
        workers = [self.worker(name) for name in queues]
        return drain(
            workers,
            self.queue,
            self.clock,
            queues,
            timeout_s=timeout_s,
            wait_scheduled=wait_scheduled,
        )
