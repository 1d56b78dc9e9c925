"""The queue machine's rules for a queue that finishes into its store: batched
finish, the lease keeper's dead letter racing a renewal, an operator's revive, and
the cancel of a queued or a held job. Each runs only when the factory gave the store
(`ModelMachine._finishing`)."""

from __future__ import annotations

from typing import Any

from hypothesis import note
from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from ...core import (
    Cancel,
    Complete,
    ErrorInfo,
    JobStatus,
    Succeeded,
    cancel_claimed,
    dead_letter,
    decide,
    decide_cancel,
    decide_revive,
    reclaim_cutoff,
    start,
)
from ...core.decisions import decide_reclaim
from ...core.policies import LeasePolicy, Policies
from ...shell.ports import Claim
from .model import LEASE_MS, Held, ModelMachine


class FinishRules(ModelMachine):
    @precondition(lambda self: self._finishing())
    @rule(data=st.data())
    def finish_many(self, data: st.DataObject) -> None:
        """Held claims (and stale ones) finished in one call: each fenced on its own."""
        held = [(i, w) for i, w in self.where.items() if isinstance(w, Held)]
        picked = (
            data.draw(st.lists(st.sampled_from(held), max_size=3, unique_by=lambda e: e[0]))
            if held
            else []
        )
        items = []
        for i, w in picked:
            claim = Claim(self.jobs[i], w.token, self.jobs[i].queue, w.locked_at)
            running = start(self.jobs[i], self.now).unwrap()
            decision = decide(running, Succeeded(1), self.now, Policies(), 0.5)
            assert isinstance(decision, Complete)
            items.append((claim, decision.job))
        note(f"finish_many {[i.int for i, _ in picked]}")
        done = self.queue.finish_many(items)
        assert list(done) == [True] * len(items)
        assert self.queue.finish_many(items) == [False] * len(items)
        assert self.store is not None
        for claim, record in items:
            del self.where[claim.job.id]
            self.jobs[claim.job.id] = record
            assert self.store.get(claim.job.id) == record

    @precondition(lambda self: self._finishing() and self._any_held())
    @rule()
    def poison_pill_write_races_a_renewal(self) -> None:
        """The lease keeper reads an abandoned claim, its holder renews, then the
        keeper's dead letter must be refused: the guard is inside the write."""
        self.tick(2 * LEASE_MS)
        cutoff = reclaim_cutoff(self.now, LEASE_MS)
        found = [c for c in self.queue.abandoned(cutoff) if isinstance(c, Claim)]
        assert found, "an expired claim was not reported abandoned"
        claim = found[0]
        assert self.queue.extend(claim, self.now)  # the holder was alive after all
        self.where[claim.job.id] = Held(claim.token, self.now)
        running = start(claim.job, self.now).unwrap()
        pill = decide_reclaim(running, self.now, LeasePolicy(LEASE_MS, max_reclaims=0), cutoff)
        note(f"poison pill {claim.job.id.int} after renewal")
        assert pill.job.status is JobStatus.FAILED
        finish: Any = self.queue.finish
        assert finish(claim, pill.job, abandoned_before=cutoff) is False
        assert self.queue.reclaim(claim, pill.job, cutoff) is False

    @precondition(lambda self: self._finishing() and self._any_held())
    @rule(revive_twice=st.booleans())
    def dead_letter_then_revive(self, revive_twice: bool) -> None:
        """A held job is dead-lettered, then an operator revives it: it is queued and
        recorded pending in one step, and only once."""
        i, w = next((i, w) for i, w in self.where.items() if isinstance(w, Held))
        claim = Claim(self.jobs[i], w.token, self.jobs[i].queue, w.locked_at)
        running = start(self.jobs[i], self.now).unwrap()
        dead = dead_letter(running, ErrorInfo("boom", "model", False), self.now).job
        finish: Any = self.queue.finish
        assert finish(claim, dead) is True
        del self.where[i]
        self._outcome_written()
        revival = decide_revive(dead, self.now)
        assert revival is not None
        revive: Any = self.queue.revive
        note(f"dead letter and revive {i.int} twice={revive_twice}")
        assert revive(revival.dead, revival.job) is True
        if revive_twice:
            assert revive(revival.dead, revival.job) is False, "revived a job twice"
        assert self.store is not None
        assert self.store.get(i) == revival.job
        self.jobs[i] = revival.job
        self._to_ready(i, revival.job.priority)

    @precondition(lambda self: self._cancelling() and bool(self._unheld()))
    @rule(data=st.data())
    def cancel_a_queued_job(self, data: st.DataObject) -> None:
        """A ready or parked job is cancelled: out of the queue and recorded cancelled
        in one step, and only once."""
        i = data.draw(st.sampled_from(sorted(self._unheld())))
        decision = decide_cancel(self.jobs[i], self.now, in_flight=False)
        assert isinstance(decision, Cancel)
        note(f"cancel queued {i.int}")
        assert self.queue.cancel(decision.job) is True
        assert self.queue.cancel(decision.job) is False, "cancelled a job twice"
        del self.where[i]
        self.jobs[i] = decision.job
        assert self.store is not None and self.store.get(i) == decision.job

    @precondition(lambda self: self._cancelling() and self._any_held())
    @rule(data=st.data())
    def cancel_a_held_job(self, data: st.DataObject) -> None:
        """A held job's cancel is a request: its holder's outcome writes are refused
        until it is recorded cancelled, which clears the request."""
        held = sorted(i for i, w in self.where.items() if isinstance(w, Held))
        i = data.draw(st.sampled_from(held))
        w = self.where[i]
        claim = Claim(self.jobs[i], w.token, self.jobs[i].queue, w.locked_at)
        note(f"cancel held {i.int}")
        assert self.queue.request_cancel(i, self.now)
        assert self.queue.cancel_requested(i)
        running = start(self.jobs[i], self.now).unwrap()
        done = decide(running, Succeeded(1), self.now, Policies(), 0.5).job
        finish: Any = self.queue.finish
        assert finish(claim, done) is False, "completed a job whose cancel was requested"
        assert self.queue.replace(claim, self.jobs[i]) is False
        record = cancel_claimed(running, self.now, Succeeded(1)).job
        assert self.queue.finish_cancelled(claim, record) is True
        assert not self.queue.cancel_requested(i)
        del self.where[i]
        self.jobs[i] = record
        assert self.store is not None and self.store.get(i) == record
