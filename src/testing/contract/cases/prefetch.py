"""Cases of prefetched claims: a batch is claimed under prefetched tokens, stored as
given; `start_claim` starts one under a new token, renewing its lease and fencing
the old token; a crash with prefetched claims charges nothing, a job that kills its
worker is still counted, and a healthy prefetching worker keeps every claim it holds
leased."""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter
from datetime import UTC, datetime
from typing import Any

from ....core import JobStatus, Policies
from ....core.policies import LeasePolicy
from ....shell.ports import Claim, is_prefetched
from ....shell.registry import Registry
from ....shell.worker.loop import Worker
from ...clock import ManualClock
from ..case import case
from ..subject import BATCHING, Subject
from ..support import LATER, T0, TICK, Crash, claims, make_job

LEASE_MS = 1000


def _token(c: Any) -> str:
    return str(c.token)


@case(BATCHING)
def dequeue_many_hands_out_prefetched_claims_stored_as_given(s: Subject) -> None:
    jobs = [make_job() for _ in range(3)]
    s.queue.enqueue_many(jobs)
    batch = claims(s.queue.dequeue_many("default", T0, 3))
    assert [c.job for c in batch] == jobs
    assert all(is_prefetched(c.token) and not c.started for c in batch)
    assert len({c.token for c in batch}) == 3
    found = sorted(s.queue.abandoned(T0 + TICK), key=_token)
    assert found == sorted(batch, key=_token), "the stored token lost its prefetch mark"


@case(BATCHING)
def start_claim_swaps_the_token_renews_the_lease_and_fences_the_old_one(s: Subject) -> None:
    s.queue.enqueue_many([make_job() for _ in range(3)])
    batch = claims(s.queue.dequeue_many("default", T0, 3))
    first = batch[0]
    started = s.queue.start_claim(first, LATER)
    assert started is not None and started.started and started.token != first.token
    assert (started.job, started.queue, started.locked_at) == (first.job, first.queue, LATER)
    assert s.queue.start_claim(first, LATER) is None, "the old token still held the job"
    assert s.queue.ack(first) is False and s.queue.extend(first, LATER) is False
    waiting = s.queue.abandoned(LATER)
    assert {c.token for c in waiting} == {c.token for c in batch[1:]}, "not renewed"
    assert not any(c.started for c in waiting)
    [held] = [c for c in s.queue.abandoned(LATER + TICK) if c.job.id == first.job.id]
    assert (held.token, held.locked_at, held.started) == (started.token, LATER, True)
    assert s.queue.extend(started, LATER) is True
    assert s.queue.ack(started) is True


@case(BATCHING)
def start_claim_of_a_claim_taken_over_is_none(s: Subject) -> None:
    s.queue.enqueue(make_job())
    [waiting] = claims(s.queue.dequeue_many("default", T0, 1))
    s.queue.enqueue(waiting.job)  # re-enqueued: the claim is lost
    assert s.queue.start_claim(waiting, LATER) is None
    assert s.queue.counts(LATER)["default"].ready == 1


@case(BATCHING)
def a_crash_with_prefetched_claims_charges_nothing(s: Subject) -> None:
    """A worker holding 10 prefetched `max_retries = 0` jobs is killed: its claims expire
    and come back with no reclaim charged and nothing dead-lettered."""
    clock = ManualClock(T0)
    jobs = [make_job(max_retries=0) for _ in range(10)]
    s.queue.enqueue_many(jobs)
    assert len(s.queue.dequeue_many("default", T0, 10)) == 10  # then SIGKILL
    keeper = Worker(
        s.queue,
        s.store,
        Registry(),
        clock=clock,
        policies=Policies(lease=LeasePolicy(LEASE_MS)),
        clock_check=False,  # a manual clock replaying T0 against a live server
    )
    clock.advance(LEASE_MS + 1)
    assert keeper.reclaim_abandoned(clock.now()) == 10
    assert s.store.list_dead() == []
    back = claims(s.queue.dequeue_many("default", clock.now(), 10))
    assert len(back) == 10
    assert {c.job.metadata.reclaim_count for c in back} == {0}
    assert {c.job.metadata.prefetch_reclaims for c in back} == {1}
    assert {c.job.attempt for c in back} == {0}


