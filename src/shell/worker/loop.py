"""Workers: claim jobs, run their handlers, ask the core, hand the answers to the executor.

A `Worker` polls one queue, in rounds. Each round keeps its leases first (the lease
keeper returns abandoned claims to ready on its own interval), then claims up to
`prefetch` jobs, promoting the queue's due jobs in the same step (so a due job is
claimable at its `run_at`), and takes the batch from claim to release
(`conveyor.shell.worker.batch`): each job is started, run (`conveyor.shell.worker.attempt_runner`),
decided by the core, written by the executor and reported. A round that found no
work waits (`conveyor.shell.worker.idle`), no longer than until the next parked job comes
due. Every claim the worker holds (prefetched, running, finished but not yet
written) is kept leased by its heartbeat, and every write is a decision carried out
by the executor: the worker decides nothing itself and writes nothing directly.
"""

from __future__ import annotations

import logging
import os
import random
import socket
import threading
import time
import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta
from functools import reduce
from typing import TYPE_CHECKING, Any

from ...core import Decision, Job, Policies
from ...core.limits import QueueLimits
from ...core.prefetch import PrefetchPolicy, observe
from .. import outage
from ..context import JobContext
from ..executor import Executor
from ..hooks import Hooks
from ..ports import BadClaim, Claim, Clock, Jitter, JobQueue, JobStore, SystemClock
from ..registry import Registry
from ..retention import Pruner
from .async_jobs import DEFAULT_CONCURRENCY, AsyncJobs
from .attempt_runner import AttemptRunner, AttemptTracer
from .batch import BatchRunner
from .claiming import Claimer, JobBudget
from .heartbeat import Heartbeat
from .holder_writes import HolderWrites
from .idle import Idle
from .lease_keeper import ClockSkewError, LeaseKeeper, check_clock
from .reporting import Reporter, WorkerStats, add_stats
from .timeouts import AttemptGate, DeadlineRunner
from .watch import LoopWatch

if TYPE_CHECKING:  # SQL only: a Redis-only process never loads SQLAlchemy
    from ..tenancy import TenantScope

__all__ = ["Worker", "WorkerPool", "WorkerStats"]

log = logging.getLogger("conveyor.worker")


