"""Cases of holding a claim: a fresh token per claim, the conditional ack, a stale
holder's writes refused, replace, reclaim after the lease (re-checked inside the
write, from another process too), poison pills, undecodable payloads, waking an
idle worker, and the transactional enqueue."""

from __future__ import annotations

import pickle
import threading
import time
from datetime import timedelta
from typing import Any

import attrs

from ....core import JobStatus, Policies, ValidationError, reclaim_cutoff, start
from ....core.decisions import decide_reclaim
from ....core.policies import LeasePolicy
from ....shell.ports import BadClaim, Claim, is_transactional
from ....shell.registry import Registry
from ....shell.worker.loop import Worker
from ...clock import ManualClock
from ..case import case
from ..subject import CORRUPT, PEER, TRANSACTIONAL, WAKING, Subject
from ..support import LATER, T0, TICK, claim, drain_ids, in_flight, make_job


@case()
def ack_only_with_the_live_token(s: Subject) -> None:
    s.queue.enqueue(make_job())
    held = claim(s)
    forged = attrs.evolve(held, token="not-the-token")
    assert s.queue.ack(forged) is False
    assert in_flight(s) == 1
    assert s.queue.ack(held) is True
    assert s.queue.ack(held) is False, "a second ack finds nothing"
    assert in_flight(s) == 0


@case()
def every_claim_gets_a_fresh_token(s: Subject) -> None:
    job = make_job()
    s.queue.enqueue(job)
    first = claim(s)
    s.queue.enqueue(job)
    second = claim(s)
    assert first.token != second.token


@case()
def a_single_claim_is_started(s: Subject) -> None:
    """`dequeue` hands out a started claim (a plain token, not a prefetched one)."""
    s.queue.enqueue(make_job())
    assert claim(s).started


@case()
def a_stale_ack_is_a_no_op(s: Subject) -> None:
    s.queue.enqueue(make_job())
    first = claim(s)
    cutoff = reclaim_cutoff(LATER, 1000)
    [stale] = s.queue.abandoned(cutoff)
    assert s.queue.reclaim(stale, first.job, cutoff)
    second = claim(s, now=LATER)
    assert second.token != first.token
    assert s.queue.ack(first) is False
    assert s.queue.extend(first, LATER) is False
    assert s.queue.replace(first, first.job) is False
    assert s.queue.reclaim(first, first.job, LATER + TICK) is False, "a stale reclaim"
    [still] = s.queue.abandoned(LATER + TICK)
    assert (still.token, still.locked_at) == (second.token, LATER), "the new holder was touched"
    assert in_flight(s, now=LATER) == 1
    assert s.queue.ack(second) is True


@case()
def ack_leaves_a_reenqueued_job(s: Subject) -> None:
    job = make_job()
    s.queue.enqueue(job)
    held = claim(s)
    s.queue.enqueue(job)
    assert s.queue.ack(held) is False
    assert s.queue.extend(held, T0) is False, "the re-enqueue fenced the old claim"
    assert s.queue.counts(T0)["default"].ready == 1
    assert drain_ids(s) == [job.id]


@case()
def replace_parks_or_readies_and_unlocks(s: Subject) -> None:
    s.queue.enqueue(make_job())
    held = claim(s)
    running = start(held.job, T0).unwrap()
    parked = attrs.evolve(running, status=JobStatus.RETRYING, run_at=T0 + timedelta(seconds=5))
    assert s.queue.replace(held, parked)
    assert s.queue.ack(held) is False, "the ack after replace finds nothing of ours"
    assert s.queue.replace(held, parked) is False, "a second replace finds nothing either"
    c = s.queue.counts(T0)["default"]
    assert (c.ready, c.scheduled, c.in_flight) == (0, 1, 0)
    assert s.queue.promote_due(T0 + timedelta(seconds=5)) == 1
    again = claim(s, now=T0 + timedelta(seconds=5))
    assert again.job.retry_count == parked.retry_count and again.job.status is JobStatus.RETRYING


@case()
def reclaim_after_the_lease(s: Subject) -> None:
    job = make_job()
    s.queue.enqueue(job)
    held = claim(s)
    assert s.queue.abandoned(reclaim_cutoff(T0, 1000)) == []
    assert s.queue.extend(held, T0 + timedelta(seconds=5))
    assert s.queue.abandoned(reclaim_cutoff(T0 + timedelta(seconds=5), 1000)) == []
    cutoff = reclaim_cutoff(T0 + timedelta(seconds=7), 1000)
    [found] = s.queue.abandoned(cutoff)
    assert found == attrs.evolve(held, locked_at=T0 + timedelta(seconds=5)), "renewed as given"
    decision = decide_reclaim(start(found.job, LATER).unwrap(), LATER, LeasePolicy(1000), cutoff)
    assert s.queue.reclaim(found, decision.job, cutoff)
    assert not s.queue.reclaim(found, decision.job, cutoff), "only once"
    again = claim(s, now=LATER)
    assert again.job.metadata.reclaim_count == 1


@case()
def reclaim_rechecks_inside_the_write(s: Subject) -> None:
    s.queue.enqueue(make_job())
    held = claim(s)
    cutoff = reclaim_cutoff(LATER, 1000)
    [found] = s.queue.abandoned(cutoff)
    assert s.queue.ack(held)  # completed between the reclaimer's read and its write
    assert s.queue.reclaim(found, found.job, cutoff) is False
    assert s.queue.dequeue("default", LATER) is None
    s.queue.enqueue(make_job())
    live = claim(s)
    s.queue.extend(live, LATER)  # a heartbeat arrived meanwhile
    assert s.queue.reclaim(live, live.job, cutoff) is False


