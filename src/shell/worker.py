"""Workers: claim jobs, run their handlers, ask the core, hand the answers to the executor.

A `Worker` polls one queue. Claims promote the queue's due jobs themselves, so a
due job is claimable at its `run_at`; an idle worker sleeps no longer than until
the next one comes due. Between claims, the lease keeper returns abandoned
claims to ready on its own interval. Every claim the worker holds (prefetched,
running, finished but not yet written) is kept leased by its heartbeat, and
every write is a decision carried out by the executor: the worker decides
nothing itself and writes nothing directly.
"""

from __future__ import annotations

import inspect
import logging
import os
import random
import socket
import threading
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import attrs
from returns.pipeline import is_successful

from ..core import (
    Complete,
    DeadLetter,
    Decision,
    ErrorInfo,
    Failed,
    Job,
    NoHandler,
    Outcome,
    Policies,
    attempt_deadline,
    decide,
    decide_hand_back,
    start,
    tenant_verdict,
    timeout_error,
)
from ..core.frozen import thaw
from ..core.limits import QueueLimits
from ..core.prefetch import PrefetchPolicy, batch_size, observe, should_hand_back
from . import outage
from .async_jobs import DEFAULT_CONCURRENCY, AsyncJobs, Finished, awaitable_of
from .cancellation import cancel_requested, settle_refused
from .context import JobContext
from .executor import Executor
from .heartbeat import Heartbeat
from .hooks import Hooks
from .lease_keeper import ClockSkewError, LeaseKeeper, check_clock
from .logs import log_dead_letter, log_failed_attempt
from .placeholder import undecodable_dead_letter
from .ports import (
    BadClaim,
    BatchingJobQueue,
    Claim,
    Clock,
    Jitter,
    JobQueue,
    JobStore,
    LimitedJobQueue,
    SystemClock,
)
from .registry import Registry, catching, caught, run_handler
from .retention import Pruner
from .tenancy import Tenant, TenantScope
from .timeouts import AttemptGate, DeadlineRunner

if TYPE_CHECKING:
    from .tracing import JobTracer

log = logging.getLogger("conveyor.worker")


def limits_refusal(queue: object) -> str:
    """The one line refusing limits on a queue that cannot claim under them."""
    return f"limits are not supported by {type(queue).__name__}"


def _prefetch_policy(prefetch: int | str | PrefetchPolicy) -> PrefetchPolicy:
    if isinstance(prefetch, PrefetchPolicy):
        return prefetch
    if prefetch == "auto":
        return PrefetchPolicy()
    if isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 1:
        raise ValueError(f'prefetch must be "auto" or >= 1, got {prefetch!r}')
    return PrefetchPolicy.fixed(prefetch)


@attrs.frozen(slots=True)
class WorkerStats:
    """What a worker has done so far (for progress and status)."""

    processed: int = 0
    completed: int = 0
    retried: int = 0
    dead_lettered: int = 0
    requeued: int = 0
    reclaimed: int = 0
    handed_back: int = 0
    lost_claims: int = 0
    #: Attempts abandoned at their deadline and recorded as `Timeout` failures.
    timed_out: int = 0
    #: Claimed jobs recorded cancelled because a cancel was requested while they ran.
    cancelled: int = 0


#: After the last job, a worker without wake-ups polls every FAST_POLL_S for
#: FAST_POLL_WINDOW_S, so a burst's next job is picked up in milliseconds.
FAST_POLL_S = 0.002
FAST_POLL_WINDOW_S = 0.25
#: While async jobs run and a slot is free, the worker looks for new work this often.
ASYNC_POLL_S = 0.05

_COUNTERS = {
    "Complete": "completed",
    "Retry": "retried",
    "DeadLetter": "dead_lettered",
    "Requeue": "requeued",
    "HandBack": "handed_back",
    "CancelClaim": "cancelled",
}


