"""The model the queue machine checks an adapter against, and the machine's base.

The model is simpler than any adapter: a dict of where each job is (`Ready` with
its priority and FIFO position, `Parked` with its due time, `Held` by a claim's
token), the jobs as last written, and a manual clock. `ModelMachine` keeps it, builds
model jobs, moves them in the model, and checks after every step that the adapter's
counts agree; the rules (`enqueue_rules`, `claim_rules`, `holder_rules`,
`finish_rules`) do each operation on both.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import attrs
from hypothesis import note
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, initialize, invariant, rule

from ...core import Job, Priority, create_job, promotion_key
from ...core.limits import Cap, QueueLimits
from ...shell.ports import BadClaim, CancellingJobQueue, Claim, JobStore

QUEUES = ("q1", "q2")
#: Model jobs alternate between these partitions.
PARTITIONS = ("p0", "p1")
#: The caps of `dequeue_limited_under_caps`: 1 running per partition, 2 in the queue
#: (small, so that random runs reach them often).
CAPS = QueueLimits(max_running=2, caps=(Cap(1, per_partition=True),))
LEASE_MS = 1000
START = datetime(2026, 1, 1, tzinfo=UTC)

Factory = Callable[[], tuple[Any, ...]]

#: The claims rules return. They stay in the bundle after ack or replace, so later
#: rules reuse them as stale claims: every port write must then refuse them.
CLAIMS: Bundle[Claim | None] = Bundle("claims")


@attrs.define
class Ready:
    priority: Priority
    seq: int


@attrs.define
class Parked:
    run_at: datetime
    seq: int  # the enqueue order, the promotion tie-break


@attrs.define
class Held:
    token: str
    locked_at: datetime


class ModelMachine(RuleBasedStateMachine):
    """The adapter under test (`made`: the queue, a cleanup callable and optionally
    the store it finishes into) beside the model, and what every rule shares."""

    claims = CLAIMS

    def __init__(self, made: tuple[Any, ...]) -> None:
        super().__init__()
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
        self.where[job_id] = Ready(priority, self.seq)

    def _park(self, job: Job) -> None:
        self.seq += 1
        self.where[job.id] = Parked(job.run_at, self.seq)

    def _known(self) -> list[UUID]:
        """Ids the adapter still knows: queued, held, or recorded in the store."""
        return sorted(
            i
            for i in self.jobs
            if i in self.where or (self.store is not None and self.store.get(i) is not None)
        )

    def _promote_model(self, queue: str | None) -> int:
        """Due parked jobs go behind the ready ones, one by one in promotion order."""
        due = sorted(
            (
                (promotion_key((w.run_at - START) // timedelta(microseconds=1), w.seq), i)
                for i, w in self.where.items()
                if isinstance(w, Parked)
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
            if isinstance(w, Ready) and self.jobs[i].queue == queue
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
        self.where[claim.job.id] = Held(claim.token, self.now)
        return claim

    def _live(self, claim: Claim | None) -> bool:
        if claim is None:
            return False
        w = self.where.get(claim.job.id)
        return isinstance(w, Held) and w.token == claim.token

    def _outcome_written(self) -> None:
        """A rule wrote an outcome and goes on to write more in the same step: the
        workflow rules settle their model here, as the adapter did in that write."""

    def _any_held(self) -> bool:
        return any(isinstance(w, Held) for w in self.where.values())

    def _unheld(self) -> list[UUID]:
        return [i for i, w in self.where.items() if not isinstance(w, Held)]

    def _finishing(self) -> bool:
        return self.store is not None and bool(
            getattr(self.queue, "finishes_with", lambda _: False)(self.store)
        )

    def _cancelling(self) -> bool:
        return self._finishing() and isinstance(self.queue, CancellingJobQueue)

    @rule(ms=st.sampled_from([1, 250, 700, 1500, 3000]))
    def tick(self, ms: int) -> None:
        self.now += timedelta(milliseconds=ms)
        note(f"clock +{ms}ms")

    @invariant()
    def counts_match_the_model(self) -> None:
        counts = self.queue.counts(self.now)
        for name in QUEUES:
            c = counts.get(name)
            mine = [w for i, w in self.where.items() if self.jobs[i].queue == name]
            want = (
                sum(isinstance(w, Ready) for w in mine),
                sum(isinstance(w, Parked) for w in mine),
                sum(isinstance(w, Held) for w in mine),
            )
            got = (c.ready, c.scheduled, c.in_flight) if c else (0, 0, 0)
            assert got == want, f"{name}: counts (ready, scheduled, in flight) {got} != {want}"

    def teardown(self) -> None:
        self.cleanup()
