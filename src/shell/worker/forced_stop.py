"""Stopping by force: every claim a worker holds goes back to ready at once.

A graceful stop lets running jobs finish; a second Ctrl-C says not to wait. Python
cannot kill a thread, so the handlers still running are abandoned with the process,
and what matters is their claims: left alone, each would come back only after its
lease (a minute by default). So each worker's claims are taken from its heartbeat
(which then stops renewing them) and handed back through the executor, as every
write is: a running job with its attempt recorded as interrupted
(`decide_interrupt`), a prefetched one unchanged (`decide_hand_back`). Each write is
fenced by the claim's token, like any outcome: should a handler finish in the same
instant, whichever write lands first wins and the other changes nothing. A hand-back
that cannot be written (the server is down, a cancel request stands) leaves that
job to its lease, as a crash would; nothing is lost either way.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from uuid import UUID

import attrs

from ...core import HandBack, decide_hand_back, decide_interrupt
from ..executor import Executor
from ..ports import Claim
from .loop import Worker

log = logging.getLogger("conveyor.worker")

#: How long to wait for a lease renewal or an outcome write in progress on a worker
#: before taking its claims anyway.
WRITE_WAIT_S = 2.0


@attrs.frozen(slots=True)
class HandedBack:
    """What a forced stop did with the claims it found."""

    #: Jobs now ready again.
    handed_back: tuple[UUID, ...] = ()
    #: Jobs whose hand-back could not be written: they return after their lease.
    left_to_lease: tuple[UUID, ...] = ()
    #: Jobs whose claim was no longer held (their handler's outcome landed first).
    finished: tuple[UUID, ...] = ()

    def describe(self) -> str:
        """One line for the operator, naming every job."""
        parts = []
        if self.handed_back:
            parts.append(f"handed back {_ids(self.handed_back)}, ready to run again now")
        if self.left_to_lease:
            parts.append(
                f"could not hand back {_ids(self.left_to_lease)}, "
                "they run again when their lease runs out"
            )
        if self.finished:
            parts.append(f"{_ids(self.finished)} finished meanwhile")
        return "; ".join(parts) if parts else "no job was held"


def _ids(jobs: tuple[UUID, ...]) -> str:
    return f"{len(jobs)} job{'s' if len(jobs) != 1 else ''} ({', '.join(map(str, jobs))})"


def hand_back_all(workers: Iterable[Worker]) -> HandedBack:
    """Stop `workers` and hand back every claim they hold, without waiting for
    their handlers."""
    found: dict[str, list[UUID]] = {WRITTEN: [], FAILED: [], LOST: []}
    for worker in workers:
        for claim, started in worker.give_up_claims(WRITE_WAIT_S):
            now = worker.clock.now()
            decision = (
                decide_hand_back(claim.job, now)
                if started is None
                else decide_interrupt(started, now)
            )
            found[_write_once(worker.executor, claim, decision)].append(claim.job.id)
    return HandedBack(tuple(found[WRITTEN]), tuple(found[FAILED]), tuple(found[LOST]))


WRITTEN, FAILED, LOST = "written", "failed", "lost"


def _write_once(executor: Executor, claim: Claim, decision: HandBack) -> str:
    """The executor's plan for `decision`, each step tried once (the process is about
    to exit: no retries, no waiting out an outage)."""
    for step in executor.plan(claim, decision):
        try:
            ok = step.run()
        except Exception as exc:
            log.warning("could not hand back job %s (%s); left to its lease", claim.job.id, exc)
            return FAILED
        if ok is False and step.kind != "release":
            return LOST
    return WRITTEN
