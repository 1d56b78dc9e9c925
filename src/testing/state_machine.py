"""A reusable model check for `JobQueue` adapters.

`queue_machine(factory)` returns a hypothesis `RuleBasedStateMachine` that runs
random sequences of enqueue, dequeue, ack, stale ack, extend, replace, schedule,
promote and reclaim against the adapter and against a model simpler than any
adapter: a dict of where each job is. Write your own adapter, hand its factory
to this machine, and it is held to the same contract as the built-in ones::

    TestMyQueue = queue_machine(lambda: (MyQueue(...), lambda: None)).TestCase
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, cast
from uuid import UUID

import attrs
from hypothesis import note, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from ..core import Job, JobStatus, Priority, create_job, reclaim_cutoff, start
from ..core.decisions import decide_reclaim
from ..core.policies import LeasePolicy
from ..shell.ports import BadClaim, Claim, JobQueue

QUEUES = ("q1", "q2")
LEASE_MS = 1000
START = datetime(2026, 1, 1, tzinfo=UTC)


@attrs.define
class _Ready:
    priority: Priority
    seq: int


@attrs.define
class _Parked:
    run_at: datetime


@attrs.define
class _Held:
    token: str
    locked_at: datetime


Factory = Callable[[], tuple[JobQueue, Callable[[], None]]]


def queue_machine(factory: Factory, *, max_examples: int = 40) -> type[RuleBasedStateMachine]:
    """A state machine class checking the adapter built by `factory` against the model.

    `factory()` returns a fresh, empty queue and a cleanup callable.
    """

    class QueueMachine(RuleBasedStateMachine):
        claims = Bundle("claims")

        def __init__(self) -> None:
            super().__init__()
            self.queue, self.cleanup = factory()
            self.now = START
            self.seq = 0
            self.where: dict[UUID, Any] = {}
            self.jobs: dict[UUID, Job] = {}
            self.counter = 0

        @initialize()
        def empty(self) -> None:
            assert sum(c.ready + c.scheduled + c.in_flight for c in self._counts()) == 0

        def _counts(self) -> list[Any]:
            return list(self.queue.counts(self.now).values())

        def _new_job(self, queue: str, priority: Priority, delay_ms: int) -> Job:
            self.counter += 1
            job_id = UUID(int=self.counter)
            return create_job(
                id=job_id,
                job_type="model-job",
                args={"n": self.counter},
                now=self.now,
                queue=queue,
                priority=priority,
                delay=timedelta(milliseconds=delay_ms),
            ).unwrap()

        def _to_ready(self, job_id: UUID, priority: Priority) -> None:
            self.seq += 1
            self.where[job_id] = _Ready(priority, self.seq)

        @rule(queue=st.sampled_from(QUEUES), priority=st.sampled_from(list(Priority)))
        def enqueue_ready(self, queue: str, priority: Priority) -> None:
            job = self._new_job(queue, priority, 0)
            note(f"enqueue {job.id.int} {queue} {priority.value}")
            self.queue.enqueue(job)
            self.jobs[job.id] = job
            self._to_ready(job.id, priority)

        @rule(
            queue=st.sampled_from(QUEUES),
            priority=st.sampled_from(list(Priority)),
            delay=st.integers(1, 3000),
        )
        def enqueue_scheduled(self, queue: str, priority: Priority, delay: int) -> None:
            job = self._new_job(queue, priority, delay)
            note(f"schedule {job.id.int} {queue} +{delay}ms")
            self.queue.enqueue(job)
            self.jobs[job.id] = job
            self.where[job.id] = _Parked(job.run_at)

        @rule(target=claims, queue=st.sampled_from(QUEUES))
        def dequeue(self, queue: str) -> Claim | None:
            claim = self.queue.dequeue(queue, self.now)
            assert not isinstance(claim, BadClaim), f"a model job did not decode: {claim}"
            ready = {
                i: w
                for i, w in self.where.items()
                if isinstance(w, _Ready) and self.jobs[i].queue == queue
            }
            note(f"dequeue {queue} -> {claim.job.id.int if claim else None}")
            if not ready:
                assert claim is None, "claimed from an empty queue"
                return None
            assert claim is not None, "ready work but nothing claimed"
            best = min((w.priority.rank, w.seq) for w in ready.values())
            got = ready.get(claim.job.id)
            assert got is not None, "claimed a job that is not ready"
            assert (got.priority.rank, got.seq) == best, (
                f"claimed {(got.priority.value, got.seq)} before {best}: priority, then FIFO"
            )
            assert claim.job.id in self.jobs and claim.job == self.jobs[claim.job.id]
            self.where[claim.job.id] = _Held(claim.token, self.now)
            return claim

        def _live(self, claim: Claim | None) -> bool:
            if claim is None:
                return False
            w = self.where.get(claim.job.id)
            return isinstance(w, _Held) and w.token == claim.token

        # Claims stay in the bundle after ack or replace, so later rules reuse them as
        # stale claims: every port write must then refuse them.
        @rule(claim=claims)
        def ack(self, claim: Claim | None) -> None:
            if claim is None:
                return
            live = self._live(claim)
            note(f"ack {claim.job.id.int} live={live}")
            assert self.queue.ack(claim) is live
            if live:
                del self.where[claim.job.id]

        @rule(claim=claims)
        def stale_ack(self, claim: Claim | None) -> None:
            """An ack with a token that no longer holds the job changes nothing."""
            if claim is None or self._live(claim):
                return
            note(f"stale ack {claim.job.id.int}")
            assert self.queue.ack(claim) is False

        @rule(claim=claims)
        def extend(self, claim: Claim | None) -> None:
            if claim is None:
                return
            live = self._live(claim)
            note(f"extend {claim.job.id.int} live={live}")
            assert self.queue.extend(claim, self.now) is live
            if live:
                self.where[claim.job.id] = _Held(claim.token, self.now)

        @rule(claim=claims, park_ms=st.sampled_from([0, 500]))
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
                    self.where[claim.job.id] = _Parked(successor.run_at)
                else:
                    self._to_ready(claim.job.id, successor.priority)

        @rule(ms=st.sampled_from([1, 250, 700, 1500, 3000]))
        def tick(self, ms: int) -> None:
            self.now += timedelta(milliseconds=ms)
            note(f"clock +{ms}ms")

        @rule()
        def promote(self) -> None:
            moved = self.queue.promote_due(self.now)
            due = [
                i for i, w in self.where.items() if isinstance(w, _Parked) and w.run_at <= self.now
            ]
            note(f"promote -> {moved} (model {len(due)})")
            assert moved == len(due)
            # One promotion is one step: its jobs share a place in FIFO order.
            self.seq += 1
            for i in due:
                self.where[i] = _Ready(self.jobs[i].priority, self.seq)

        @precondition(lambda self: any(isinstance(w, _Held) for w in self.where.values()))
        @rule()
        def reclaim(self) -> None:
            cutoff = reclaim_cutoff(self.now, LEASE_MS)
            found = self.queue.abandoned(cutoff)
            expected = {
                i for i, w in self.where.items() if isinstance(w, _Held) and w.locked_at < cutoff
            }
            note(f"reclaim {sorted(c.job.id.int for c in found)}, model {sorted(expected)}")
            assert {c.job.id for c in found} == expected
            self.seq += 1
            for claim in found:
                running = start(claim.job, self.now).unwrap()
                decision = decide_reclaim(
                    running, self.now, LeasePolicy(lease_ms=LEASE_MS, max_reclaims=1000)
                )
                assert self.queue.reclaim(claim, decision.job, cutoff)
                # A second reclaim of the same claim must not move it again.
                assert not self.queue.reclaim(claim, decision.job, cutoff)
                self.jobs[claim.job.id] = decision.job
                self.where[claim.job.id] = _Ready(decision.job.priority, self.seq)

        @precondition(lambda self: any(isinstance(w, _Held) for w in self.where.values()))
        @rule(target=claims, queue=st.sampled_from(QUEUES))
        def lease_expires_and_another_worker_claims(self, queue: str) -> Claim | None:
            """The common road to a stale claim: its holder stalls past the lease."""
            self.tick(2 * LEASE_MS)
            self.reclaim()
            return cast("Claim | None", self.dequeue(queue))

        @invariant()
        def counts_match_the_model(self) -> None:
            counts = self.queue.counts(self.now)
            for name in QUEUES:
                c = counts.get(name)
                mine = [w for i, w in self.where.items() if self.jobs[i].queue == name]
                want = (
                    sum(isinstance(w, _Ready) for w in mine),
                    sum(isinstance(w, _Parked) for w in mine),
                    sum(isinstance(w, _Held) for w in mine),
                )
                got = (c.ready, c.scheduled, c.in_flight) if c else (0, 0, 0)
                assert got == want, f"{name}: counts (ready, scheduled, in flight) {got} != {want}"

        def teardown(self) -> None:
            self.cleanup()

    QueueMachine.TestCase.settings = settings(
        max_examples=max_examples, stateful_step_count=30, deadline=None
    )
    return QueueMachine
