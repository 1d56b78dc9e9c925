"""Cases of claim order and placement: FIFO within a priority, priority order,
separate queues, upsert by id, bulk enqueue, the figures for status, and names
refused before any backend sees them."""

from __future__ import annotations

from datetime import timedelta

import attrs
from returns.result import Failure

from ....core import JobStatus, Priority, create_job, freeze, reclaim_cutoff, start
from ..case import case
from ..subject import BATCHING, Subject
from ..support import T0, claim, drain_ids, make_job, only_claim


@case()
def fifo_within_a_priority(s: Subject) -> None:
    jobs = [make_job(args={"i": i}) for i in range(20)]
    for job in jobs:
        s.queue.enqueue(job)
    assert drain_ids(s) == [j.id for j in jobs]


@case()
def priority_order(s: Subject) -> None:
    jobs = [make_job(priority=p) for p in ("low", "normal", "high", "critical") for _ in range(3)]
    for job in jobs:
        s.queue.enqueue(job)
    want = sorted(jobs, key=lambda j: (j.priority.rank, jobs.index(j)))
    assert drain_ids(s) == [j.id for j in want]


@case()
def queues_are_separate(s: Subject) -> None:
    a, c = make_job(queue="a"), make_job(queue="c")
    s.queue.enqueue(a)
    s.queue.enqueue(c)
    assert s.queue.dequeue("nope", T0) is None
    assert drain_ids(s, "c") == [c.id]
    assert drain_ids(s, "a") == [a.id]


@case()
def upsert_by_id(s: Subject) -> None:
    """One job per id, the latest version; an upsert moves it, to parked too."""
    job = make_job()
    s.queue.enqueue(job)
    s.queue.enqueue(attrs.evolve(job, priority=Priority.HIGH))
    assert s.queue.counts(T0)["default"].ready == 1
    assert claim(s).job == attrs.evolve(job, priority=Priority.HIGH)
    assert s.queue.dequeue("default", T0) is None
    other = make_job(queue="moved")
    s.queue.enqueue(other)
    parked = attrs.evolve(other, status=JobStatus.SCHEDULED, run_at=T0 + timedelta(seconds=5))
    s.queue.enqueue(parked)
    c = s.queue.counts(T0)["moved"]
    assert (c.ready, c.scheduled, c.in_flight, c.oldest_ready_at) == (0, 1, 0, None)


@case()
def a_job_back_on_its_queue_goes_behind_the_ready_ones(s: Subject) -> None:
    """Re-enqueued while ready, replaced by its holder, or reclaimed after its lease: a
    job that comes back to its queue is claimed after the jobs already ready there."""
    later = T0 + timedelta(seconds=2)
    for queue in ("re-enqueued", "replaced", "reclaimed"):
        a, b = make_job(queue=queue), make_job(queue=queue)
        s.queue.enqueue(a)
        s.queue.enqueue(b)
        if queue == "re-enqueued":
            s.queue.enqueue(a)
        else:
            held = claim(s, queue=queue)
            assert held.job.id == a.id
            back = attrs.evolve(start(held.job, T0).unwrap(), status=JobStatus.PENDING)
            if queue == "replaced":
                assert s.queue.replace(held, back)
            else:
                cutoff = reclaim_cutoff(later, 1000)
                assert s.queue.reclaim(held, back, cutoff)
        assert drain_ids(s, queue, now=later) == [b.id, a.id], queue


@case()
def bulk_enqueue_keeps_list_order_and_upserts(s: Subject) -> None:
    """One row per id, the last version of a repeated id wins (even within one
    batch), parked jobs are parked, and an empty batch is no error."""
    jobs = [make_job(args={"i": i}) for i in range(50)]
    parked = make_job(delay=timedelta(seconds=5))
    s.queue.enqueue(jobs[0])
    s.queue.enqueue_many([*jobs, parked, attrs.evolve(jobs[3], priority=Priority.HIGH)])
    c = s.queue.counts(T0)["default"]
    assert (c.ready, c.scheduled) == (50, 1), "one row per id, the parked one scheduled"
    first = claim(s)
    assert first.job.id == jobs[3].id and first.job.priority is Priority.HIGH, (
        "the last version of a repeated id wins"
    )
    assert s.queue.ack(first)
    assert drain_ids(s) == [j.id for j in jobs if j is not jobs[3]]
    s.queue.enqueue_many([])


@case(BATCHING)
def bulk_enqueue_takes_a_claimed_job_from_its_holder(s: Subject) -> None:
    held, fresh = make_job(args={"v": 1}), make_job()
    s.queue.enqueue(held)
    taken_first = claim(s)
    assert taken_first.job.id == held.id
    s.queue.enqueue_many([attrs.evolve(held, args=freeze({"v": 2})), fresh])
    assert s.queue.ack(taken_first) is False, "the holder's claim went with the re-enqueue"
    taken = [only_claim(c) for c in s.queue.dequeue_many("default", T0, 10)]
    assert [(c.job.id, dict(c.job.args)) for c in taken] == [
        (held.id, {"v": 2}),
        (fresh.id, {}),
    ]


@case(BATCHING)
def parked_jobs_of_a_bulk_enqueue_come_due_in_list_order(s: Subject) -> None:
    wait = timedelta(seconds=30)
    parked = [make_job(args={"i": i}, delay=wait) for i in range(4)]
    s.queue.enqueue_many([parked[2], parked[0], parked[3], parked[1]])
    assert s.queue.dequeue("default", T0) is None, "none is due yet"
    taken = [only_claim(c) for c in s.queue.dequeue_many("default", T0 + wait, 10)]
    assert [c.job.args["i"] for c in taken] == [2, 0, 3, 1]


@case()
def counts_for_status(s: Subject) -> None:
    s.queue.enqueue(make_job(now=T0 - timedelta(seconds=3)))
    s.queue.enqueue(make_job())
    s.queue.enqueue(make_job(delay=timedelta(minutes=1)))
    s.queue.enqueue(make_job(queue="other"))
    claim(s, queue="other")
    counts = s.queue.counts(T0)
    d, o = counts["default"], counts["other"]
    assert (d.ready, d.scheduled, d.in_flight) == (2, 1, 0)
    assert (o.ready, o.scheduled, o.in_flight) == (0, 0, 1)
    assert d.oldest_ready_at == T0 - timedelta(seconds=3)
    assert o.oldest_ready_at is None, "a queue with nothing ready has no oldest ready job"


@case()
def hostile_names_are_rejected_before_any_backend(s: Subject) -> None:
    for name in ("a'b", "a;b", "a\x00b", "x" * 10_000, "{x}", "a:b", ""):
        made = create_job(id=make_job().id, job_type=name, now=T0, queue=name)
        assert isinstance(made, Failure)
        assert {"job_type", "queue"} <= set(made.failure().fields)
    assert s.queue.dequeue("a'b", T0) is None


ORDER_CASES = (
    fifo_within_a_priority,
    priority_order,
    queues_are_separate,
    upsert_by_id,
    a_job_back_on_its_queue_goes_behind_the_ready_ones,
    bulk_enqueue_keeps_list_order_and_upserts,
    bulk_enqueue_takes_a_claimed_job_from_its_holder,
    parked_jobs_of_a_bulk_enqueue_come_due_in_list_order,
    counts_for_status,
    hostile_names_are_rejected_before_any_backend,
)
