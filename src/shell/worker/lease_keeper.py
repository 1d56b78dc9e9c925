"""The lease keeper: returns abandoned claims to ready, and gives up on poison pills.

It reads the claims whose lease ran out before a cutoff, asks the core what to do
with each (`decide_reclaim`: back to ready, or a `lease-expired` dead letter), and
hands every decision to the executor. The cutoff travels inside the decision, and
the adapter re-checks it in the same atomic write, so a holder that renewed its
lease after the read keeps its job. A claim whose job never started (it waited
in a prefetched batch) is returned without being charged to the job.

It also refuses to act on a clock that disagrees with the server holding the
leases by more than a quarter lease: with a skewed clock it would take live
claims from their holders.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from returns.pipeline import is_successful

from ...core import (
    CancelClaim,
    DeadLetter,
    Decision,
    LeasePolicy,
    Reclaim,
    cancel_claimed,
    decide_reclaim,
    reclaim_cutoff,
    start,
)
from ..cancellation import cancel_requested
from ..executor import Executor
from ..hooks import Hooks
from ..logs import log_dead_letter
from ..placeholder import undecodable_dead_letter
from ..ports import BadClaim, Claim, Clock, JobQueue

log = logging.getLogger("conveyor.worker")


class ClockSkewError(RuntimeError):
    """This process's clock and the lease server's disagree by more than allowed."""


def clock_skew(queue: JobQueue, clock: Clock) -> timedelta | None:
    """How far `clock` is ahead of (positive) or behind the server that holds the
    leases; None when the queue has no server clock of its own."""
    server = queue.server_time()
    if server is None:
        return None
    here: datetime = clock.now()
    return here - server


def check_clock(queue: JobQueue, clock: Clock, lease_ms: int) -> None:
    """Raise `ClockSkewError` when the skew exceeds what a lease of `lease_ms` allows (a
    quarter of it: `LeasePolicy.max_clock_skew_ms`)."""
    skew = clock_skew(queue, clock)
    if skew is None:
        return
    allowed = timedelta(milliseconds=LeasePolicy(lease_ms).max_clock_skew_ms)
    if abs(skew) > allowed:
        raise ClockSkewError(
            f"this host's clock is {skew.total_seconds():+.3f} s off the server's, more than "
            f"a quarter of the lease ({allowed.total_seconds():.3f} s); fix the clock (NTP) "
            "or raise lease_ms"
        )


class LeaseKeeper:
    """Reclaims the abandoned claims of one queue backend."""

    def __init__(
        self,
        queue: JobQueue,
        executor: Executor,
        clock: Clock,
        policy: LeasePolicy,
        *,
        clock_check: bool = True,
        hooks: Hooks | None = None,
    ) -> None:
        """`clock_check=False` drops the skew check: for a manual clock in tests that
        replays a fixed date against a live server. `hooks` hear of the dead letters."""
        self.queue, self.executor, self.clock, self.policy = queue, executor, clock, policy
        self.clock_check = clock_check
        self.hooks = hooks if hooks is not None else Hooks()
        self._last_pass: datetime | None = None

    def due(self, now: datetime, every: timedelta) -> bool:
        """True when a reclaim pass is due at `now`, taking one `every` so often (the
        lease policy's `reclaim_every_ms` by default); the pass is then taken as begun."""
        if self._last_pass is not None and now - self._last_pass < every:
            return False
        self._last_pass = now
        return True

    def decide(self, found: Claim | BadClaim, now: datetime, cutoff: datetime) -> Decision:
        """What to do with one abandoned claim, guarded by `cutoff`."""
        if isinstance(found, BadClaim):
            return undecodable_dead_letter(found, now, abandoned_before=cutoff)
        started = start(found.job, now)
        if not is_successful(started):
            # A forged record (already terminal) cannot be reclaimed: dead-letter it.
            bad = BadClaim(
                str(found.job.id), found.token, found.queue, "", str(started.failure()), now
            )
            return undecodable_dead_letter(bad, now, abandoned_before=cutoff)
        job = started.unwrap() if found.started else found.job
        if cancel_requested(self.queue, found.job.id):
            # Its worker vanished after a cancel was asked for: cancelled, never rerun.
            return cancel_claimed(job, now, abandoned_before=cutoff)
        if not found.started:
            return decide_reclaim(found.job, now, self.policy, cutoff, started=False)
        return decide_reclaim(job, now, self.policy, cutoff)

    def reclaim_abandoned(self, now: datetime) -> tuple[int, int]:
        """Return abandoned claims to ready and dead-letter poison pills. Returns how
        many were reclaimed and how many dead-lettered."""
        try:
            if self.clock_check:
                check_clock(self.queue, self.clock, self.policy.lease_ms)
        except ClockSkewError as exc:
            log.error("not reclaiming: %s", exc)
            return 0, 0
        cutoff = reclaim_cutoff(now, self.policy.lease_ms)
        reclaimed = buried = 0
        for found in self.queue.abandoned(cutoff):
            decision = self.decide(found, now, cutoff)
            if not self.executor.carry_out(found, decision):
                continue
            if isinstance(decision, Reclaim):
                reclaimed += 1
            elif isinstance(decision, DeadLetter):
                buried += 1
                log_dead_letter(log, decision.job, decision.error)
                self.hooks.dead_lettered(decision.job, decision.error)
            elif isinstance(decision, CancelClaim):
                self.hooks.cancelled(decision.job)
        return reclaimed, buried
