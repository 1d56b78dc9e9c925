"""The queue machine's rules for a claim's holder: ack (live and stale), renew and
hand back. Claims stay in the bundle after ack or replace, so later rules reuse them
as stale claims: every port write must then refuse them."""

from __future__ import annotations

from datetime import timedelta

import attrs
from hypothesis import note
from hypothesis import strategies as st
from hypothesis.stateful import rule

from ...core import JobStatus, start
from ...shell.ports import Claim
from .model import CLAIMS, Held, ModelMachine


class HolderRules(ModelMachine):
    @rule(claim=CLAIMS)
    def ack(self, claim: Claim | None) -> None:
        if claim is None:
            return
        live = self._live(claim)
        note(f"ack {claim.job.id.int} live={live}")
        assert self.queue.ack(claim) is live
        if live:
            del self.where[claim.job.id]

    @rule(claim=CLAIMS)
    def stale_ack(self, claim: Claim | None) -> None:
        """An ack with a token that no longer holds the job changes nothing."""
        if claim is None or self._live(claim):
            return
        note(f"stale ack {claim.job.id.int}")
        assert self.queue.ack(claim) is False

    @rule(claim=CLAIMS)
    def extend(self, claim: Claim | None) -> None:
        if claim is None:
            return
        live = self._live(claim)
        note(f"extend {claim.job.id.int} live={live}")
        assert self.queue.extend(claim, self.now) is live
        if live:
            self.where[claim.job.id] = Held(claim.token, self.now)

    @rule(claim=CLAIMS, park_ms=st.sampled_from([0, 500]))
    def replace(self, claim: Claim | None, park_ms: int) -> None:
        if claim is None:
            return
        live = self._live(claim)
        running = start(claim.job, self.now).unwrap()
        if park_ms:
            successor = attrs.evolve(
                running,
                status=JobStatus.RETRYING,
                retry_count=running.retry_count + 1,
                run_at=self.now + timedelta(milliseconds=park_ms),
            )
        else:
            successor = attrs.evolve(running, status=JobStatus.PENDING)
        note(f"replace {claim.job.id.int} live={live} park={park_ms}")
        assert self.queue.replace(claim, successor) is live
        if live:
            self.jobs[claim.job.id] = successor
            if park_ms:
                self._park(successor)
            else:
                self._to_ready(claim.job.id, successor.priority)