@case(BATCHING)
def a_prefetched_job_that_kills_its_worker_is_still_counted(s: Subject) -> None:
    """After its batch's worker died, a job is started explicitly before it runs, so a
    second crash is charged to it and the poison pill ends in the dead letters."""
    clock = ManualClock(T0)
    policies = Policies(lease=LeasePolicy(LEASE_MS, max_reclaims=0))
    killer = make_job()
    s.queue.enqueue(killer)

    def worker(queue: Any) -> Worker:
        registry = Registry({"work": lambda args: None})
        options: dict[str, Any] = {"clock": clock, "policies": policies, "clock_check": False}
        return Worker(queue, s.store, registry, prefetch=5, **options)

    # Each run of the job kills its worker; a peer that lives on reclaims what it left.
    dying, peer = worker(_DiesOnceItsHandlerRan(s.queue)), worker(s.queue)
    dead = None
    for _ in range(3):
        with contextlib.suppress(Crash):
            dying.run_once()
        clock.advance(LEASE_MS + 1)
        peer.reclaim_abandoned(clock.now())
        dead = s.store.get(killer.id)
        if dead is not None:
            break
    assert dead is not None and dead.last_error.type == "lease-expired"
    assert dead.metadata.reclaim_count == 1 and dead.metadata.prefetch_reclaims == 1


class _DiesOnceItsHandlerRan:
    """A worker's queue in a process that dies after each handler ran and before
    anything of its outcome is written: the outcome's write raises `Crash`, as a kill
    mid-handler leaves it (a handler's own exception is its attempt's failure)."""

    _OUTCOME_WRITES = frozenset({"finish", "finish_many", "ack", "replace", "finish_cancelled"})

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, attr: str) -> Any:
        target = getattr(self._inner, attr)
        if attr not in self._OUTCOME_WRITES:
            return target

        def dies(*args: Any, **kwargs: Any) -> Any:
            raise Crash(attr)

        return dies


@case(BATCHING)
def a_healthy_prefetching_worker_runs_each_job_once(s: Subject) -> None:
    """Short jobs batched with one longer than the lease are not run again by a peer:
    every held claim (waiting, running, finished but unwritten) is kept leased."""
    # Short, for the long job to outlive it; not shorter: a heartbeat (a third of the
    # lease) held up on a loaded machine for two thirds of it let the peer reclaim.
    lease_ms = 800
    runs: Counter[str] = Counter()

    def work(args: Any) -> None:
        runs[args["name"]] += 1
        if args["name"] == "long":
            time.sleep(1.5)

    names = ["short-1", "long", "short-2", "short-3"]
    s.queue.enqueue_many([make_job(args={"name": n}) for n in names])
    policies = Policies(lease=LeasePolicy(lease_ms))
    registry = Registry({"work": work})
    worker = Worker(s.queue, s.store, registry, policies=policies, prefetch=4)
    [(peer_queue, peer_store)] = s.peers(1)
    peer = Worker(peer_queue, peer_store, registry, policies=policies)
    stop = threading.Event()

    def keep_reclaiming() -> None:
        while not stop.is_set():
            peer.reclaim_abandoned(datetime.now(UTC))
            time.sleep(0.02)

    thread = threading.Thread(target=keep_reclaiming)
    thread.start()
    try:
        assert worker.run_once() == 4
    finally:
        stop.set()
        thread.join()
    assert peer.stats.reclaimed == 0, "a healthy worker's claim was taken"
    assert worker.drain() == 0, "a job went back to ready and would run again"
    assert dict(runs) == dict.fromkeys(names, 1)


@case(BATCHING)
def finished_outcomes_survive_a_fault_mid_batch(s: Subject) -> None:
    """A renewal that raises mid-batch cannot drop the outcomes already finished."""
    jobs = [make_job(args={"i": i}) for i in range(3)]
    s.queue.enqueue_many(jobs)
    clock = ManualClock(T0)
    policies = Policies(lease=LeasePolicy(LEASE_MS))

    def work(args: Any) -> None:
        clock.advance(LEASE_MS)  # each job takes a whole lease: the next needs a renewal

    worker = Worker(
        s.queue,
        s.store,
        Registry({"work": work}),
        clock=clock,
        policies=policies,
        prefetch=3,
        clock_check=False,
    )
    heartbeat: Any = worker._heartbeat
    heartbeat.renewed_within = lambda *_: False
    calls = {"n": 0}
    real_renew = heartbeat.renew

    def renew_once_then_fail(held: Claim) -> bool:
        calls["n"] += 1
        if calls["n"] == 1:
            return bool(real_renew(held))
        raise ConnectionError("server went away")

    heartbeat.renew = renew_once_then_fail
    with contextlib.suppress(ConnectionError):
        worker.run_once()
    done = s.store.get(jobs[0].id)
    assert done is not None and done.status is JobStatus.COMPLETED, "finished outcome dropped"


PREFETCH_CASES = (
    dequeue_many_hands_out_prefetched_claims_stored_as_given,
    start_claim_swaps_the_token_renews_the_lease_and_fences_the_old_one,
    start_claim_of_a_claim_taken_over_is_none,
    a_crash_with_prefetched_claims_charges_nothing,
    a_prefetched_job_that_kills_its_worker_is_still_counted,
    a_healthy_prefetching_worker_runs_each_job_once,
    finished_outcomes_survive_a_fault_mid_batch,
)