class Worker:
    """Processes jobs from one queue.

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
        tracer: JobTracer | None = None,
        async_concurrency: int = DEFAULT_CONCURRENCY,
        limits: QueueLimits | None = None,
    ) -> None:
        """`promote_interval_ms` is accepted for old configurations and unused: claims
        promote due jobs themselves. `clock_check=False` skips the comparison with the
        lease server's clock (for a manual clock replaying a fixed date in tests).
        `hooks` are called as jobs start, succeed, fail and are dead-lettered.
        `pruner` deletes finished records past their retention on its own interval.
        `tracer` (see `conveyor.shell.tracing`) runs each attempt in a `process` span.
        `async_concurrency` is how many `async def` handlers run at once on the event
        loop (see `conveyor.shell.async_jobs`). `prefetch` is how many jobs one claim
        takes: a number, `"auto"` (batches sized to the jobs' running time, see
        `conveyor.core.prefetch`) or a `PrefetchPolicy`. `limits` are the queue's fair
        shares, caps and rates (see `conveyor.core.limits`): its claims then go through
        `LimitedJobQueue.dequeue_limited`, and a backend without it is refused here."""
        self.tracer = tracer
        self.hooks = hooks if hooks is not None else Hooks()
        self.pruner = pruner
        self.queue, self.store, self.registry = queue, store, registry
        self.queue_name = queue_name
        self.policies = policies
        self.clock = clock or SystemClock()
        self.jitter = jitter
        self.poll_interval_ms = poll_interval_ms
        lease = policies.lease.lease_ms
        self.reclaim_interval = timedelta(milliseconds=reclaim_interval_ms or max(lease // 2, 1))
        self.heartbeat_s = (heartbeat_interval_ms or max(lease // 3, 1)) / 1000
        self.worker_id = worker_id or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.tenancy = tenancy
        self.prefetch_policy = _prefetch_policy(prefetch)
        #: The largest batch one claim may take.
        self.prefetch = self.prefetch_policy.max_batch
        #: Running mean of a job's wall time here, which sizes adaptive batches.
        self.mean_job_ms: float | None = None
        self.executor = executor or Executor(queue, store, clock=self.clock)
        self.clock_check = clock_check
        self.lease_keeper = LeaseKeeper(
            queue,
            self.executor,
            self.clock,
            policies.lease,
            clock_check=clock_check,
            hooks=self.hooks,
        )
        self._stop = threading.Event()
        self._last_reclaim: datetime | None = None
        self._counts: Counter[str] = Counter()
        self._heartbeat = Heartbeat(queue, self.clock, self.heartbeat_s)
        #: Claims started under a new token in the batch being processed (old token -> new).
        self._started: dict[str, Claim] = {}
        #: Claims a queue handed over with its wake-up (`_wait`), run by the next round.
        self._woken: list[Claim | BadClaim] = []
        #: Failed attempts decided but not yet written, by job id: the error and the
        #: exception behind it, reported once the decision is carried out.
        self._failures: dict[uuid.UUID, tuple[ErrorInfo, BaseException | None]] = {}
        #: Jobs run but not yet written, by id: the running job and its outcome, from
        #: which a cancel is recorded if a cancel request refuses the outcome's write.
        self._ran: dict[uuid.UUID, tuple[Job, Outcome]] = {}
        self._warned_empty = False
        self._clock_checked = False
        #: Async handlers running on the event loop, their claims held until written.
        self._async = AsyncJobs(async_concurrency)
        #: Attempts with a timeout run here, in threads of their own.
        self.overruns = DeadlineRunner()
        if limits is not None and not isinstance(queue, LimitedJobQueue):
            raise ValueError(limits_refusal(queue))
        self.limits = limits
        #: Set when the last limited claim took nothing while caps or rates held ready
        #: jobs back: the worker then sleeps (until `_throttled_until` at most).
        self._held_back = False
        self._throttled_until: datetime | None = None

    # ---- the loop ---------------------------------------------------------

    @property
    def stats(self) -> WorkerStats:
        return WorkerStats(**self._counts)

    def running(self) -> tuple[str, ...]:
        """The ids of the jobs this worker is running now (its started claims)."""
        return self._heartbeat.running()

    def stop(self) -> None:
        """Finish the current job, hand back prefetched ones, then return from `run()`."""
        self._stop.set()

    def give_up_claims(self, timeout_s: float) -> list[tuple[Claim, Job | None]]:
        """Stopping by force (`conveyor.shell.forced_stop`): stop, and take every claim
        this worker holds, each with its started record (None if its handler had not
        begun), for the caller to hand back. The heartbeat no longer renews them."""
        self._stop.set()
        woken, self._woken = self._woken, []
        taken = self._heartbeat.take_all(timeout_s)
        return [*taken, *((c, None) for c in woken if isinstance(c, Claim))]

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

    def check_clock(self) -> None:
        """Refuse to work (`ClockSkewError`) when this clock is more than a quarter lease
        off the clock of the server that holds the leases."""
        if self.clock_check:
            check_clock(self.queue, self.clock, self.policies.lease.lease_ms)

    def run(self) -> None:
        """Process jobs until `stop()` is called."""
        self.warn_if_empty()
        wait = getattr(self.queue, "wait_for_work", None)
        last_work = time.monotonic()
        # While the server is away: one WARNING and one INFO for the process, and a
        # capped backoff here instead of a traceback per poll.
        server, away, bugs = outage.for_queue(self.queue), outage.Backoff(), outage.Throttle()
        while not self._stop.is_set():
            try:
                if not self._clock_checked:
                    self.check_clock()  # a skewed clock raises: refuse to work
                    self._clock_checked = True
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
                server.ok()
                away.reset()
            if worked or self._stop.is_set():
                last_work = time.monotonic()
                continue
            timeout = self._idle_timeout_s()
            if timeout <= 0:
                continue
            if self._async.running:
                # Async jobs in flight: wake as soon as one finishes (its write frees a
                # slot); meanwhile poll for new work only while a slot is free.
                idle = min(timeout, ASYNC_POLL_S) if self._async.free else timeout
                self._conclude(self._async.wait(idle))
                continue
            if self._held_back:
                # Ready jobs wait for a cap slot or a rate token: a wake-up would come
                # at once, so sleep to the next token (or one poll interval).
                self._stop.wait(timeout)
                continue
            if wait is not None:
                began = time.monotonic()
                try:
                    if self._wait(wait, timeout) or time.monotonic() - began > timeout / 2:
                        continue  # woken, or waited out the interval on the signal
                except Exception as exc:
                    if not server.failed(exc):
                        log.warning("waiting for work failed", exc_info=True)
            # No wake-up signal here: poll fast for a moment after work, then ease off.
            recent = time.monotonic() - last_work < FAST_POLL_WINDOW_S
            self._stop.wait(min(FAST_POLL_S, timeout) if recent else timeout)
        # Claims handed over by a wake-up just as the worker stopped go back unstarted.
        woken, self._woken = self._woken, []
        self._hand_back(woken)
        # Stopping: async jobs still running are awaited and written, as a stopping
        # worker finishes its sync job.
        while self._async.running:
            self._conclude(self._async.wait(self.heartbeat_s))

    def _wait(self, wait: Any, timeout: float) -> bool:
        """Block until work may be ready (True) or `timeout` passes. A queue that claims
        in the wake-up's own round trip (`wait_and_dequeue`) hands its claims over here;
        the next `run_once` runs them, so an idle worker picks a job up in one round trip."""
        claim_on_wake = getattr(self.queue, "wait_and_dequeue", None)
        if claim_on_wake is None or self.limits is not None:  # limited claims go one way
            return bool(wait(self.queue_name, timeout))
        size = batch_size(self.prefetch_policy, self.mean_job_ms)
        want = size if isinstance(self.queue, BatchingJobQueue) else 1
        self._woken = list(claim_on_wake(self.queue_name, self.clock.now(), want, timeout))
        return True

    def _idle_timeout_s(self) -> float:
        """How long an idle worker may wait: the poll interval, or less when a parked job
        of this queue comes due sooner (so retries and delays start on time)."""
        timeout = self.poll_interval_ms / 1000
        if self._throttled_until is not None:
            left = (self._throttled_until - self.clock.now()).total_seconds()
            timeout = min(timeout, max(0.0, left))
        try:
            due = self.queue.next_due(self.queue_name)
        except Exception:
            log.debug("next_due failed", exc_info=True)
            return timeout
        if due is None:
            return timeout
        return min(timeout, max(0.0, (due - self.clock.now()).total_seconds()))

    def held_back_for_s(self) -> float | None:
        """After a round that claimed nothing because the queue's caps or rates held its
        ready jobs back: how long to wait before claiming again (until the next rate
        token, at most a poll interval). None when nothing was held back."""
        return self._idle_timeout_s() if self._held_back else None

    def drain(self, *, max_jobs: int | None = None) -> int:
        """Run until nothing is due (reclaiming as it goes). Returns jobs run. On a
        limited queue it claims under the limits and returns when they hold the rest
        back (`held_back_for_s` then says for how long); `Runtime.drain` waits."""
        self.warn_if_empty()
        done = 0
        while max_jobs is None or done < max_jobs:
            budget = None if max_jobs is None else max_jobs - done
            worked = self.run_once(limit=budget)
            if not worked:
                if not self._async.running:
                    break
                self._conclude(self._async.wait(self.heartbeat_s))
                continue
            done += worked
        # Every async job this drain claimed is written before it returns.
        while self._async.running:
            self._conclude(self._async.wait(self.heartbeat_s))
        return done

    def run_once(self, *, limit: int | None = None) -> int:
        """Lease keeping when due, then claim and process up to `prefetch` jobs (one by
        default). Returns how many were claimed: none while every async slot is busy."""
        now = self.clock.now()
        self.maintain(now)
        self._conclude(self._async.finished())
        woken, self._woken = self._woken, []
        if not woken and not self._async.free:
            return 0
        size = batch_size(self.prefetch_policy, self.mean_job_ms)
        want = size if limit is None else max(1, min(size, limit))
        if woken:
            claims = woken
        elif self.limits is not None:
            assert isinstance(self.queue, LimitedJobQueue)  # checked at construction
            got = self.queue.dequeue_limited(self.queue_name, now, want, self.limits)
            claims = list(got.claims)
            self._held_back = got.held_back and not claims
            self._throttled_until = got.wait_until if self._held_back else None
        elif want > 1 and isinstance(self.queue, BatchingJobQueue):
            claims = list(self.queue.dequeue_many(self.queue_name, now, want))
        else:
            claim = self.queue.dequeue(self.queue_name, now)
            claims = [] if claim is None else [claim]
        if claims:
            began = time.monotonic()
            self.process_claims(claims)
            took_ms = (time.monotonic() - began) * 1000
            self.mean_job_ms = observe(self.mean_job_ms, took_ms, len(claims))
        return len(claims)

    def maintain(self, now: datetime) -> None:
        """Reclaim abandoned claims, on the reclaim interval; prune finished records, on
        the pruner's."""
        if self._last_reclaim is None or now - self._last_reclaim >= self.reclaim_interval:
            self._last_reclaim = now
            self.reclaim_abandoned(now)
        if self.pruner is not None:
            self.pruner.maybe_prune(now)

    def reclaim_abandoned(self, now: datetime) -> int:
        """Return claims whose lease expired to ready; dead-letter poison pills."""
        reclaimed, buried = self.lease_keeper.reclaim_abandoned(now)
        self._counts["reclaimed"] += reclaimed
        self._counts["dead_lettered"] += buried
        return reclaimed + buried

    # ---- claims -------------------------------------------------------------

    def process(self, claim: Claim | BadClaim) -> Decision | None:
        """Run one claimed job to a decision and carry it out. Returns the decision."""
        return self.process_claims([claim])[0]

    def process_claims(self, claims: Sequence[Claim | BadClaim]) -> list[Decision | None]:
        """Run claimed jobs in order and carry out each decision.

        Completed and dead-lettered jobs are finished together in one round trip at the
        end (each still atomic and fenced); until then the heartbeat keeps their claims,
        like the ones waiting their turn, leased. Whatever happens in between, the
        finished outcomes are written: an exception cannot drop them.
        """
        held = [c for c in claims if isinstance(c, Claim)]
        self._heartbeat.hold(held)
        decisions: list[Decision | None] = [None] * len(claims)
        finished: list[tuple[Claim, Decision]] = []
        began = time.monotonic()
        try:
            for i, claim in enumerate(claims):
                if self._stop.is_set() and len(claims) > 1:
                    self._hand_back(claims[i:])
                    break
                elapsed_ms = (time.monotonic() - began) * 1000
                if should_hand_back(self.prefetch_policy, elapsed_ms, len(claims) - i):
                    # A slow job held up the batch: let other workers take the rest.
                    self._hand_back(claims[i:])
                    break
                decisions[i] = decision = self._run_claim(claim)
                if decision is None or not isinstance(claim, Claim):
                    continue
                if isinstance(decision, Complete | DeadLetter) and self.executor.batches_finish:
                    finished.append((self._current(claim), decision))
                else:
                    self._carry_out(self._current(claim), decision)
        finally:
            self._finish_all(finished)
            # Claims handed to the event loop stay leased until their outcome is written.
            self._heartbeat.release(c for c in held if not self._async.holds(c))
            self._heartbeat.release(c for c in self._started.values() if not self._async.holds(c))
            self._started.clear()
            self._failures.clear()
            self._ran.clear()
        return decisions

    def _current(self, claim: Claim) -> Claim:
        return self._started.get(claim.token, claim)

    def _hand_back(self, rest: Sequence[Claim | BadClaim]) -> None:
        """Stopping: the claims not yet started go straight back to ready."""
        for claim in rest:
            if isinstance(claim, Claim):
                self._carry_out(claim, decide_hand_back(claim.job, self.clock.now()))

    def _run_claim(self, claim: Claim | BadClaim) -> Decision | None:
        """Start one claim (renewing or marking it first where needed), run its
        handler and ask the core. None when the claim was lost before it started."""
        if isinstance(claim, BadClaim):
            self._dead_letter_bad(claim)
            return None
        if self._heartbeat.is_lost(claim):
            self._counts["lost_claims"] += 1
            return None
        lease_s = self.policies.lease.lease_ms / 1000
        if not self._heartbeat.renewed_within(claim, lease_s / 2) and not self._heartbeat.renew(
            claim
        ):
            # It waited long enough that a reclaimer may have taken it: never start it.
            self._counts["lost_claims"] += 1
            return None
        if not claim.started and claim.job.metadata.prefetch_reclaims > 0:
            # This job was in a batch whose worker died: it may be the one that killed
            # it, so its start is written first and a second crash counts against it.
            assert isinstance(self.queue, BatchingJobQueue)  # only batches prefetch
            begun = self.queue.start_claim(claim, self.clock.now())
            if begun is None:
                self._counts["lost_claims"] += 1
                return None
            self._heartbeat.swap(claim, begun)
            self._started[claim.token] = begun
            claim = begun
        return self.decide_claim(claim)

    def decide_claim(self, claim: Claim | BadClaim) -> Decision | None:
        """Run the handler of one claimed job and ask the core what to do. An
        undecodable claim is dead-lettered here and gives None; so does a job whose
        async handler was started on the event loop (decided once it finishes)."""
        now = self.clock.now()
        if isinstance(claim, BadClaim):
            self._dead_letter_bad(claim)
            return None
        started = start(claim.job, now, self.worker_id)
        if not is_successful(started):
            bad = BadClaim(
                str(claim.job.id), claim.token, claim.queue, "", str(started.failure()), now
            )
            self._dead_letter_bad(bad, claim=claim)
            return None
        job = started.unwrap()
        self._heartbeat.begin(claim, job)
        self.hooks.started(job)
        timeout_ms = self.registry.timeout_ms(job.job_type, job.timeout_ms)
        gate = AttemptGate()
        context = self.job_context(job, attempt_deadline(now, timeout_ms), gate)

        def attempt(job: Job) -> Outcome:
            entry = self.registry.registration(job.job_type)
            if (
                timeout_ms is None
                or entry is None
                # A child process is killed at the deadline, and a coroutine is bounded
                # on the event loop: neither leaves a thread to abandon.
                or entry.execution == "process"
                or inspect.iscoroutinefunction(entry.handler)
            ):
                return self._outcome(job, context, gate, timeout_ms)
            return self._bounded(job, context, gate, timeout_ms)

        with catching() as found:
            outcome = attempt(job) if self.tracer is None else self.tracer.process(job, attempt)
        pending = awaitable_of(outcome)
        if pending is not None:  # an async handler: decided once it finishes on the loop
            self._launch(claim, job, pending, timeout_ms)
            return None
        if isinstance(outcome, Failed):
            self._failures[job.id] = (outcome.error, found.exception)
        self._counts["processed"] += 1
        self._ran[job.id] = (job, outcome)
        return decide(job, outcome, self.clock.now(), self.policies, self.jitter())

    def _carry_out(self, claim: Claim, decision: Decision) -> None:
        with self._heartbeat.writing():
            ok = self.executor.carry_out(claim, decision)
            # Written (or left to its lease): no more renewals for it.
            self._heartbeat.release([claim])
        if ok:
            self._ran.pop(decision.job.id, None)
        if ok or not self._cancelled_instead(claim, decision):
            self._counted(ok, decision)

    def _cancelled_instead(self, claim: Claim, decision: Decision) -> bool:
        """A refused outcome write: when a cancel request refused it, the job is
        recorded cancelled instead (True). Called once per decision written."""
        ran = self._ran.pop(decision.job.id, None)
        cancelled = settle_refused(self.queue, self.executor, claim, ran, self.clock.now())
        if cancelled is None:
            return False
        self._failures.pop(decision.job.id, None)  # its failure is not what was recorded
        log.info("job %s: cancel requested while it ran; recorded cancelled", claim.job.id)
        self._counted(True, cancelled)
        self.hooks.cancelled(cancelled.job)
        return True

    def _finish_all(self, finished: Sequence[tuple[Claim, Decision]]) -> None:
        """Carry out completed and dead-lettered jobs together, in one round trip."""
        if finished:
            with self._heartbeat.writing():
                results = self.executor.finish_many(finished)
                self._heartbeat.release(claim for claim, _ in finished)
            for ok, (claim, done) in zip(results, finished, strict=True):
                if ok:
                    self._ran.pop(done.job.id, None)
                if ok or not self._cancelled_instead(claim, done):
                    self._counted(ok, done)

    def _launch(
        self, claim: Claim, job: Job, awaitable: Awaitable[Any], timeout_ms: int | None
    ) -> None:
        """Start an async handler on the event loop, once a slot is free (writing the
        async jobs that finished meanwhile). Its claim stays held until `_conclude`."""
        while not self._async.free:
            self._conclude(self._async.wait(self.heartbeat_s))
        self._async.launch(claim, job, awaitable, timeout_ms)

    def _conclude(self, done: Sequence[Finished]) -> None:
        """Decide and write async jobs whose handlers finished, as `process_claims` does
        for sync ones, then stop renewing their claims."""
        finished: list[tuple[Claim, Decision]] = []
        try:
            for item in done:
                if isinstance(item.outcome, Failed):
                    self._failures[item.job.id] = (item.outcome.error, item.exception)
                if item.timed_out:
                    self._counts["timed_out"] += 1
                self._counts["processed"] += 1
                now = self.clock.now()
                self._ran[item.job.id] = (item.job, item.outcome)
                decision = decide(item.job, item.outcome, now, self.policies, self.jitter())
                if isinstance(decision, Complete | DeadLetter) and self.executor.batches_finish:
                    finished.append((item.claim, decision))
                else:
                    self._carry_out(item.claim, decision)
        finally:
            self._finish_all(finished)
            self._heartbeat.release(item.claim for item in done)
            for item in done:
                self._failures.pop(item.job.id, None)

    def _counted(self, ok: bool, decision: Decision) -> None:
        if ok:
            counter = _COUNTERS.get(type(decision).__name__)
            if counter is not None:
                self._counts[counter] += 1
        else:
            self._counts["lost_claims"] += 1
        self._report(ok, decision)

    def _report(self, written: bool, decision: Decision) -> None:
        """Log and hand to the hooks what a carried-out decision did. Hooks hear only
        of outcomes the store now holds."""
        job = decision.job
        failure = self._failures.pop(job.id, None)
        if failure is not None:
            error, exc = failure
            log_failed_attempt(log, job, error, exc, decision, written=written)
            if written:
                self.hooks.failed(job, exc)
        if not written:
            return
        if isinstance(decision, DeadLetter):
            log_dead_letter(log, job, decision.error)
            self.hooks.dead_lettered(job, decision.error)
        elif isinstance(decision, Complete):
            self.hooks.succeeded(job)

    def job_context(self, job: Job, deadline: datetime | None, gate: AttemptGate) -> JobContext:
        """The context a handler of `job` is given: the one place it is built."""
        return JobContext(
            job_id=job.id,
            job_type=job.job_type,
            attempt=job.attempt,
            queue=job.queue,
            tenant_id=job.tenant_id,
            deadline=deadline,
            cancel_check=lambda: cancel_requested(self.queue, job.id),
            timeout_check=lambda: gate.abandoned,
        )

    def _bounded(
        self, job: Job, context: JobContext, gate: AttemptGate, timeout_ms: int
    ) -> Outcome:
        """The attempt's outcome, or a `Timeout` failure once it runs past `timeout_ms`
        (its thread is then abandoned; see `conveyor.shell.timeouts`)."""
        outcome = self.overruns.run(
            lambda: self._outcome(job, context, gate),
            timeout_ms / 1000,
            gate,
            name=f"conveyor-attempt-{job.id}",
        )
        if outcome is not None:
            return outcome
        self._counts["timed_out"] += 1
        log.warning(
            "job %s (%s) ran past its timeout of %d ms: recorded as a Timeout failure; "
            "its handler's thread is abandoned (%d abandoned still running)",
            job.id,
            job.job_type,
            timeout_ms,
            self.overruns.still_running,
        )
        return Failed(timeout_error(timeout_ms))

    def _outcome(
        self, job: Job, context: JobContext, gate: AttemptGate, timeout_ms: int | None = None
    ) -> Outcome:
        """Run the job's handler (in a child process, for that execution, stopped after
        `timeout_ms`) and say how it went."""
        entry = self.registry.registration(job.job_type)
        if entry is None:
            return NoHandler()
        tenant: Tenant | None = None
        exists = True
        if job.tenant_id is not None and self.tenancy is not None:
            try:
                tenant = self.tenancy.resolve(job.tenant_id)
            except Exception as exc:
                caught(exc)
                return Failed(ErrorInfo("tenant-resolver-error", str(exc)[:500], retryable=True))
            exists = tenant is not None
        verdict = tenant_verdict(job, tenant_scoped=entry.tenant_scoped, tenant_exists=exists)
        if verdict is not None:
            return verdict
        if entry.tenant_scoped:
            if self.tenancy is None or tenant is None:
                message = "a tenant-scoped handler needs tenancy configured on the worker"
                return Failed(ErrorInfo("tenancy-not-configured", message, retryable=False))
            return self.tenancy.run(entry.handler, thaw(job.args), tenant, job=context, gate=gate)
        # A plain copy: handlers may json.dumps or mutate it without touching the record.
        arguments = entry.arguments(thaw(job.args), context)
        if entry.execution == "process":
            return self._in_process(job, entry.handler, arguments, context, timeout_ms)
        return run_handler(entry.handler, *arguments)

    def _in_process(
        self,
        job: Job,
        handler: Any,
        arguments: tuple[Any, ...],
        context: JobContext,
        timeout_ms: int | None,
    ) -> Outcome:
        from .process_execution import run_in_process

        timeout_s = None if timeout_ms is None else timeout_ms / 1000
        outcome = run_in_process(
            handler,
            arguments,
            timeout_s,
            name=f"conveyor-job-{job.id}",
            stop=context.cancel_requested,
        )
        if outcome is not None:
            return outcome
        assert timeout_ms is not None  # only a deadline stops a child early
        self._counts["timed_out"] += 1
        log.warning(
            "job %s (%s) ran past its timeout of %d ms: its process was killed and the "
            "attempt recorded as a Timeout failure",
            job.id,
            job.job_type,
            timeout_ms,
        )
        return Failed(timeout_error(timeout_ms))

    def _dead_letter_bad(self, bad: BadClaim, *, claim: Claim | None = None) -> None:
        """Dead-letter an undecodable payload as `decode-error`, through the executor.
        Gives None: there is no job decision left for the caller to carry out."""
        decision = undecodable_dead_letter(bad, self.clock.now())
        if self.executor.carry_out(claim if claim is not None else bad, decision):
            self._counts["dead_lettered"] += 1
            self._counts["processed"] += 1
            log_dead_letter(log, decision.job, decision.error)
            self.hooks.dead_lettered(decision.job, decision.error)
        else:
            log.warning("could not dead-letter undecodable job %s: %s", bad.job_id, bad.reason)


def __getattr__(name: str) -> Any:
    # `WorkerPool` moved to its own module; keep the old import path working.
    if name == "WorkerPool":
        from .pool import WorkerPool

        return WorkerPool
    raise AttributeError(name)
