"""How an idle worker waits for work.

After a round that claimed nothing, a worker waits: no longer than its poll
interval, nor past the moment a parked job of its queue comes due (so retries and
delays start on time), nor past the next rate token when its queue's limits held
ready jobs back. Held back, it sleeps: a wake-up would come at once, for jobs it
may not take yet. Otherwise a queue that signals new work (`WakingJobQueue`) is
waited on, and one that claims in the wake-up's own round trip
(`ClaimOnWakeJobQueue`) hands its claims over, for the next round to run: an idle
worker then picks a job up in one round trip. Without a signal the worker polls
fast for a moment after its last job (a burst's next job is picked up in
milliseconds), then at its interval.

What the queue can do is asked once, when the worker is built.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from datetime import datetime

from ..outage import Backoff, ConnectionState
from ..ports import (
    BadClaim,
    Claim,
    ClaimOnWakeJobQueue,
    Clock,
    InterruptibleWaitsJobQueue,
    JobQueue,
    WakingJobQueue,
)
from .watch import LoopWatch

log = logging.getLogger("conveyor.worker")

#: After the last job, a worker without wake-ups polls every FAST_POLL_S for
#: FAST_POLL_WINDOW_S, so a burst's next job is picked up in milliseconds.
FAST_POLL_S = 0.002
FAST_POLL_WINDOW_S = 0.25
#: While async jobs run and a slot is free, the worker looks for new work this often.
ASYNC_POLL_S = 0.05


class Idle:
    """The waiting of one worker between rounds that found no work."""

    def __init__(
        self,
        queue: JobQueue,
        queue_name: str,
        clock: Clock,
        poll_interval_ms: int,
        stop: threading.Event,
        claim_on_wake: bool = True,
        watch: LoopWatch | None = None,
        chore_at: Callable[[], datetime | None] | None = None,
    ) -> None:
        """`claim_on_wake=False` keeps a queue's wake-ups from claiming (a limited
        queue's claims all go through its limits). `watch` hears each wait planned and
        each wait on the server that answered (`conveyor.shell.worker.watch`).
        `chore_at` tells when the worker's maintenance next has work (its pruner's
        next batch): a wait ends then."""
        self._chore_at = chore_at
        self.watch = watch if watch is not None else LoopWatch()
        self._queue, self._queue_name, self._clock = queue, queue_name, clock
        self._poll_s = poll_interval_ms / 1000
        self._stop = stop
        self._waking = queue if isinstance(queue, WakingJobQueue) else None
        self._claiming = queue if claim_on_wake and isinstance(queue, ClaimOnWakeJobQueue) else None
        #: The last limited claim took nothing while caps or rates held ready jobs back.
        self.held_back = False
        #: Until when rates hold them back (None: caps, or nothing held back).
        self.throttled_until: datetime | None = None
        self._last_work = time.monotonic()
        #: Claims a queue handed over with its wake-up, for the next round to run.
        self._handed: Sequence[Claim | BadClaim] = ()
        #: Pauses between waits that fail while the server is away.
        self._away = Backoff()

    def end_wait(self) -> None:
        """The worker is told to stop: end its wait now where the queue can (the stop
        event ends the waits that sleep on it)."""
        if isinstance(self._waking, InterruptibleWaitsJobQueue):
            self._waking.end_waits()

    def handed_over(self) -> Sequence[Claim | BadClaim]:
        """The claims a wake-up handed over since last asked (then forgotten here)."""
        handed, self._handed = self._handed, ()
        return handed

    def worked(self) -> None:
        """A round found work (or the worker starts): poll fast for a moment."""
        self._last_work = time.monotonic()

    def claimed_limited(self, took: int, held_back: bool, wait_until: datetime | None) -> None:
        """What the last limited claim saw: `took` jobs, and whether (and until when)
        the limits `held_back` ready ones."""
        self.held_back = held_back and not took
        self.throttled_until = wait_until if self.held_back else None

    def timeout_s(self) -> float:
        """How long an idle worker may wait: the poll interval, or less when a parked job
        of this queue comes due sooner (so retries and delays start on time), or its
        maintenance has work sooner."""
        timeout = self._poll_s
        chore = None if self._chore_at is None else self._chore_at()
        for until in (self.throttled_until, chore):
            if until is not None:
                left = (until - self._clock.now()).total_seconds()
                timeout = min(timeout, max(0.0, left))
        try:
            due = self._queue.next_due(self._queue_name)
        except Exception:
            log.debug("next_due failed", exc_info=True)
            return timeout
        if due is None:
            return timeout
        return min(timeout, max(0.0, (due - self._clock.now()).total_seconds()))

    def held_back_for_s(self) -> float | None:
        """After a round that claimed nothing because the queue's caps or rates held its
        ready jobs back: how long to wait before claiming again (until the next rate
        token, at most a poll interval). None when nothing was held back."""
        return self.timeout_s() if self.held_back else None

    @staticmethod
    def async_wait_s(timeout: float, free: int) -> float:
        """With async jobs in flight: how long to wait for one to finish (its write frees
        a slot) before looking for new work, which is only while a slot is free."""
        return min(timeout, ASYNC_POLL_S) if free else timeout

    def _answered(self) -> None:
        """The server answered a wait: the next outage backs off from the start."""
        self.watch.progressed()
        self._away.reset()

    def wait(self, timeout: float, want: int, server: ConnectionState) -> None:
        """Wait up to `timeout` for work. A queue that claims on its wake-up hands over
        up to `want` claims, kept for the next round (`handed_over`)."""
        self.watch.waiting(timeout)
        if self.held_back:
            self._stop.wait(timeout)
            return
        if self._waking is not None:
            began = time.monotonic()
            try:
                if self._claiming is not None:
                    now = self._clock.now()
                    name = self._queue_name
                    self._handed = self._claiming.wait_and_dequeue(name, now, want, timeout)
                    self._answered()
                    return
                woken = self._waking.wait_for_work(self._queue_name, timeout)
                self._answered()
                if woken or time.monotonic() - began > timeout / 2:
                    return  # woken, or waited out the interval on the signal
            except Exception as exc:
                if server.failed(exc):
                    # The server is away: look again after a short pause (capped
                    # backoff), not a whole poll interval later, so that work written
                    # once it is back is seen at once.
                    self._stop.wait(min(timeout, self._away.next()))
                    return
                log.warning("waiting for work failed", exc_info=True)
        # No wake-up signal here: poll fast for a moment after work, then ease off.
        recent = time.monotonic() - self._last_work < FAST_POLL_WINDOW_S
        self._stop.wait(min(FAST_POLL_S, timeout) if recent else timeout)
