"""Cases of parked jobs coming due: at their `run_at` to the microsecond, promoted by
the claim itself or by `promote_due`, in the core's promotion order (`run_at`, then
enqueue order), behind the jobs already ready, at their own priority, a bounded
number per claim, and each moved once however many promoters race."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

from ....core import Priority
from ..case import case
from ..subject import BATCHING, PROMOTION_BOUND, Subject
from ..support import MICRO, T0, claim, claims, drain_ids, make_job


@case()
def schedule_then_promote(s: Subject) -> None:
    later_job = make_job(delay=timedelta(seconds=30))
    s.queue.enqueue(later_job)
    assert s.queue.dequeue("default", T0) is None
    assert s.queue.promote_due(T0 + timedelta(seconds=29)) == 0
    assert s.queue.promote_due(T0 + timedelta(seconds=30)) == 1, "due at exactly run_at"
    assert s.queue.promote_due(T0 + timedelta(seconds=31)) == 0, "moved once"
    assert drain_ids(s, now=T0 + timedelta(seconds=30)) == [later_job.id]
    for _ in range(5):
        s.queue.enqueue(make_job(delay=timedelta(seconds=1)))
    moves = [s.queue.promote_due(T0 + timedelta(seconds=1), limit=2) for _ in range(4)]
    assert moves == [2, 2, 1, 0], "promote_due moves at most `limit` jobs a call"


@case()
def a_due_job_is_claimable_at_its_run_at(s: Subject) -> None:
    """No promotion pass stands between `run_at` and the claim, and `run_at` counts to
    the microsecond."""
    run_at = T0 + timedelta(seconds=1, microseconds=500)
    job = make_job(run_at=run_at)
    s.queue.enqueue(job)
    assert s.queue.dequeue("default", run_at - MICRO) is None
    assert s.queue.promote_due(run_at - MICRO) == 0
    assert s.queue.next_due("default") == run_at
    assert claim(s, run_at).job == job
    assert s.queue.next_due("default") is None


@case()
def next_due_is_the_earliest_parked_run_at_of_the_queue(s: Subject) -> None:
    assert s.queue.next_due("default") is None
    soon = T0 + timedelta(seconds=3, microseconds=7)
    s.queue.enqueue(make_job())  # ready: not parked
    s.queue.enqueue(make_job(run_at=T0 + timedelta(seconds=9)))
    s.queue.enqueue(make_job(run_at=soon))
    s.queue.enqueue(make_job(queue="other", run_at=T0 + timedelta(seconds=1)))
    assert s.queue.next_due("default") == soon
    assert s.queue.next_due("other") == T0 + timedelta(seconds=1)
    claim(s, now=soon)  # the ready one; the claim promotes the one due at `soon`
    assert s.queue.next_due("default") == T0 + timedelta(seconds=9)
    assert s.queue.promote_due(T0 + timedelta(seconds=1)) == 1
    assert s.queue.next_due("other") is None


@case()
def a_claim_promotes_its_queues_due_jobs_in_run_at_then_enqueue_order(s: Subject) -> None:
    """Behind the ready job, by `run_at` (to the microsecond), then enqueue order; a
    job not yet due stays parked, and another queue's due job is left to its queue."""
    at = T0 + timedelta(seconds=1)
    later = make_job(run_at=at + timedelta(seconds=1))
    first = make_job(run_at=at)
    ready = make_job()
    sub_ms = make_job(run_at=at + timedelta(microseconds=300))
    ties = [make_job(run_at=at) for _ in range(30)]
    elsewhere = make_job(queue="other", run_at=at)
    not_yet = make_job(run_at=at + timedelta(minutes=1))
    for job in (later, first, ready, sub_ms, *ties, elsewhere, not_yet):
        s.queue.enqueue(job)
    now = at + timedelta(seconds=1)
    order = [claim(s, now).job.id for _ in range(34)]
    assert order == [ready.id, first.id, *(j.id for j in ties), sub_ms.id, later.id]
    assert s.queue.dequeue("default", now) is None
    counts = s.queue.counts(now)
    assert counts["other"].scheduled == 1, "a claim promotes its own queue only"
    assert counts["default"].scheduled == 1, "a job not yet due stays parked"


@case()
def promote_due_moves_in_run_at_then_enqueue_order(s: Subject) -> None:
    delays = [2 if i % 3 == 0 else 1 for i in range(20)]
    jobs = [
        make_job(queue="ab"[i % 2], delay=timedelta(seconds=d), args={"i": i})
        for i, d in enumerate(delays)
    ]
    for job in jobs:
        s.queue.enqueue(job)
    assert s.queue.promote_due(T0 + timedelta(seconds=5), limit=100) == 20
    for name in "ab":
        mine = [i for i in range(20) if jobs[i].queue == name]
        want = [jobs[i].id for i in sorted(mine, key=lambda i: (delays[i], i))]
        assert drain_ids(s, name, now=T0) == want, name  # T0: nothing else could come due


