"""The heartbeat: renews every claim a worker holds before its lease needs it.

A worker holds claims in three conditions: prefetched (waiting for their turn in
a batch), running, and finished but not yet written (their outcome waits for the
batch's one finishing round trip). Each of them must stay leased, or a lease
keeper elsewhere returns the job to ready and another worker runs it again while
this one is healthy. So the heartbeat renews all of them, not only the running
one: one long-lived thread per worker, renewing each claim once `interval_s` has
passed since it was taken or last renewed.

A renewal that finds the claim gone marks it lost: the worker then skips it if
it has not started, and its outcome write is refused by the fence if it has.
The worker writes an outcome and releases its claim inside `writing()`, which
holds renewals off, so no renewal lands between the two and mistakes a claim
just written for one lost.

A running handler's progress reports (`JobContext.progress`) wait here, the newest
replacing the one before, and go out with the claim's next renewal, in the same
fenced write (`ProgressJobQueue.extend_with_progress`). A claim with a report
waiting is renewed once half an interval has passed instead of a whole one: however
often the handler reports, that is at most one write more per interval than the
renewals alone.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from uuid import UUID

from ...core import Job, Progress, progress
from .. import outage
from ..ports import Claim, Clock, JobQueue, ProgressJobQueue
from ..progress_notes import note_of
from .watch import LoopWatch

log = logging.getLogger("conveyor.worker")


class Heartbeat:
    """The claims one worker holds, and the thread that keeps their leases."""

    def __init__(
        self, queue: JobQueue, clock: Clock, interval_s: float, watch: LoopWatch | None = None
    ) -> None:
        """`watch`, when given, is marked by each outcome write and by each renewal of a
        running job's claim: the worker loop progressing (`conveyor.shell.worker.watch`)."""
        self._queue, self._clock, self._interval = queue, clock, interval_s
        self._watch = watch
        self._lock = threading.Lock()
        #: Held by a renewal pass and by `writing()`: one excludes the other.
        self._renewing = threading.RLock()
        #: job id -> (claim, monotonic time of the last lease renewal or of the claim)
        self._held: dict[UUID, tuple[Claim, float]] = {}
        self._lost: set[UUID] = set()
        #: The started record of each held job whose handler began, by job id.
        self._begun: dict[UUID, Job] = {}
        #: The newest progress report of each held job, not yet written.
        self._reports: dict[UUID, Progress] = {}
        self._notes = queue if isinstance(queue, ProgressJobQueue) else None
        self._thread: threading.Thread | None = None
        #: Set by `end`: the thread looks at once whether anything is left to keep.
        self._ending = threading.Event()
        self._server = outage.for_queue(queue)

    def hold(self, claims: Iterable[Claim]) -> None:
        """Start keeping the leases of `claims` (just taken: their leases are fresh)."""
        now = time.monotonic()
        with self._lock:
            for claim in claims:
                self._held[claim.job.id] = (claim, now)
                self._lost.discard(claim.job.id)
            if self._thread is None:
                self._ending.clear()
                self._thread = threading.Thread(
                    target=self._beat, daemon=True, name="conveyor-heartbeat"
                )
                self._thread.start()

    def running(self) -> tuple[str, ...]:
        """The ids of the jobs held whose handlers run: started claims, and prefetched
        ones whose handler began (a prefetched claim runs its first attempt under its
        batch's token; the others wait their turn)."""
        with self._lock:
            return tuple(
                str(i) for i, (claim, _) in self._held.items() if claim.started or i in self._begun
            )

    def begin(self, claim: Claim, started: Job) -> None:
        """`claim`'s handler begins, as `started` (what a forced stop records)."""
        with self._lock:
            held = self._held.get(claim.job.id)
            if held is not None and held[0].token == claim.token:
                self._begun[claim.job.id] = started

    def report(self, job_id: UUID, fraction: object, value: object) -> None:
        """A handler of `job_id` reports its progress: checked now (a bad report is a
        `ValidationError` naming the field), written with the claim's next renewal.
        A report for a job no longer held is dropped."""
        made = progress(fraction, value, self._clock.now())
        with self._lock:
            if job_id in self._held:
                self._reports[job_id] = made

    def take_all(self, timeout_s: float) -> list[tuple[Claim, Job | None]]:
        """Stop renewing every held claim and return each with its started record
        (None when its handler had not begun): a worker stopping by force hands them
        back itself. Waits up to `timeout_s` for a renewal or write in progress."""
        acquired = self._renewing.acquire(timeout=timeout_s)
        try:
            with self._lock:
                taken = [(c, self._begun.get(i)) for i, (c, _) in self._held.items()]
                self._held.clear()
                self._begun.clear()
                self._reports.clear()
            return taken
        finally:
            if acquired:
                self._renewing.release()

    def swap(self, old: Claim, new: Claim) -> None:
        """`old` became `new` (a prefetched claim was started under a new token)."""
        with self._lock:
            if old.job.id in self._held:
                self._held[old.job.id] = (new, time.monotonic())

    def release(self, claims: Iterable[Claim]) -> None:
        """Stop renewing `claims` (written, handed back, or given up)."""
        with self._lock:
            for claim in claims:
                held = self._held.get(claim.job.id)
                if held is not None and held[0].token == claim.token:
                    del self._held[claim.job.id]
                    self._begun.pop(claim.job.id, None)
                    self._reports.pop(claim.job.id, None)
                self._lost.discard(claim.job.id)

    def let_go(self, claims: Iterable[Claim], keep: Callable[[Claim], bool]) -> None:
        """Stop renewing what is held for the jobs of `claims`: each claim as taken, or
        as started since under a new token (`swap`). A claim `keep` asks to keep (one
        whose job still runs on the event loop) stays held."""
        with self._lock:
            for claim in claims:
                held = self._held.get(claim.job.id)
                if held is not None and keep(held[0]):
                    continue
                if held is not None:
                    del self._held[claim.job.id]
                    self._begun.pop(claim.job.id, None)
                    self._reports.pop(claim.job.id, None)
                self._lost.discard(claim.job.id)

    @contextmanager
    def writing(self) -> Iterator[None]:
        """Hold renewals off while the caller writes outcomes and releases their
        claims: a renewal between a claim's write and its release would find it gone
        and report a lease lost that was merely finished."""
        with self._renewing:
            yield
        if self._watch is not None:
            self._watch.progressed()

    def is_lost(self, claim: Claim) -> bool:
        """True once a renewal found `claim` no longer held by this worker."""
        with self._lock:
            return claim.job.id in self._lost

    def renewed_within(self, claim: Claim, seconds: float) -> bool:
        """True when `claim` was taken or renewed less than `seconds` ago."""
        with self._lock:
            held = self._held.get(claim.job.id)
            return held is not None and time.monotonic() - held[1] < seconds

    def renew(self, claim: Claim) -> bool:
        """Renew `claim` now, on the caller's thread, with its waiting progress report
        if any. False when it was lost."""
        with self._lock:
            report = self._reports.pop(claim.job.id, None)
        try:
            if report is not None and self._notes is not None:
                note = note_of(claim.token, report)
                ok = self._notes.extend_with_progress(claim, self._clock.now(), note)
            else:
                ok = self._queue.extend(claim, self._clock.now())
        except Exception:
            if report is not None:
                with self._lock:  # goes with the next try, unless a newer one came
                    if claim.job.id in self._held:
                        self._reports.setdefault(claim.job.id, report)
            raise
        with self._lock:
            held = self._held.get(claim.job.id)
            if held is not None and held[0].token == claim.token:
                if ok:
                    self._held[claim.job.id] = (claim, time.monotonic())
                    # A running job's lease kept: the loop is busy in its handler, and well.
                    if claim.started and self._watch is not None:
                        self._watch.progressed()
                else:
                    self._lost.add(claim.job.id)
        return ok

    def _due(self) -> list[Claim]:
        now = time.monotonic()
        half = self._interval / 2
        with self._lock:
            return [
                c
                for i, (c, at) in self._held.items()
                if now - at >= (half if i in self._reports else self._interval)
            ]

    def end(self) -> None:
        """The worker stopped: the thread ends now if it keeps nothing, rather than at
        its next look (a quarter interval on), so a stopped runtime leaves no thread."""
        self._ending.set()

    def _beat(self) -> None:
        while True:
            self._ending.wait(max(self._interval / 4, 0.001))
            with self._lock:
                if not self._held:
                    # Nothing to keep: end, so a stopped worker leaves no thread behind;
                    # `hold` starts another (under this lock, so no claim goes unkept).
                    self._thread = None
                    return
                # Still keeping claims after `end` (a job on the event loop): beat on.
                self._ending.clear()
            for claim in self._due():
                try:
                    with self._renewing:
                        if not self._still_held(claim):
                            continue  # written and released while this pass waited
                        renewed = self.renew(claim)
                except Exception as exc:
                    # An outage is told once for the process; anything else is a bug.
                    if not self._server.failed(exc):
                        log.warning(
                            "renewing the lease of job %s failed", claim.job.id, exc_info=True
                        )
                    continue
                self._server.ok()
                if not renewed and self._still_held(claim):
                    log.warning("lease on job %s was lost while held", claim.job.id)

    def _still_held(self, claim: Claim) -> bool:
        with self._lock:
            held = self._held.get(claim.job.id)
            return held is not None and held[0].token == claim.token