class Worker:
    """Processes jobs from one queue, in rounds: claim a batch, then for each job run,
    decide, execute, report (`conveyor.shell.worker.batch`).

    `run_once()` does one round (lease keeping when due, then one claim of up to
    `prefetch` jobs) and says how many jobs it claimed; `run()` loops until
    `stop()`; `drain()` runs until the queue has nothing due.
    """

    def __init__(
        self,
        queue: JobQueue,
        store: JobStore,
        registry: Registry,
        *,
        queue_name: str = "default",
        policies: Policies = Policies(),
        clock: Clock | None = None,
        jitter: Jitter = random.random,
        poll_interval_ms: int = 1000,
        promote_interval_ms: int | None = None,
        reclaim_interval_ms: int | None = None,
        heartbeat_interval_ms: int | None = None,
        worker_id: str | None = None,
        tenancy: TenantScope | None = None,
        executor: Executor | None = None,
        prefetch: int | str | PrefetchPolicy = 1,
        clock_check: bool = True,
        hooks: Hooks | None = None,
        pruner: Pruner | None = None,
        tracer: AttemptTracer | None = None,
        async_concurrency: int = DEFAULT_CONCURRENCY,
        limits: QueueLimits | None = None,
        job_budget: JobBudget | None = None,
    ) -> None:
        """`promote_interval_ms` is accepted for old configurations and unused: claims
        promote due jobs themselves. `clock_check=False` skips the comparison with the
        lease server's clock (for a manual clock replaying a fixed date in tests).
        `hooks` are called as jobs start, succeed, fail and are dead-lettered.
        `pruner` deletes finished records past their retention on its own interval.
        `tracer` (see `conveyor.shell.tracing`) runs each attempt in a `process` span.
        `async_concurrency` is how many `async def` handlers run at once on the event
        loop (see `conveyor.shell.worker.async_jobs`). `prefetch` is how many jobs one claim
        takes: a number, `"auto"` (batches sized to the jobs' running time, see
        `conveyor.core.prefetch`) or a `PrefetchPolicy`. `limits` are the queue's fair
        shares, caps and rates (see `conveyor.core.limits`): its claims then go through
        `LimitedJobQueue.dequeue_limited`, and a backend without it is refused here.
        `job_budget` bounds the jobs this worker (and those sharing it) claims in all.
        The heartbeat and reclaim intervals default to the lease policy's."""
        self.tracer, self.pruner = tracer, pruner
        self.hooks = hooks if hooks is not None else Hooks()
        self.queue, self.store, self.registry, self.queue_name = queue, store, registry, queue_name
        self.policies, self.clock = policies, clock or SystemClock()
        lease, self.jitter, self.poll_interval_ms = policies.lease, jitter, poll_interval_ms
        reclaim_ms = reclaim_interval_ms or lease.reclaim_every_ms
        self.reclaim_interval = timedelta(milliseconds=reclaim_ms)
        self.heartbeat_s = (heartbeat_interval_ms or lease.renew_every_ms) / 1000
        self.worker_id = worker_id or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.tenancy, self.prefetch_policy = tenancy, PrefetchPolicy.of(prefetch)
        self.prefetch = self.prefetch_policy.max_batch  # the largest batch one claim takes
        #: Running mean of a job's wall time here, which sizes adaptive batches.
        self.mean_job_ms: float | None = None
        self.executor = executor or Executor(queue, store, clock=self.clock)
        self.clock_check, self.limits = clock_check, limits
        self.lease_keeper = LeaseKeeper(
            queue, self.executor, self.clock, lease, clock_check=clock_check, hooks=self.hooks
        )
        self._stop, self._warned_empty, self._clock_checked = threading.Event(), False, False
        self.watch = LoopWatch()  # when this loop last progressed, for the watchdog
        self._heartbeat = Heartbeat(queue, self.clock, self.heartbeat_s, self.watch)
        #: Async handlers running on the event loop, their claims held until written.
        self._async = AsyncJobs(async_concurrency)
        #: Attempts with a timeout run here, in threads of their own.
        self.overruns = DeadlineRunner()
        self._reporter = Reporter(self.hooks)
        self._writes = HolderWrites(
            queue, self.executor, self._heartbeat, self._reporter, self.clock, policies.result
        )
        chore_at = (lambda: pruner.next_at(self.worker_id)) if pruner else None
        # A limited queue's claims (and a budget's) all go through the claimer.
        idle_options = (self._stop, limits is None and job_budget is None, self.watch, chore_at)
        self._idle = Idle(queue, queue_name, self.clock, poll_interval_ms, *idle_options)
        claim_options = (self.prefetch_policy, limits, self._idle, job_budget)
        self._claimer = Claimer(queue, queue_name, *claim_options)
        self._runner = AttemptRunner(
            queue, registry, tenancy=tenancy, tracer=tracer, overruns=self.overruns,
            progress=self._heartbeat.report, store=store,
        )
        self._batches = BatchRunner(
            clock=self.clock,
            policies=policies,
            jitter=jitter,
            prefetch=self.prefetch_policy,
            worker_id=self.worker_id,
            stop=self._stop,
            heartbeat=self._heartbeat,
            runner=self._runner,
            writes=self._writes,
            reporter=self._reporter,
            async_jobs=self._async,
            async_wait_s=self.heartbeat_s,
        )

    # ---- the loop ---------------------------------------------------------

    @property
    def stats(self) -> WorkerStats:
        return self._reporter.stats()

    def running(self) -> tuple[str, ...]:
        """The ids of the jobs this worker is running now (its started claims)."""
        return self._heartbeat.running()

    def stop(self) -> None:
        """Finish the current job, hand back prefetched ones, then return from `run()`."""
        self._stop.set()
        self._idle.end_wait()

    def give_up_claims(self, timeout_s: float) -> list[tuple[Claim, Job | None]]:
        """Stopping by force (`conveyor.shell.worker.forced_stop`): stop, and take every claim
        this worker holds, each with its started record (None if its handler had not
        begun), for the caller to hand back. The heartbeat no longer renews them."""
        self._stop.set()
        woken = self._idle.handed_over()
        taken = self._heartbeat.take_all(timeout_s)
        return [*taken, *((c, None) for c in woken if isinstance(c, Claim))]

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def warn_if_empty(self) -> None:
        if len(self.registry) == 0 and not self._warned_empty:
            self._warned_empty = True
            self._reporter.no_handlers(self.worker_id, self.queue_name)

    def check_clock(self) -> None:
        """Refuse to work (`ClockSkewError`) when this clock is more than a quarter lease
        off the clock of the server that holds the leases."""
        if self.clock_check:
            check_clock(self.queue, self.clock, self.policies.lease.lease_ms)

    def run(self) -> None:
        """Process jobs until `stop()` is called."""
        self.warn_if_empty()
        self._idle.worked()
        # While the server is away or full: one WARNING, one INFO, a capped backoff.
        server, away, bugs = outage.for_queue(self.queue), outage.Backoff(), outage.Throttle()
        with self._batches.async_let_go_on_exit():  # a Ctrl-C in a `run()` on the main thread
            while not self._stop.is_set():
                try:
                    if not self._clock_checked:
                        self.check_clock()  # a skewed clock raises: refuse to work
                        self._clock_checked = True
                    failures = server.failures
                    worked = self.run_once()
                except ClockSkewError:
                    raise
                except Exception as exc:
                    if server.failed(exc):
                        self._stop.wait(away.next())
                        continue
                    if bugs.first(exc):
                        log.exception("worker %s: round failed; carrying on", self.worker_id)
                    else:
                        log.debug("worker %s: round failed again: %r", self.worker_id, exc)
                    worked = 0
                else:
                    if not server.ok(failures):  # a write left to its lease: away or full
                        self._stop.wait(away.next())
                        continue
                    away.reset()
                if worked or self._stop.is_set():
                    self._idle.worked()
                    continue
                timeout = self._idle.timeout_s()
                if timeout <= 0:
                    continue
                if self._async.running:
                    # Async jobs in flight: wake as soon as one finishes (its write frees a
                    # slot); meanwhile look for new work only while a slot is free.
                    self._batches.wait_for_async(self._idle.async_wait_s(timeout, self._async.free))
                    continue
                self._idle.wait(timeout, self._claimer.size(self.mean_job_ms), server)
            # Claims handed over by a wake-up just as the worker stopped go back unstarted.
            self._writes.hand_back(self._idle.handed_over())
            # Stopping: async jobs still running are awaited and written (as a sync one).
            self._batches.finish_async()
            self._heartbeat.end()

    def _idle_timeout_s(self) -> float:  # how long an idle worker may wait now
        return self._idle.timeout_s()

    def held_back_for_s(self) -> float | None:
        """After a round that claimed nothing because the queue's caps or rates held its
        ready jobs back: how long to wait before claiming again (until the next rate
        token, at most a poll interval). None when nothing was held back."""
        return self._idle.held_back_for_s()

    def drain(self, *, max_jobs: int | None = None) -> int:
        """Run until nothing is due (reclaiming as it goes); returns jobs run. A limited
        queue's drain returns when its limits hold the rest back (`held_back_for_s`)."""
        self.warn_if_empty()
        done = 0
        with self._batches.async_let_go_on_exit():
            while max_jobs is None or done < max_jobs:
                budget = None if max_jobs is None else max_jobs - done
                worked = self.run_once(limit=budget)
                if not worked:
                    if not self._async.running:
                        break
                    self._batches.wait_for_async(self.heartbeat_s)
                    continue
                done += worked
            # Every async job this drain claimed is written before it returns.
            self._batches.finish_async()
        self._heartbeat.end()  # holding nothing now: its thread ends, not 5 s on
        return done

    def run_once(self, *, limit: int | None = None) -> int:
        """Lease keeping when due, then claim and process up to `prefetch` jobs (one by
        default). Returns how many were claimed: none while every async slot is busy."""
        now = self.clock.now()
        self.maintain(now)
        self._batches.conclude(self._async.finished())
        woken = self._idle.handed_over()
        if not woken and not self._async.free:
            return 0
        size = self._claimer.size(self.mean_job_ms)
        want = size if limit is None else max(1, min(size, limit))
        claims = woken or self._claimer.take(now, want)
        if claims:
            began = time.monotonic()
            self.process_claims(claims)
            took_ms = (time.monotonic() - began) * 1000
            self.mean_job_ms = observe(self.mean_job_ms, took_ms, len(claims))
        return len(claims)

    def maintain(self, now: datetime) -> None:
        """Reclaim abandoned claims, on the reclaim interval; prune finished records, on
        the pruner's."""
        if self.lease_keeper.due(now, self.reclaim_interval):
            self.reclaim_abandoned(now)
        if self.pruner is not None:
            self.pruner.maybe_prune(now, by=self.worker_id)

    def reclaim_abandoned(self, now: datetime) -> int:
        """Return claims whose lease expired to ready; dead-letter poison pills."""
        reclaimed, buried = self.lease_keeper.reclaim_abandoned(now)
        self._reporter.reclaimed(reclaimed, buried)
        return reclaimed + buried

    # ---- claims -------------------------------------------------------------

    def process(self, claim: Claim | BadClaim) -> Decision | None:
        """Run one claimed job to a decision and carry it out. Returns the decision."""
        return self.process_claims([claim])[0]

    def process_claims(self, claims: Sequence[Claim | BadClaim]) -> list[Decision | None]:
        """Run claimed jobs in order and carry out each decision (see
        `conveyor.shell.worker.batch`); an exception cannot drop the finished outcomes."""
        return self._batches.run_batch(claims)

    def decide_claim(self, claim: Claim | BadClaim) -> Decision | None:
        """Run the handler of one claimed job and ask the core what to do. An
        undecodable claim is dead-lettered here and gives None; so does a job whose
        async handler was started on the event loop (decided once it finishes)."""
        return self._batches.decide_claim(claim)

    def job_context(self, job: Job, deadline: datetime | None, gate: AttemptGate) -> JobContext:
        """The context a handler of `job` is given (see `conveyor.shell.worker.attempt_runner`)."""
        return self._runner.context(job, deadline, gate)


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
            worker._warned_empty = worker._clock_checked = True
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
            left = ", ".join(self.running()) or "none known"
            log.warning(
                "%d worker(s) on %r still busy after %.1fs; their jobs are left to the lease: "
                "%s; each returns when its lease runs out, charged as an expired lease "
                "(max_reclaims); a drain timeout (conveyor worker --drain-timeout) hands "
                "them back at once, uncharged",
                *(len(alive), self.queue_name, grace_s, left),
            )
        self._threads = alive
        return not alive

    @property
    def stats(self) -> WorkerStats:
        return reduce(add_stats, (worker.stats for worker in self.workers), WorkerStats())
