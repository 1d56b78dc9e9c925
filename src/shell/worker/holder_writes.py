"""The claim holder's writes: a worker's decisions carried out under the claims it holds.

Each decision goes to the executor (write, then release) while the heartbeat holds
its renewals off, and the claim is let go of right after: written, or left to its
lease. Completed and dead-lettered jobs can be finished several at a time, in one
round trip, each still atomic and fenced by its own token (`finish_together`). A
write the fence refused because a cancel was requested while the job ran is
settled as the cancel instead (`conveyor.shell.cancellation.settle_refused`). An
undecodable claim is dead-lettered as `decode-error` (`bury`). A prefetched claim
the core says to start before its job runs is started by the executor too
(`start_prefetched`). Whatever the executor did is then reported
(`conveyor.shell.worker.reporting`).
"""

from __future__ import annotations

from collections.abc import Sequence

from ...core import Complete, DeadLetter, Decision, ResultPolicy, decide_hand_back
from ...core.prefetch import StartClaim
from ..cancellation import settle_refused
from ..executor import Executor
from ..placeholder import undecodable_dead_letter
from ..ports import BadClaim, Claim, Clock, JobQueue
from .attempts import Attempted
from .heartbeat import Heartbeat
from .reporting import Reporter


class Finishing:
    """The completed and dead-lettered jobs of one batch, kept to be finished together
    in one round trip (`HolderWrites.finish_together`): each claim with its decision,
    and the attempt it decides."""

    __slots__ = ("attempts", "items")

    def __init__(self) -> None:
        self.items: list[tuple[Claim, Decision]] = []
        self.attempts: list[Attempted] = []


class HolderWrites:
    """Carries out one worker's decisions under its claims, and reports them."""

    def __init__(
        self,
        queue: JobQueue,
        executor: Executor,
        heartbeat: Heartbeat,
        reporter: Reporter,
        clock: Clock,
        result_policy: ResultPolicy,
    ) -> None:
        """`result_policy` caps the result a cancelled job keeps, as the core's
        decisions cap a finished one's."""
        self._queue, self._executor, self._heartbeat = queue, executor, heartbeat
        self._reporter, self._clock = reporter, clock
        self._result_policy = result_policy
        #: Completed and dead-lettered jobs can be finished together (`finish_together`).
        self.batches_finish = executor.batches_finish

    def start_prefetched(self, claim: Claim, decision: StartClaim) -> Claim | None:
        """Start a prefetched claim before its handler runs (the executor's write): the
        claim under its new token, kept leased in its old one's place; None if lost."""
        begun = self._executor.start(claim, decision)
        if begun is not None:
            self._heartbeat.swap(claim, begun)
        return begun

    def write_decision(
        self,
        claim: Claim,
        decision: Decision,
        attempt: Attempted | None,
        finishing: Finishing | None = None,
    ) -> None:
        """Carry out `decision` under `claim`; `attempt` is what it decides (None for a
        claim whose job never ran). A job completed or dead-lettered joins `finishing`,
        when given and the queue finishes several jobs per round trip; anything else is
        written now."""
        if (
            finishing is not None
            and attempt is not None
            and self.batches_finish
            and isinstance(decision, Complete | DeadLetter)
        ):
            finishing.items.append((claim, decision))
            finishing.attempts.append(attempt)
            return
        with self._heartbeat.writing():
            ok = self._executor.carry_out(claim, decision)
            # Written (or left to its lease): no more renewals for it.
            self._heartbeat.release([claim])
        if ok or not self._cancelled_instead(claim, attempt):
            self._reporter.written(attempt, decision, ok)

    def finish_together(self, finishing: Finishing) -> None:
        """Carry out the completed and dead-lettered jobs kept in `finishing` together,
        in one round trip."""
        items, attempts = finishing.items, finishing.attempts
        if not items:
            return
        with self._heartbeat.writing():
            results = self._executor.finish_many(items)
            self._heartbeat.release(claim for claim, _ in items)
        for ok, (claim, decision), attempt in zip(results, items, attempts, strict=True):
            if ok or not self._cancelled_instead(claim, attempt):
                self._reporter.written(attempt, decision, ok)

    def hand_back(self, rest: Sequence[Claim | BadClaim]) -> None:
        """Claims whose jobs were not started go straight back to ready."""
        for claim in rest:
            if isinstance(claim, Claim):
                decision = decide_hand_back(claim.job, self._clock.now())
                self.write_decision(claim, decision, None)

    def bury(self, bad: BadClaim, *, claim: Claim | None = None) -> None:
        """Dead-letter an undecodable payload as `decode-error` (held by `claim` when it
        decoded but could not start: a forged record)."""
        decision = undecodable_dead_letter(bad, self._clock.now())
        written = self._executor.carry_out(claim if claim is not None else bad, decision)
        self._reporter.buried(decision if written else None, bad)

    def _cancelled_instead(self, claim: Claim, attempt: Attempted | None) -> bool:
        """A refused outcome write: when a cancel request refused it, the job is
        recorded cancelled instead (True)."""
        job, outcome = (claim.job, None) if attempt is None else (attempt.job, attempt.outcome)
        cancelled = settle_refused(
            self._queue, self._executor, claim, job, outcome, self._clock.now(),
            self._result_policy,
        )  # fmt: skip
        if cancelled is None:
            return False
        self._reporter.cancelled(cancelled)
        return True