@case()
def concurrent_claimers_take_each_job_once(s: Subject) -> None:
    """Claimers racing over one queue (each over its own connection, given `peer`)
    take every job exactly once, in all priorities, and leave nothing stuck."""
    priorities = ("low", "normal", "high", "critical")
    jobs = [make_job(priority=priorities[n % 4]) for n in range(400)]
    s.queue.enqueue_many(jobs)
    peers = s.peers(4)
    taken: list[list[Any]] = [[] for _ in peers]
    barrier = threading.Barrier(len(peers))

    def claimer(queue: Any, mine: list[Any]) -> None:
        barrier.wait()
        while (got := queue.dequeue("default", T0)) is not None:
            assert isinstance(got, Claim), got
            mine.append(got.job.id)
            assert queue.ack(got)
            time.sleep(0)  # let the others in, even where no I/O would

    threads = [
        threading.Thread(target=claimer, args=(q, mine))
        for (q, _), mine in zip(peers, taken, strict=True)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    everything = [i for mine in taken for i in mine]
    assert len(everything) == len(set(everything)) == len(jobs), "a job was claimed twice or lost"
    assert set(everything) == {j.id for j in jobs}
    assert sum(1 for mine in taken if mine) > 1, "the claimers did not overlap"
    assert in_flight(s) == 0 and s.queue.dequeue("default", T0) is None, "a job is stuck"


@case(PEER)
def reclaim_from_another_process(s: Subject) -> None:
    assert s.peer is not None
    s.queue.enqueue(make_job())
    claim(s)  # this process then dies
    other_queue, _ = s.peer()
    cutoff = reclaim_cutoff(LATER, 1000)
    [found] = other_queue.abandoned(cutoff)
    assert other_queue.reclaim(found, found.job, cutoff)
    assert isinstance(other_queue.dequeue("default", LATER), Claim)


@case()
def a_poison_pill_is_dead_lettered(s: Subject) -> None:
    clock = ManualClock(T0)
    policies = Policies(lease=LeasePolicy(lease_ms=1000, max_reclaims=1))
    worker = Worker(s.queue, s.store, Registry(), clock=clock, policies=policies, clock_check=False)
    job = make_job(max_retries=1)
    s.queue.enqueue(job)
    for _ in range(2):
        assert isinstance(s.queue.dequeue("default", clock.now()), Claim)
        clock.advance(1001)
        worker.reclaim_abandoned(clock.now())
    [dead] = s.store.list_dead()
    assert dead.id == job.id and dead.last_error.type == "lease-expired"
    assert s.queue.dequeue("default", clock.now()) is None


@case(CORRUPT)
def an_undecodable_payload_is_a_bad_claim(s: Subject) -> None:
    assert s.corrupt is not None
    job = make_job()
    s.queue.enqueue(job)
    s.corrupt(job, pickle.dumps({"evil": True}, protocol=0).decode("ascii"))
    bad = s.queue.dequeue("default", T0)
    assert isinstance(bad, BadClaim) and bad.job_id == str(job.id)
    assert s.queue.ack(bad) is True
    assert s.queue.dequeue("default", T0) is None


@case(WAKING)
def a_waiting_worker_wakes_when_a_job_becomes_ready_on_its_queue(s: Subject) -> None:
    woke: dict[str, Any] = {}
    started = threading.Event()

    def waiter() -> None:
        s.queue.wait_for_work("default", 0.01)  # the first wait starts any listener
        started.set()
        began = time.monotonic()
        woke["result"] = s.queue.wait_for_work("default", 5.0)
        woke["after"] = time.monotonic() - began

    thread = threading.Thread(target=waiter)
    thread.start()
    assert started.wait(5)
    time.sleep(0.2)
    s.queue.enqueue(make_job())
    thread.join(timeout=10)
    assert woke["result"] is True and woke["after"] < 2


@case(TRANSACTIONAL)
def transactional_enqueue(s: Subject) -> None:
    assert is_transactional(s.queue)
    engine = s.engine
    job = make_job()
    with engine.connect() as conn:
        conn.begin()
        s.queue.enqueue_in_tx(conn, job)
        # A read from another connection (SQLite allows one writer at a time).
        assert "default" not in s.queue.counts(T0), "invisible before commit"
        conn.rollback()
    assert s.queue.dequeue("default", T0) is None, "rolled back with the business change"
    with engine.begin() as conn:
        s.queue.enqueue_in_tx(conn, job)
    assert drain_ids(s) == [job.id]
    try:
        s.queue.enqueue_in_tx(engine, job)
    except ValidationError as exc:
        assert exc.fields == ("conn",)
    else:
        raise AssertionError("enqueue_in_tx took an engine, outside any transaction")


CLAIM_CASES = (
    ack_only_with_the_live_token,
    every_claim_gets_a_fresh_token,
    a_single_claim_is_started,
    a_stale_ack_is_a_no_op,
    ack_leaves_a_reenqueued_job,
    replace_parks_or_readies_and_unlocks,
    reclaim_after_the_lease,
    reclaim_rechecks_inside_the_write,
    concurrent_claimers_take_each_job_once,
    reclaim_from_another_process,
    a_poison_pill_is_dead_lettered,
    an_undecodable_payload_is_a_bad_claim,
    a_waiting_worker_wakes_when_a_job_becomes_ready_on_its_queue,
    transactional_enqueue,
)