@case()
def promoted_jobs_keep_their_priority_and_go_behind_the_ready_ones(s: Subject) -> None:
    """Promoted by a claim or by `promote_due`, a due job joins its own priority's
    ready jobs, behind those already there, whenever it was enqueued."""
    due_high = make_job(queue="claimed", priority=Priority.HIGH, delay=timedelta(seconds=1))
    ready_low = make_job(queue="claimed", priority=Priority.LOW)
    ready_high = make_job(queue="claimed", priority=Priority.HIGH)
    for job in (due_high, ready_low, ready_high):
        s.queue.enqueue(job)
    order = drain_ids(s, "claimed", now=T0 + timedelta(seconds=1))
    assert order == [ready_high.id, due_high.id, ready_low.id]

    parked = make_job(delay=timedelta(seconds=1))
    s.queue.enqueue(parked)
    ready = make_job(now=T0 + timedelta(seconds=2))
    s.queue.enqueue(ready)
    assert s.queue.promote_due(T0 + timedelta(seconds=2)) == 1
    assert drain_ids(s) == [ready.id, parked.id]


@case()
def a_re_enqueued_parked_job_goes_behind_its_ties(s: Subject) -> None:
    """An upsert is a new enqueue: among jobs due at the same instant, it comes due
    last, whether a claim or `promote_due` moves it."""
    at = T0 + timedelta(seconds=1)
    for queue, promote in (("claimed", False), ("default", True)):
        first, second = make_job(queue=queue, run_at=at), make_job(queue=queue, run_at=at)
        s.queue.enqueue(first)
        s.queue.enqueue(second)
        s.queue.enqueue(first)
        if promote:
            assert s.queue.promote_due(at) == 2
        assert drain_ids(s, queue, now=at) == [second.id, first.id], queue


@case(BATCHING)
def dequeue_many_promotes_first_too(s: Subject) -> None:
    ready, due = make_job(), make_job(delay=timedelta(seconds=1))
    s.queue.enqueue(due)
    s.queue.enqueue(ready)
    got = claims(s.queue.dequeue_many("default", T0 + timedelta(seconds=1), 5))
    assert [c.job.id for c in got] == [ready.id, due.id]


@case(PROMOTION_BOUND, BATCHING)
def one_claim_promotes_a_bounded_number_of_due_jobs(s: Subject) -> None:
    """A claim (single or batched) promotes at most `promote_per_claim` due jobs, so a
    backlog of due work cannot make one claim slow; the rest come due in order."""
    bound = s.promote_per_claim
    assert bound is not None
    jobs = [make_job(delay=timedelta(seconds=1)) for _ in range(2 * bound + 50)]
    s.queue.enqueue_many(jobs)
    now = T0 + timedelta(seconds=1)
    assert claim(s, now).job.id == jobs[0].id
    c = s.queue.counts(now)["default"]
    assert (c.ready, c.scheduled, c.in_flight) == (bound - 1, bound + 50, 1)
    batch = claims(s.queue.dequeue_many("default", now, 10))
    assert [x.job.id for x in batch] == [j.id for j in jobs[1:11]]
    assert s.queue.counts(now)["default"].scheduled == 50
    assert drain_ids(s, now=now) == [j.id for j in jobs[11:]]


@case()
def promotion_is_claimed_once_under_concurrency(s: Subject) -> None:
    jobs = [make_job(delay=timedelta(seconds=1)) for _ in range(200)]
    for job in jobs:
        s.queue.enqueue(job)
    queues = [s.queue] + [q for q, _ in s.peers(3)]
    moved: list[int] = []
    barrier = threading.Barrier(len(queues))

    def promote(q: Any) -> None:
        barrier.wait()
        total = 0
        while (n := q.promote_due(T0 + timedelta(seconds=1), limit=25)) > 0:
            total += n
        moved.append(total)

    threads = [threading.Thread(target=promote, args=(q,)) for q in queues]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(moved) == 200
    assert sorted(drain_ids(s), key=str) == sorted((j.id for j in jobs), key=str)


PROMOTION_CASES = (
    schedule_then_promote,
    a_due_job_is_claimable_at_its_run_at,
    next_due_is_the_earliest_parked_run_at_of_the_queue,
    a_claim_promotes_its_queues_due_jobs_in_run_at_then_enqueue_order,
    promote_due_moves_in_run_at_then_enqueue_order,
    promoted_jobs_keep_their_priority_and_go_behind_the_ready_ones,
    a_re_enqueued_parked_job_goes_behind_its_ties,
    dequeue_many_promotes_first_too,
    one_claim_promotes_a_bounded_number_of_due_jobs,
    promotion_is_claimed_once_under_concurrency,
)
