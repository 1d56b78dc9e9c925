"""A batch of claims, from claim to release: start, run, decide, write, report.

One claim of a worker takes a batch of jobs (one, or up to its prefetch). They
run in claim order, each one claim through the same steps:

1. start: a claim lost meanwhile is skipped, one untouched for half a lease is
   renewed (and so checked) first, and one the core says to start (`StartClaim`,
   a prefetched job back from a dead worker's batch) is started by the executor
   before its handler runs; then the job's attempt is counted (`core.start`);
2. run: its handler runs (`conveyor.shell.worker.attempt_runner`), giving an `Attempted`;
   an async one goes to the event loop and comes back here when it finishes;
3. decide: the core turns the attempt's outcome into a decision;
4. write and report: the claim holder's writes (`conveyor.shell.worker.holder_writes`).
   Completed and dead-lettered jobs are finished together in one round trip at
   the end of the batch, each still atomic and fenced; until then the heartbeat
   keeps their claims, like the ones waiting their turn, leased.

A worker told to stop, or a batch a slow job held up past the prefetch policy's
limit, hands back the claims it has not started. Whatever happens in between,
the finished outcomes are written: an exception cannot drop them.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent import futures
from datetime import datetime

from returns.pipeline import is_successful

from ...core import Decision, Job, Policies, decide, start
from ...core.prefetch import PrefetchPolicy, decide_start, should_hand_back
from ..ports import BadClaim, Claim, Clock
from .async_jobs import AsyncJobs
from .attempt_runner import AttemptRunner
from .attempts import Attempted, Awaiting
from .heartbeat import Heartbeat
from .holder_writes import Finishing, HolderWrites
from .reporting import Reporter
from .second_thread import SecondThread

log = logging.getLogger("conveyor.worker")


class BatchRunner:
    """Takes one worker's claimed batches from claim to release."""

    def __init__(
        self,
        *,
        clock: Clock,
        policies: Policies,
        jitter: Callable[[], float],
        prefetch: PrefetchPolicy,
        worker_id: str,
        stop: threading.Event,
        heartbeat: Heartbeat,
        runner: AttemptRunner,
        writes: HolderWrites,
        reporter: Reporter,
        async_jobs: AsyncJobs,
        async_wait_s: float,
    ) -> None:
        """`async_wait_s` is how long to wait at a time for an async job to finish while
        every async slot is taken."""
        self._clock, self._policies, self._jitter = clock, policies, jitter
        self._prefetch, self._worker_id, self._stop = prefetch, worker_id, stop
        self._heartbeat, self._runner = heartbeat, runner
        self._writes, self._reporter = writes, reporter
        self._async, self._async_wait_s = async_jobs, async_wait_s
        #: A claim renewed longer ago than this is renewed before its job starts.
        self._stale_s = policies.lease.stale_after_ms / 1000
        #: Runs sync attempts while async jobs are out (`_run_beside_async`).
        self._beside = SecondThread(f"conveyor-{worker_id}-sync")

    def run_batch(self, claims: Sequence[Claim | BadClaim]) -> list[Decision | None]:
        """Run claimed jobs in order and carry out each decision; the decisions, None
        for a claim that was lost, undecodable, handed back or is still running on
        the event loop."""
        held = [c for c in claims if isinstance(c, Claim)]
        self._heartbeat.hold(held)
        decisions: list[Decision | None] = [None] * len(claims)
        finishing = Finishing()
        began = time.monotonic()
        try:
            for i, claim in enumerate(claims):
                if self._ends_before(i, claims, began):
                    self._writes.hand_back(claims[i:])
                    break
                attempt = self._start_and_run(claim)
                if attempt is None:
                    continue
                now = self._clock.now()
                decision = decide(attempt.job, attempt.outcome, now, self._policies, self._jitter())
                decisions[i] = decision
                self._writes.write_decision(attempt.claim, decision, attempt, finishing)
        finally:
            try:
                self._writes.finish_together(finishing)
            finally:
                # Even when the write failed: its claims are then left to their leases,
                # which must not be renewed for as long as the process lives. Claims
                # handed to the event loop stay leased until their outcome is written.
                self._heartbeat.let_go(held, keep=self._async.holds)
        return decisions

    def decide_claim(self, claim: Claim | BadClaim) -> Decision | None:
        """Run the handler of one claimed job and ask the core what to do, writing
        nothing of the decision. An undecodable claim is dead-lettered here and gives
        None; so does a job whose async handler was started on the event loop."""
        attempt = self._attempt(claim, self._clock.now())
        if attempt is None:
            return None
        now = self._clock.now()
        return decide(attempt.job, attempt.outcome, now, self._policies, self._jitter())

    def conclude(self, done: Sequence[Attempted]) -> None:
        """Decide and write async jobs whose handlers finished, as `run_batch` does for
        sync ones, then stop renewing their claims."""
        finishing = Finishing()
        try:
            for attempt in done:
                self._reporter.ran(attempt)
                now = self._clock.now()
                decision = decide(attempt.job, attempt.outcome, now, self._policies, self._jitter())
                self._writes.write_decision(attempt.claim, decision, attempt, finishing)
        finally:
            try:
                self._writes.finish_together(finishing)
            finally:
                self._heartbeat.release(attempt.claim for attempt in done)

    def wait_for_async(self, timeout_s: float) -> None:
        """Wait up to `timeout_s` for an async job to finish, then write those done."""
        self.conclude(self._async.wait(timeout_s))

    def finish_async(self) -> None:
        """Wait for every async job still running, writing each as it finishes; then
        let the worker's kept threads go (a later attempt starts another)."""
        while self._async.running:
            self.wait_for_async(self._async_wait_s)
        self._beside.close()
        self._runner.overruns.close()

    @contextlib.contextmanager
    def async_let_go_on_exit(self) -> Iterator[None]:
        """An exception out of the block (a Ctrl-C, a handler's `SystemExit`) leaves
        the async jobs still out to their leases, as it leaves a sync attempt it
        interrupts: their handlers are cancelled and their claims no longer renewed
        (a `Runtime.drain` drops its workers: kept, they were renewed for ever)."""
        try:
            yield
        except BaseException:
            self._heartbeat.let_go(self._async.abandon(), keep=lambda _: False)
            raise

    def _ends_before(self, i: int, claims: Sequence[Claim | BadClaim], began: float) -> bool:
        """True when the batch stops before its `i`th claim: the worker is stopping, or
        a slow job held the batch up (its unstarted rest is for other workers)."""
        left = len(claims) - i
        if self._stop.is_set() and len(claims) > 1:
            return True
        return should_hand_back(self._prefetch, (time.monotonic() - began) * 1000, left)

    def _start_and_run(self, claim: Claim | BadClaim) -> Attempted | None:
        """Start one claim (renewing or starting it first where needed) and run it.
        None when the claim was lost before its job started, or see `_attempt`."""
        if isinstance(claim, BadClaim):
            self._writes.bury(claim)
            return None
        heartbeat = self._heartbeat
        if heartbeat.is_lost(claim) or (
            # It waited long enough that a reclaimer may have taken it: never start it.
            not heartbeat.renewed_within(claim, self._stale_s) and not heartbeat.renew(claim)
        ):
            self._reporter.lost()
            return None
        now = self._clock.now()
        begin = decide_start(claim.job, claim.started, now)
        if begin is not None:
            begun = self._writes.start_prefetched(claim, begin)
            if begun is None:
                self._reporter.lost()
                return None
            claim = begun
        return self._attempt(claim, now)

    def _attempt(self, claim: Claim | BadClaim, now: datetime) -> Attempted | None:
        """Count the attempt of `claim`'s job and run its handler. None when the claim
        cannot start (dead-lettered), or its handler is async (started on the event
        loop, decided once it finishes)."""
        if isinstance(claim, BadClaim):
            self._writes.bury(claim)
            return None
        started = start(claim.job, now, self._worker_id)
        if not is_successful(started):
            bad = BadClaim(
                str(claim.job.id), claim.token, claim.queue, "", str(started.failure()), now
            )
            self._writes.bury(bad, claim=claim)
            return None
        job = started.unwrap()
        self._heartbeat.begin(claim, job)
        self._reporter.started(job)
        # Not in a drain on the main thread: a Ctrl-C (and a handler's SystemExit) must
        # land in the handler there, as without async jobs.
        if self._async.running and threading.current_thread() is not threading.main_thread():
            attempt = self._run_beside_async(claim, job, now)
        else:
            attempt = self._runner.run_attempt(claim, job, now)
        if isinstance(attempt, Awaiting):
            self._launch(attempt)
            return None
        self._reporter.ran(attempt)
        return attempt

    def _run_beside_async(self, claim: Claim, job: Job, now: datetime) -> Attempted | Awaiting:
        """Run an attempt while this worker's async jobs are out: on the worker's second
        thread, while this one writes each async job that finishes meanwhile, so that a
        long sync job does not hold their outcomes back. The writes stay this thread's."""
        context = contextvars.copy_context()
        running = self._beside.submit(context.run, self._runner.run_attempt, claim, job, now)
        running.add_done_callback(lambda _: self._async.nudge())
        told = False
        try:
            while not running.done():
                try:
                    self.conclude(self._async.wait_until(running.done, self._async_wait_s))
                except Exception:
                    # Those outcomes are left to their leases, as after any failed write
                    # (an outage: they run again); the sync attempt goes on, and its own
                    # outcome is written as usual once it ends.
                    log.log(
                        logging.DEBUG if told else logging.WARNING,
                        "worker %s: writing async outcomes failed; left to their leases",
                        self._worker_id,
                        exc_info=not told,
                    )
                    told = True
        except BaseException:
            # The batch lets its claims go on the way out: not while this handler runs.
            futures.wait([running])
            raise
        attempt: Attempted | Awaiting = running.result()
        return attempt

    def _launch(self, attempt: Awaiting) -> None:
        """Start an async handler on the event loop, once a slot is free (writing the
        async jobs that finished meanwhile). Its claim stays held until `conclude`."""
        while not self._async.free:
            self.wait_for_async(self._async_wait_s)
        self._async.launch(attempt)
