"""A reusable model check for `JobQueue` adapters.

`queue_machine(factory)` returns a hypothesis `RuleBasedStateMachine` that runs
random sequences of enqueue, dequeue (which promotes due jobs itself), batched
claim, start of a prefetched claim, ack, stale ack, extend, replace, schedule,
promote, reclaim, batched finish, the lease keeper's poison-pill write racing a
renewal, an operator's revive, the cancel of a queued or a held job, and a claim
under caps (for a `LimitedJobQueue`: per partition and for the queue), against
the adapter and against a model simpler than any adapter: a dict of where each job
is. Write your own adapter, hand its factory to this machine, and it is held to the
same contract as the built-in ones::

    TestMyQueue = queue_machine(lambda: (MyQueue(...), lambda: None)).TestCase

A factory may also return the store the queue finishes into, as a third item;
then the finishing rules (batched finish, guarded dead letter, revive) run too.
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

from ..core import (
    Cancel,
    Complete,
    ErrorInfo,
    Job,
    JobStatus,
    Priority,
    Succeeded,
    cancel_claimed,
    create_job,
    dead_letter,
    decide,
    decide_cancel,
    decide_revive,
    promotion_key,
    reclaim_cutoff,
    start,
)
from ..core.decisions import decide_reclaim
from ..core.limits import Cap, QueueLimits
from ..core.policies import LeasePolicy, Policies
from ..shell.ports import (
    BadClaim,
    BatchingJobQueue,
    CancellingJobQueue,
    Claim,
    JobStore,
    LimitedJobQueue,
)

QUEUES = ("q1", "q2")
#: Model jobs alternate between these partitions.
PARTITIONS = ("p0", "p1")
#: The caps of `dequeue_limited_under_caps`: 1 running per partition, 2 in the queue
#: (small, so that random runs reach them often).
CAPS = QueueLimits(max_running=2, caps=(Cap(1, per_partition=True),))
LEASE_MS = 1000
START = datetime(2026, 1, 1, tzinfo=UTC)


@attrs.define
class _Ready:
    priority: Priority
    seq: int


@attrs.define
class _Parked:
    run_at: datetime
    seq: int  # the enqueue order, the promotion tie-break


@attrs.define
class _Held:
    token: str
    locked_at: datetime


Factory = Callable[[], tuple[Any, ...]]


def queue_machine(factory: Factory, *, max_examples: int = 40) -> type[RuleBasedStateMachine]:
    """A state machine class checking the adapter built by `factory` against the model.

    `factory()` returns a fresh, empty queue and a cleanup callable.
    """

    class QueueMachine(RuleBasedStateMachine):
        claims = Bundle("claims")

        def __init__(self) -> None:
            super().__init__()
            made = factory()
            self.queue, self.cleanup = made[0], made[1]
            self.store: JobStore | None = made[2] if len(made) > 2 else None
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
                partition=PARTITIONS[self.counter % len(PARTITIONS)],
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

        @rule(queue=st.sampled_from(QUEUES), priority=st.sampled_from(list(Priority)))
        def enqueue_new_with_a_fresh_id_places_it(self, queue: str, priority: Priority) -> None:
            job = self._new_job(queue, priority, 0)
            note(f"enqueue_new {job.id.int} {queue} {priority.value}")
            assert self.queue.enqueue_new(job) is None, "a fresh id was taken for a known one"
            self.jobs[job.id] = job
            self._to_ready(job.id, priority)

        def _known(self) -> list[UUID]:
            """Ids the adapter still knows: queued, held, or recorded in the store."""
            return sorted(
                i
                for i in self.jobs
                if i in self.where or (self.store is not None and self.store.get(i) is not None)
            )

        @precondition(lambda self: bool(self._known()))
        @rule(data=st.data(), delay_ms=st.sampled_from([0, 500]))
        def enqueue_new_with_a_known_id_returns_the_job_there(
            self, data: st.DataObject, delay_ms: int
        ) -> None:
            """A second job under a known id writes nothing, in any state: the one there
            comes back with its own args, and its place in the queue is unchanged."""
            i = data.draw(st.sampled_from(self._known()))
            known = self.jobs[i]
            elsewhere = QUEUES[1] if known.queue == QUEUES[0] else QUEUES[0]
            other = attrs.evolve(self._new_job(elsewhere, Priority.CRITICAL, delay_ms), id=i)
            note(f"enqueue_new again {i.int}")
            there = self.queue.enqueue_new(other)
            assert there is not None, "a job was written over a known id"
            assert there.id == i and there.args == known.args, "a known job's args were replaced"

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
            self._park(job)

        def _park(self, job: Job) -> None:
            self.seq += 1
            self.where[job.id] = _Parked(job.run_at, self.seq)

        def _promote_model(self, queue: str | None) -> int:
            """Due parked jobs go behind the ready ones, one by one in promotion order."""
            due = sorted(
                (
                    (promotion_key((w.run_at - START) // timedelta(microseconds=1), w.seq), i)
                    for i, w in self.where.items()
                    if isinstance(w, _Parked)
                    and w.run_at <= self.now
                    and (queue is None or self.jobs[i].queue == queue)
                ),
            )
            for _, i in due:
                self._to_ready(i, self.jobs[i].priority)
            return len(due)

        def _expect_claim(self, queue: str, claim: Claim | None) -> Claim | None:
            """Check `claim` is the best ready job of `queue` and move it to held."""
            assert not isinstance(claim, BadClaim), f"a model job did not decode: {claim}"
            ready = {
                i: w
                for i, w in self.where.items()
                if isinstance(w, _Ready) and self.jobs[i].queue == queue
            }
            if not ready:
                assert claim is None, "claimed from an empty queue"
                return None
            assert claim is not None, "ready work but nothing claimed"
            best = min((w.priority.rank, w.seq) for w in ready.values())
            got = ready.get(claim.job.id)
            assert got is not None, "claimed a job that is not ready"
            assert (got.priority.rank, got.seq) == best, (
                f"claimed {(got.priority.value, got.seq)} before {best}: priority, then FIFO "
                "(due jobs promoted by run_at, then enqueue order)"
            )
            assert claim.job.id in self.jobs and claim.job == self.jobs[claim.job.id]
            self.where[claim.job.id] = _Held(claim.token, self.now)
            return claim

        @rule(target=claims, queue=st.sampled_from(QUEUES))
        def dequeue(self, queue: str) -> Claim | None:
            claim = self.queue.dequeue(queue, self.now)
            note(f"dequeue {queue} -> {claim.job.id.int if isinstance(claim, Claim) else None}")
            self._promote_model(queue)
            got = self._expect_claim(queue, claim)
            assert got is None or got.started, "a single claim is started"
            return got

        @precondition(lambda self: isinstance(self.queue, BatchingJobQueue))
        @rule(target=claims, queue=st.sampled_from(QUEUES), limit=st.integers(1, 4))
        def dequeue_many(self, queue: str, limit: int) -> Claim | None:
            batch = list(self.queue.dequeue_many(queue, self.now, limit))
            note(f"dequeue_many {queue} {limit} -> {[c.job.id.int for c in batch]}")
            self._promote_model(queue)
            ready = sum(
                isinstance(w, _Ready) and self.jobs[i].queue == queue for i, w in self.where.items()
            )
            assert len(batch) == min(limit, ready), f"claimed {len(batch)} of {ready} ready"
            for claim in batch:
                assert not claim.started, "a batched claim is prefetched until started"
                self._expect_claim(queue, claim)
            return batch[-1] if batch else None

        @precondition(lambda self: isinstance(self.queue, LimitedJobQueue))
        @rule(target=claims, queue=st.sampled_from(QUEUES), want=st.integers(1, 4))
        def dequeue_limited_under_caps(self, queue: str, want: int) -> Claim | None:
            """A claim under `CAPS`: the oldest ready jobs in priority order, passing
            over those whose partition (or the queue) already runs its cap, where
            running is every held claim of the queue, stale ones included."""
            got = self.queue.dequeue_limited(queue, self.now, want, CAPS)
            batch = list(got.claims)
            note(f"dequeue_limited {queue} {want} -> {[c.job.id.int for c in batch]}")
            self._promote_model(queue)
            held = [self.jobs[i] for i, w in self.where.items() if isinstance(w, _Held)]
            running = [job.partition_key for job in held if job.queue == queue]
            ready = sorted(
                ((w.priority.rank, w.seq), i)
                for i, w in self.where.items()
                if isinstance(w, _Ready) and self.jobs[i].queue == queue
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
                self.where[claim.job.id] = _Held(claim.token, self.now)
            return batch[-1] if batch else None

        @precondition(lambda self: isinstance(self.queue, BatchingJobQueue))
        @rule(target=claims, claim=claims)
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
            self.where[claim.job.id] = _Held(begun.token, self.now)
            return cast("Claim", begun)

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
                    self._park(successor)
                else:
                    self._to_ready(claim.job.id, successor.priority)

        @rule(ms=st.sampled_from([1, 250, 700, 1500, 3000]))
        def tick(self, ms: int) -> None:
            self.now += timedelta(milliseconds=ms)
            note(f"clock +{ms}ms")

        @rule()
        def promote(self) -> None:
            moved = self.queue.promote_due(self.now)
            due = self._promote_model(None)
            note(f"promote -> {moved} (model {due})")
            assert moved == due

        @precondition(lambda self: any(isinstance(w, _Held) for w in self.where.values()))
        @rule()
        def reclaim(self) -> None:
            cutoff = reclaim_cutoff(self.now, LEASE_MS)
            found = self.queue.abandoned(cutoff)
            expected = {
                i for i, w in self.where.items() if isinstance(w, _Held) and w.locked_at < cutoff
            }
            claims = [c for c in found if isinstance(c, Claim)]
            assert len(claims) == len(found), f"a model job did not decode: {found}"
            note(f"reclaim {sorted(c.job.id.int for c in claims)}, model {sorted(expected)}")
            assert {c.job.id for c in claims} == expected
            policy = LeasePolicy(lease_ms=LEASE_MS, max_reclaims=1000)
            for claim in claims:
                held = self.where[claim.job.id]
                assert isinstance(held, _Held) and claim.token == held.token
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

        def _finishing(self) -> bool:
            return self.store is not None and bool(
                getattr(self.queue, "finishes_with", lambda _: False)(self.store)
            )

        @precondition(lambda self: self._finishing())
        @rule(data=st.data())
        def finish_many(self, data: st.DataObject) -> None:
            """Held claims (and stale ones) finished in one call: each fenced on its own."""
            held = [(i, w) for i, w in self.where.items() if isinstance(w, _Held)]
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

        @precondition(
            lambda self: (
                self._finishing() and any(isinstance(w, _Held) for w in self.where.values())
            )
        )
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
            self.where[claim.job.id] = _Held(claim.token, self.now)
            running = start(claim.job, self.now).unwrap()
            pill = decide_reclaim(running, self.now, LeasePolicy(LEASE_MS, max_reclaims=0), cutoff)
            note(f"poison pill {claim.job.id.int} after renewal")
            assert pill.job.status is JobStatus.FAILED
            finish: Any = self.queue.finish
            assert finish(claim, pill.job, abandoned_before=cutoff) is False
            assert self.queue.reclaim(claim, pill.job, cutoff) is False

        @precondition(
            lambda self: (
                self._finishing() and any(isinstance(w, _Held) for w in self.where.values())
            )
        )
        @rule(revive_twice=st.booleans())
        def dead_letter_then_revive(self, revive_twice: bool) -> None:
            """A held job is dead-lettered, then an operator revives it: it is queued and
            recorded pending in one step, and only once."""
            i, w = next((i, w) for i, w in self.where.items() if isinstance(w, _Held))
            claim = Claim(self.jobs[i], w.token, self.jobs[i].queue, w.locked_at)
            running = start(self.jobs[i], self.now).unwrap()
            dead = dead_letter(running, ErrorInfo("boom", "model", False), self.now).job
            finish: Any = self.queue.finish
            assert finish(claim, dead) is True
            del self.where[i]
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

        def _cancelling(self) -> bool:
            return self._finishing() and isinstance(self.queue, CancellingJobQueue)

        @precondition(
            lambda self: (
                self._cancelling() and any(not isinstance(w, _Held) for w in self.where.values())
            )
        )
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

        def _unheld(self) -> list[UUID]:
            return [i for i, w in self.where.items() if not isinstance(w, _Held)]

        @precondition(
            lambda self: (
                self._cancelling() and any(isinstance(w, _Held) for w in self.where.values())
            )
        )
        @rule(data=st.data())
        def cancel_a_held_job(self, data: st.DataObject) -> None:
            """A held job's cancel is a request: its holder's outcome writes are refused
            until it is recorded cancelled, which clears the request."""
            held = sorted(i for i, w in self.where.items() if isinstance(w, _Held))
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
