"""Workers: claim a job, run its handler, ask the core, hand the answer to the executor.

A `Worker` polls one queue. Between claims it promotes due scheduled jobs and
reclaims abandoned claims, each on its own interval. While a handler runs, a
heartbeat renews the claim's lease so a long job is not reclaimed under it.
The worker decides nothing itself: every verdict comes from `conveyor.core`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import socket
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

import attrs
from returns.pipeline import is_successful

from ..core import (
    Complete,
    DeadLetter,
    Decision,
    ErrorInfo,
    Failed,
    Job,
    JobStatus,
    NoHandler,
    Outcome,
    Policies,
    Priority,
    dead_letter,
    decide,
    decide_reclaim,
    needs_renewal,
    reclaim_cutoff,
    start,
    tenant_verdict,
    undecodable,
)
from ..core.frozen import FrozenMap, thaw
from .executor import Executor
from .ports import (
    BadClaim,
    BatchingJobQueue,
    Claim,
    Clock,
    Jitter,
    JobQueue,
    JobStore,
    SystemClock,
)
from .registry import Registry, run_handler
from .tenancy import Tenant, TenantScope

log = logging.getLogger("conveyor.worker")


@attrs.frozen(slots=True)
class WorkerStats:
    """What a worker has done so far (for progress and status)."""

    processed: int = 0
    completed: int = 0
    retried: int = 0
    dead_lettered: int = 0
    requeued: int = 0
    reclaimed: int = 0
    promoted: int = 0
    lost_claims: int = 0


#: After the last job, a worker without wake-ups polls every FAST_POLL_S for
#: FAST_POLL_WINDOW_S, so a burst's next job is picked up in milliseconds.
FAST_POLL_S = 0.002
FAST_POLL_WINDOW_S = 0.25

_COUNTERS = {
    "Complete": "completed",
    "Retry": "retried",
    "DeadLetter": "dead_lettered",
    "Requeue": "requeued",
}


class _Heartbeat:
    """Renews the lease of the claim being worked on, every `interval_s`.

    One long-lived thread per worker (not one per job): `watching(claim)` makes
    `claim` the one to renew while the handler runs.
    """

    def __init__(self, queue: JobQueue, clock: Clock, interval_s: float) -> None:
        self._queue, self._clock, self._interval = queue, clock, interval_s
        self._lock = threading.Lock()
        self._claim: Claim | None = None
        self._since = 0.0
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    @contextlib.contextmanager
    def watching(self, claim: Claim) -> Iterator[None]:
        with self._lock:
            self._claim, self._since = claim, time.monotonic()
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._beat, daemon=True, name="conveyor-heartbeat"
                )
                self._thread.start()
        try:
            yield
        finally:
            with self._lock:  # waits for a renewal in progress, so none runs after this
                self._claim = None

    def _beat(self) -> None:
        while True:
            self._wake.wait(self._interval / 4)
            with self._lock:
                claim = self._claim
                if claim is None or time.monotonic() - self._since < self._interval:
                    continue
                self._since = time.monotonic()
                try:
                    if not self._queue.extend(claim, self._clock.now()):
                        log.warning("lease on job %s was lost while running", claim.job.id)
                        self._claim = None
                except Exception:
                    log.warning("heartbeat for job %s failed", claim.job.id, exc_info=True)


class Worker:
    """Processes jobs from one queue.

    `run_once()` does one round (maintenance, then at most one job) and says
    whether a job was processed; `run()` loops until `stop()`; `drain()` runs
    until the queue has nothing due.
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
        promote_interval_ms: int = 5000,
        reclaim_interval_ms: int | None = None,
        heartbeat_interval_ms: int | None = None,
        worker_id: str | None = None,
        tenancy: TenantScope | None = None,
        executor: Executor | None = None,
        prefetch: int = 1,
    ) -> None:
        self.queue, self.store, self.registry = queue, store, registry
        self.queue_name = queue_name
        self.policies = policies
        self.clock = clock or SystemClock()
        self.jitter = jitter
        self.poll_interval_ms = poll_interval_ms
        self.promote_interval = timedelta(milliseconds=promote_interval_ms)
        lease = policies.lease.lease_ms
        self.reclaim_interval = timedelta(milliseconds=reclaim_interval_ms or max(lease // 2, 1))
        self.heartbeat_s = (heartbeat_interval_ms or max(lease // 3, 1)) / 1000
        self.worker_id = worker_id or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.tenancy = tenancy
        if prefetch < 1:
            raise ValueError("prefetch must be >= 1")
        self.prefetch = prefetch
        self.executor = executor or Executor(queue, store, clock=self.clock)
        self._stop = threading.Event()
        self._last_promote: datetime | None = None
        self._last_reclaim: datetime | None = None
        self._counts: Counter[str] = Counter()
        self._heartbeat = _Heartbeat(queue, self.clock, self.heartbeat_s)
        self._warned_empty = False

    # ---- the loop ---------------------------------------------------------

    @property
    def stats(self) -> WorkerStats:
        return WorkerStats(**self._counts)

    def stop(self) -> None:
        """Finish the current job, then return from `run()`."""
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def warn_if_empty(self) -> None:
        if len(self.registry) == 0 and not self._warned_empty:
            self._warned_empty = True
            log.warning(
                "worker %s on queue %r started with NO handlers registered: every job it "
                "claims will be parked for another worker and finally dead-lettered as "
                "no-handler. Register handlers before starting workers.",
                self.worker_id,
                self.queue_name,
            )

    def run(self) -> None:
        """Process jobs until `stop()` is called."""
        self.warn_if_empty()
        wait = getattr(self.queue, "wait_for_work", None)
        last_work = time.monotonic()
        while not self._stop.is_set():
            try:
                worked = self.run_once()
            except Exception:
                log.exception("worker %s: round failed; carrying on", self.worker_id)
                worked = 0
            if worked or self._stop.is_set():
                last_work = time.monotonic()
                continue
            timeout = self.poll_interval_ms / 1000
            if wait is not None:
                began = time.monotonic()
                try:
                    if wait(self.queue_name, timeout) or time.monotonic() - began > timeout / 2:
                        continue  # woken, or waited out the interval on the signal
                except Exception:
                    log.warning("waiting for work failed", exc_info=True)
            # No wake-up signal here: poll fast for a moment after work, then ease off.
            recent = time.monotonic() - last_work < FAST_POLL_WINDOW_S
            self._stop.wait(min(FAST_POLL_S, timeout) if recent else timeout)

    def drain(self, *, max_jobs: int | None = None) -> int:
        """Run until nothing is due (promoting and reclaiming as it goes). Returns jobs run."""
        self.warn_if_empty()
        done = 0
        self._last_promote = None
        while max_jobs is None or done < max_jobs:
            budget = None if max_jobs is None else max_jobs - done
            worked = self.run_once(limit=budget)
            if not worked:
                # Before calling it idle, look once more for jobs that came due.
                self._last_promote = None
                worked = self.run_once(limit=budget)
                if not worked:
                    break
            done += worked
        return done

    def run_once(self, *, limit: int | None = None) -> int:
        """Maintenance when due, then claim and process up to `prefetch` jobs (one by
        default). Returns how many were claimed."""
        now = self.clock.now()
        self.maintain(now)
        want = self.prefetch if limit is None else max(1, min(self.prefetch, limit))
        if want > 1 and isinstance(self.queue, BatchingJobQueue):
            claims = list(self.queue.dequeue_many(self.queue_name, now, want))
        else:
            claim = self.queue.dequeue(self.queue_name, now)
            claims = [] if claim is None else [claim]
        if len(claims) == 1:
            self.process(claims[0])
        elif claims:
            self._process_batch(claims)
        return len(claims)

    def _process_batch(self, claims: list[Claim | BadClaim]) -> None:
        """Run prefetched claims in order; completed and dead-lettered ones are finished
        together in one round trip at the end (each still atomic and fenced)."""
        finished: list[tuple[Claim, Decision]] = []
        for i, claim in enumerate(claims):
            now = self.clock.now()
            if self._stop.is_set() and isinstance(claim, Claim):
                # Stopping: hand the claims not yet started straight back to ready.
                for rest in claims[i:]:
                    if isinstance(rest, Claim):
                        self.queue.replace(rest, rest.job)
                break
            # A claim old enough that a reclaimer might be near is renewed (and checked) first.
            lease = self.policies.lease.lease_ms
            stale = isinstance(claim, Claim) and needs_renewal(claim.locked_at, lease, now)
            if stale and not self.queue.extend(claim, now):
                self._counts["lost_claims"] += 1
                continue
            decision = self.decide_claim(claim)
            if decision is None or not isinstance(claim, Claim):
                continue
            if isinstance(decision, Complete | DeadLetter) and self.executor.batches_finish:
                finished.append((claim, decision))
            else:
                self._carry_out(claim, decision)
        for ok, (_, decision) in zip(self.executor.finish_many(finished), finished, strict=True):
            self._counted(ok, decision)

    def maintain(self, now: datetime) -> None:
        """Promote due scheduled jobs and reclaim abandoned claims, each on its interval."""
        if self._last_promote is None or now - self._last_promote >= self.promote_interval:
            self._last_promote = now
            self._counts["promoted"] += self.queue.promote_due(now)
        if self._last_reclaim is None or now - self._last_reclaim >= self.reclaim_interval:
            self._last_reclaim = now
            self.reclaim_abandoned(now)

    def reclaim_abandoned(self, now: datetime) -> int:
        """Return claims whose lease expired to ready; dead-letter poison pills."""
        cutoff = reclaim_cutoff(now, self.policies.lease.lease_ms)
        moved = 0
        for claim in self.queue.abandoned(cutoff):
            started = start(claim.job, now)
            if not is_successful(started):
                # A forged record (already terminal) cannot be reclaimed: dead-letter it.
                self._dead_letter_bad(_bad(claim, str(started.failure()), now), now, claim=claim)
                continue
            job = started.unwrap()
            decision = decide_reclaim(job, now, self.policies.lease)
            if self.executor.carry_out(claim, decision, cutoff=cutoff):
                moved += 1
                if isinstance(decision, DeadLetter):
                    self._counts["dead_lettered"] += 1
                    log.warning("job %s dead-lettered: %s", job.id, decision.error.message)
                else:
                    self._counts["reclaimed"] += 1
        return moved

    # ---- one job ------------------------------------------------------------

    def process(self, claim: Claim | BadClaim) -> Decision | None:
        """Run one claimed job to a decision and carry it out. Returns the decision."""
        decision = self.decide_claim(claim)
        if decision is not None and isinstance(claim, Claim):
            self._carry_out(claim, decision)
        return decision

    def decide_claim(self, claim: Claim | BadClaim) -> Decision | None:
        """Run the handler of one claimed job and ask the core what to do. An
        undecodable claim is dead-lettered here and gives None."""
        now = self.clock.now()
        if isinstance(claim, BadClaim):
            self._dead_letter_bad(claim, now)
            return None
        started = start(claim.job, now)
        if not is_successful(started):
            self._dead_letter_bad(_bad(claim, str(started.failure()), now), now, claim=claim)
            return None
        job = started.unwrap()
        outcome = self._outcome(claim, job)
        self._counts["processed"] += 1
        return decide(job, outcome, self.clock.now(), self.policies, self.jitter())

    def _carry_out(self, claim: Claim, decision: Decision) -> None:
        self._counted(self.executor.carry_out(claim, decision), decision)

    def _counted(self, ok: bool, decision: Decision) -> None:
        if ok:
            self._count(decision)
        else:
            self._counts["lost_claims"] += 1

    def _outcome(self, claim: Claim, job: Job) -> Outcome:
        entry = self.registry.registration(job.job_type)
        if entry is None:
            return NoHandler()
        tenant: Tenant | None = None
        exists = True
        if job.tenant_id is not None and self.tenancy is not None:
            try:
                tenant = self.tenancy.resolve(job.tenant_id)
            except Exception as exc:
                return Failed(ErrorInfo("tenant-resolver-error", str(exc)[:500], retryable=True))
            exists = tenant is not None
        verdict = tenant_verdict(job, tenant_scoped=entry.tenant_scoped, tenant_exists=exists)
        if verdict is not None:
            return verdict
        with self._heartbeat.watching(claim):
            if entry.tenant_scoped:
                if self.tenancy is None or tenant is None:
                    message = "a tenant-scoped handler needs tenancy configured on the worker"
                    return Failed(ErrorInfo("tenancy-not-configured", message, retryable=False))
                return self.tenancy.run(entry.handler, thaw(job.args), tenant)
            # A plain copy: handlers may json.dumps or mutate it without touching the record.
            return run_handler(entry.handler, thaw(job.args))

    def _count(self, decision: Decision) -> None:
        counter = _COUNTERS.get(type(decision).__name__)
        if counter is not None:
            self._counts[counter] += 1

    def _dead_letter_bad(
        self, bad: BadClaim, now: datetime, *, claim: Claim | None = None
    ) -> Decision | None:
        """Record an undecodable payload as a `decode-error` dead letter, then release it."""
        error = undecodable(bad.job_id, bad.reason)
        log.error("dead-lettering undecodable job %s: %s", bad.job_id, bad.reason)
        placeholder = _placeholder(bad, now)
        decision = dead_letter(placeholder, error, now)
        try:
            self.store.record(decision.job)
        except Exception:
            log.exception("could not record undecodable job %s; left to its lease", bad.job_id)
            return None
        self.queue.ack(claim if claim is not None else bad)
        self._counts["dead_lettered"] += 1
        self._counts["processed"] += 1
        return decision


def _bad(claim: Claim, reason: str, now: datetime) -> BadClaim:
    return BadClaim(str(claim.job.id), claim.token, claim.queue, "", reason, now)


def _placeholder(bad: BadClaim, now: datetime) -> Job:
    """A job record standing for an undecodable payload in the dead letters."""
    try:
        job_id = UUID(bad.job_id)
    except ValueError:
        job_id = uuid.uuid5(uuid.NAMESPACE_URL, f"conveyor:undecodable:{bad.token}")
    return Job(
        id=job_id,
        job_type="undecodable",
        # Kept for inspection as valid text: undecodable bytes become "?".
        args=FrozenMap({"raw_payload": bad.payload[:4096].encode("utf-8", "replace").decode()}),
        queue=bad.queue,
        priority=Priority.NORMAL,
        status=JobStatus.RUNNING,
        created_at=now,
        run_at=now,
        max_retries=0,
        attempt=1,
        started_at=now,
    )


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
        for i, worker in enumerate(self.workers):
            worker._warned_empty = True
            thread = threading.Thread(
                target=worker.run, name=f"conveyor-{self.queue_name}-{i}", daemon=True
            )
            thread.start()
            self._threads.append(thread)

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
