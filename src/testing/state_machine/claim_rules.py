"""The queue machine's rules that claim: one job, a prefetched batch, a batch under
caps, the start of a prefetched claim, and the lease keeper's reclaim."""

from __future__ import annotations

from typing import cast
from uuid import UUID

from hypothesis import note
from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from ...core import reclaim_cutoff, start
from ...core.decisions import decide_reclaim
from ...core.policies import LeasePolicy
from ...shell.ports import BatchingJobQueue, Claim, LimitedJobQueue
from .model import CAPS, CLAIMS, LEASE_MS, QUEUES, Held, ModelMachine, Ready


class ClaimRules(ModelMachine):
    @rule(target=CLAIMS, queue=st.sampled_from(QUEUES))
    def dequeue(self, queue: str) -> Claim | None:
        claim = self.queue.dequeue(queue, self.now)
        note(f"dequeue {queue} -> {claim.job.id.int if isinstance(claim, Claim) else None}")
        self._promote_model(queue)
        got = self._expect_claim(queue, claim)
        assert got is None or got.started, "a single claim is started"
        return got

    @precondition(lambda self: isinstance(self.queue, BatchingJobQueue))
    @rule(target=CLAIMS, queue=st.sampled_from(QUEUES), limit=st.integers(1, 4))
    def dequeue_many(self, queue: str, limit: int) -> Claim | None:
        batch = list(self.queue.dequeue_many(queue, self.now, limit))
        note(f"dequeue_many {queue} {limit} -> {[c.job.id.int for c in batch]}")
        self._promote_model(queue)
        ready = sum(
            isinstance(w, Ready) and self.jobs[i].queue == queue for i, w in self.where.items()
        )
        assert len(batch) == min(limit, ready), f"claimed {len(batch)} of {ready} ready"
        for claim in batch:
            assert not claim.started, "a batched claim is prefetched until started"
            self._expect_claim(queue, claim)
        return batch[-1] if batch else None

    @precondition(lambda self: isinstance(self.queue, LimitedJobQueue))
    @rule(target=CLAIMS, queue=st.sampled_from(QUEUES), want=st.integers(1, 4))
    def dequeue_limited_under_caps(self, queue: str, want: int) -> Claim | None:
        """A claim under `CAPS`: the oldest ready jobs in priority order, passing
        over those whose partition (or the queue) already runs its cap, where
        running is every held claim of the queue, stale ones included."""
        got = self.queue.dequeue_limited(queue, self.now, want, CAPS)
        batch = list(got.claims)
        note(f"dequeue_limited {queue} {want} -> {[c.job.id.int for c in batch]}")
        self._promote_model(queue)
        held = [self.jobs[i] for i, w in self.where.items() if isinstance(w, Held)]
        running = [job.partition_key for job in held if job.queue == queue]
        ready = sorted(
            ((w.priority.rank, w.seq), i)
            for i, w in self.where.items()
            if isinstance(w, Ready) and self.jobs[i].queue == queue
        )
        expected: list[UUID] = []
        passed_over = False
        for _, i in ready:
            if len(expected) == want:
                break
            partition = self.jobs[i].partition_key
            if len(running) < 2 and running.count(partition) < 1:
                expected.append(i)
                running.append(partition)
            else:
                passed_over = True
        assert [c.job.id for c in batch] == expected, "caps or claim order broken"
        assert got.held_back is passed_over
        for claim in batch:
            assert isinstance(claim, Claim) and not claim.started
            assert claim.job == self.jobs[claim.job.id]
            self.where[claim.job.id] = Held(claim.token, self.now)
        return batch[-1] if batch else None

    @precondition(lambda self: isinstance(self.queue, BatchingJobQueue))
    @rule(target=CLAIMS, claim=CLAIMS)
    def start_claim(self, claim: Claim | None) -> Claim | None:
        if claim is None or claim.started:
            return None
        live = self._live(claim)
        begun = self.queue.start_claim(claim, self.now)
        note(f"start_claim {claim.job.id.int} live={live} -> {begun is not None}")
        assert (begun is not None) is live
        if begun is None:
            return None
        assert begun.started and begun.job.id == claim.job.id and begun.token != claim.token
        self.where[claim.job.id] = Held(begun.token, self.now)
        return cast("Claim", begun)

    @precondition(lambda self: self._any_held())
    @rule()
    def reclaim(self) -> None:
        cutoff = reclaim_cutoff(self.now, LEASE_MS)
        found = self.queue.abandoned(cutoff)
        expected = {
            i for i, w in self.where.items() if isinstance(w, Held) and w.locked_at < cutoff
        }
        claims = [c for c in found if isinstance(c, Claim)]
        assert len(claims) == len(found), f"a model job did not decode: {found}"
        note(f"reclaim {sorted(c.job.id.int for c in claims)}, model {sorted(expected)}")
        assert {c.job.id for c in claims} == expected
        policy = LeasePolicy(lease_ms=LEASE_MS, max_reclaims=1000)
        for claim in claims:
            held = self.where[claim.job.id]
            assert isinstance(held, Held) and claim.token == held.token
            if claim.started:
                running = start(claim.job, self.now).unwrap()
                decision = decide_reclaim(running, self.now, policy, cutoff)
            else:
                decision = decide_reclaim(claim.job, self.now, policy, cutoff, started=False)
                assert decision.job.metadata.reclaim_count == claim.job.metadata.reclaim_count
            assert self.queue.reclaim(claim, decision.job, cutoff)
            # A second reclaim of the same claim must not move it again.
            assert not self.queue.reclaim(claim, decision.job, cutoff)
            self.jobs[claim.job.id] = decision.job
            self._to_ready(claim.job.id, decision.job.priority)

    @precondition(lambda self: self._any_held())
    @rule(target=CLAIMS, queue=st.sampled_from(QUEUES))
    def lease_expires_and_another_worker_claims(self, queue: str) -> Claim | None:
        """The common road to a stale claim: its holder stalls past the lease."""
        self.tick(2 * LEASE_MS)
        self.reclaim()
        return cast("Claim | None", self.dequeue(queue))
