"""Sweep cases for the no-lost-job promise at its edges: the operator's revive, the
lease keeper's poison-pill write, prefetched claims, claim-time promotion and its
order, and the lease server's clock. Each runs on every backend through
`test_adapter_surface.py`.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
from backends import Backend
from conveyor.core import (
    ErrorInfo,
    JobStatus,
    Policies,
    Succeeded,
    dead_letter,
    decide,
    decide_reclaim,
    decide_revive,
    reclaim_cutoff,
    start,
)
from conveyor.core.policies import LeasePolicy
from conveyor.shell.executor import Executor
from conveyor.shell.ports import Claim
from conveyor.shell.registry import Registry
from conveyor.shell.worker.lease_keeper import ClockSkewError
from conveyor.shell.worker.loop import Worker
from conveyor.testing.clock import ManualClock
from helpers import T0, make_job

LEASE_MS = 1000


def _claim(b: Backend, now: datetime = T0, queue: str = "default") -> Claim:
    claim = b.queue.dequeue(queue, now)
    assert isinstance(claim, Claim), f"expected a claim, got {claim!r}"
    return claim


def _dead(b: Backend) -> Any:
    """A job run once and dead-lettered through the queue's own finish."""
    job = make_job()
    b.queue.enqueue(job)
    claim = _claim(b)
    running = start(claim.job, T0).unwrap()
    dead = dead_letter(running, ErrorInfo("Boom", "no", False), T0).job
    assert b.queue.finish(claim, dead)
    return dead


def a_revive_is_one_guarded_step(b: Backend) -> None:
    """An operator's retry queues the job and records it pending together, and only
    while it is still a dead letter: a worker that finished the revived job is never
    overwritten by a second (late or duplicate) revive."""
    dead = _dead(b)
    executor = Executor(b.queue, b.store)
    revival = decide_revive(dead, T0)
    assert revival is not None
    assert executor.carry_out(None, revival) is True
    assert b.store.get(dead.id).status is JobStatus.PENDING
    claim = _claim(b)
    assert claim.job.id == dead.id and claim.job.retry_count == 0
    done = decide(start(claim.job, T0).unwrap(), Succeeded(7), T0, Policies(), 0.5).job
    assert b.queue.finish(claim, done)
    # A second operator acting on the same dead letter, after the worker finished it:
    assert executor.carry_out(None, revival) is False
    assert b.store.get(dead.id).status is JobStatus.COMPLETED
    assert b.queue.dequeue("default", T0) is None, "not queued a second time"


def concurrent_revives_queue_a_dead_letter_once(b: Backend) -> None:
    dead = _dead(b)
    revival = decide_revive(dead, T0)
    assert revival is not None
    results: list[bool] = []
    peers = [b.peer() if b.peer else (b.queue, b.store) for _ in range(4)]
    barrier = threading.Barrier(len(peers))

    def revive(queue: Any) -> None:
        barrier.wait()
        results.append(queue.revive(revival.dead, revival.job))

    threads = [threading.Thread(target=revive, args=(q,)) for q, _ in peers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [False, False, False, True]
    assert _claim(b).job.id == dead.id
    assert b.queue.dequeue("default", T0) is None


def a_poison_pill_write_is_refused_after_a_renewal(b: Backend) -> None:
    """The lease keeper reads an abandoned claim; its holder renews; the keeper's
    `lease-expired` dead letter must then be refused inside the same write."""
    job = make_job(max_retries=0)
    b.queue.enqueue(job)
    claim = _claim(b)
    later = T0 + timedelta(seconds=5)
    cutoff = reclaim_cutoff(later, LEASE_MS)
    [found] = b.queue.abandoned(cutoff)
    assert b.queue.extend(claim, later)  # the holder was alive after all
    pill = decide_reclaim(
        start(found.job, later).unwrap(), later, LeasePolicy(LEASE_MS, max_reclaims=0), cutoff
    )
    assert pill.job.status is JobStatus.FAILED
    assert Executor(b.queue, b.store).carry_out(found, pill) is False
    assert b.store.get(job.id) is None, "a live job was dead-lettered"
    done = decide(start(claim.job, later).unwrap(), Succeeded(1), later, Policies(), 0.5).job
    assert b.queue.finish(claim, done), "the holder's real outcome is accepted"


def a_still_abandoned_poison_pill_is_dead_lettered(b: Backend) -> None:
    job = make_job(max_retries=0)
    b.queue.enqueue(job)
    _claim(b)
    later = T0 + timedelta(seconds=5)
    cutoff = reclaim_cutoff(later, LEASE_MS)
    [found] = b.queue.abandoned(cutoff)
    pill = decide_reclaim(
        start(found.job, later).unwrap(), later, LeasePolicy(LEASE_MS, max_reclaims=0), cutoff
    )
    assert Executor(b.queue, b.store).carry_out(found, pill) is True
    assert b.store.get(job.id).last_error.type == "lease-expired"


def prefetched_claims_are_not_started(b: Backend) -> None:
    for _ in range(3):
        b.queue.enqueue(make_job())
    batch = b.queue.dequeue_many("default", T0, 3)
    assert [c.started for c in batch] == [False, False, False]
    begun = b.queue.start_claim(batch[0], T0 + timedelta(seconds=1))
    assert begun is not None and begun.started and begun.token != batch[0].token
    again = b.queue.start_claim(batch[0], T0 + timedelta(seconds=1))
    # A re-sent start (after a dropped connection) may return the same started claim.
    assert again is None or again.token == begun.token, "started twice under two tokens"
    assert b.queue.ack(batch[0]) is False
    cutoff = reclaim_cutoff(T0 + timedelta(milliseconds=1500), LEASE_MS)
    found = {c.job.id: c for c in b.queue.abandoned(cutoff)}
    assert set(found) == {batch[1].job.id, batch[2].job.id}, "the started claim was renewed"
    assert not any(c.started for c in found.values())
    assert b.queue.ack(begun) is True


def a_crash_with_prefetched_claims_charges_nothing(b: Backend) -> None:
    """A worker holding 10 prefetched `max_retries = 0` jobs is killed: its claims expire
    and come back with no reclaim charged and nothing dead-lettered."""
    clock = ManualClock(T0)
    jobs = [make_job(max_retries=0) for _ in range(10)]
    b.queue.enqueue_many(jobs)
    assert len(b.queue.dequeue_many("default", T0, 10)) == 10  # then SIGKILL
    keeper = Worker(
        b.queue,
        b.store,
        Registry(),
        clock=clock,
        policies=Policies(lease=LeasePolicy(LEASE_MS)),
        clock_check=False,  # a manual clock replaying T0 against a live server
    )
    clock.advance(LEASE_MS + 1)
    assert keeper.reclaim_abandoned(clock.now()) == 10
    assert b.store.list_dead() == []
    back = b.queue.dequeue_many("default", clock.now(), 10)
    assert len(back) == 10
    assert {c.job.metadata.reclaim_count for c in back} == {0}
    assert {c.job.metadata.prefetch_reclaims for c in back} == {1}
    assert {c.job.attempt for c in back} == {0}


def a_prefetched_job_that_kills_its_worker_is_still_counted(b: Backend) -> None:
    """After its batch's worker died, a job is started explicitly before it runs, so a
    second crash is charged to it and the poison pill ends in the dead letters."""
    clock = ManualClock(T0)
    policies = Policies(lease=LeasePolicy(LEASE_MS, max_reclaims=0))
    killer = make_job()
    b.queue.enqueue(killer)

    class Killed(BaseException):
        pass

    def kill(args: Any) -> None:
        raise Killed  # the process dies mid-handler: nothing after this runs

    worker = Worker(
        b.queue,
        b.store,
        Registry({"work": kill}),
        clock=clock,
        policies=policies,
        prefetch=5,
        clock_check=False,
    )
    for _ in range(3):
        try:
            worker.run_once()
        except Killed:
            pass
        clock.advance(LEASE_MS + 1)
        worker.reclaim_abandoned(clock.now())
        dead = b.store.get(killer.id)
        if dead is not None:
            break
    assert dead is not None and dead.last_error.type == "lease-expired"
    assert dead.metadata.reclaim_count == 1 and dead.metadata.prefetch_reclaims == 1


def a_due_job_is_claimable_at_its_run_at(b: Backend) -> None:
    """No promotion pass between `run_at` and the claim: the claim promotes it."""
    job = make_job(delay=timedelta(seconds=1))
    b.queue.enqueue(job)
    assert b.queue.dequeue("default", T0 + timedelta(milliseconds=999)) is None
    assert b.queue.next_due("default") == job.run_at
    assert _claim(b, T0 + timedelta(seconds=1)).job.id == job.id
    assert b.queue.next_due("default") is None


def a_worker_starts_a_retry_when_its_backoff_ends(b: Backend) -> None:
    clock = ManualClock(T0)
    runs: list[datetime] = []

    def flaky(args: Any) -> None:
        runs.append(clock.now())
        raise ConnectionError("upstream down")

    policies = Policies(retry=attrs.evolve(Policies().retry, jitter=False))
    worker = Worker(
        b.queue,
        b.store,
        Registry({"work": flaky}),
        clock=clock,
        policies=policies,
        clock_check=False,
    )
    b.queue.enqueue(make_job(max_retries=2))
    assert worker.run_once() == 1
    assert worker._idle_timeout_s() == 1.0, "sleeps exactly until the retry is due"
    clock.advance(999)
    assert worker.run_once() == 0
    clock.advance(1)
    assert worker.run_once() == 1, "due at 1 s: claimed on the next round, not 5 s later"
    clock.advance(2000)
    assert worker.run_once() == 1
    assert [(r - T0).total_seconds() for r in runs] == [0.0, 1.0, 3.0]


def due_jobs_are_promoted_by_run_at_then_enqueue_order(b: Backend) -> None:
    ready = make_job()
    b.queue.enqueue(ready)
    # Enqueued in this order; due at 3 s, 1 s, 2 s, 1 s, 2 s.
    delays = [3, 1, 2, 1, 2]
    parked = [make_job(delay=timedelta(seconds=d), args={"i": i}) for i, d in enumerate(delays)]
    for job in parked:
        b.queue.enqueue(job)
    claimed = [_claim(b, T0 + timedelta(seconds=5)).job.id for _ in range(6)]
    order = sorted(range(5), key=lambda i: (delays[i], i))
    assert claimed == [ready.id] + [parked[i].id for i in order]


def promote_due_uses_the_same_order(b: Backend) -> None:
    delays = [2, 1, 2, 1]
    parked = [make_job(delay=timedelta(seconds=d)) for d in delays]
    for job in parked:
        b.queue.enqueue(job)
    assert b.queue.promote_due(T0 + timedelta(seconds=5)) == 4
    claimed = [_claim(b, T0).job.id for _ in range(4)]
    assert claimed == [parked[i].id for i in (1, 3, 0, 2)]


def the_lease_server_clock_is_checked(b: Backend) -> None:
    server = b.queue.server_time()
    if b.name in ("memory", "sqlite"):
        assert server is None, "one host, one clock"
        return
    assert server is not None
    assert abs(server - datetime.now(UTC)) < timedelta(seconds=2)
    ahead = ManualClock(datetime.now(UTC) + timedelta(seconds=40))
    worker = Worker(b.queue, b.store, Registry(), clock=ahead)  # lease 60 s: 15 s allowed
    try:
        worker.check_clock()
    except ClockSkewError as exc:
        assert "quarter of the lease" in str(exc)
    else:
        raise AssertionError("a worker 40 s ahead of the server was allowed to start")
    # A skewed lease keeper takes nothing, even claims that look expired by its clock.
    b.queue.enqueue(make_job())
    _claim(b, datetime.now(UTC))
    assert worker.reclaim_abandoned(ahead.now() + timedelta(seconds=60)) == 0
    fine = Worker(b.queue, b.store, Registry(), clock=ManualClock(datetime.now(UTC)))
    fine.check_clock()


def a_healthy_prefetching_worker_runs_each_job_once(b: Backend) -> None:
    """Short jobs batched with one longer than the lease are not run again by a peer:
    every held claim (waiting, running, finished but unwritten) is kept leased."""
    lease_ms = 400
    runs: Counter[str] = Counter()

    def work(args: Any) -> None:
        runs[args["name"]] += 1
        if args["name"] == "long":
            time.sleep(1.0)

    names = ["short-1", "long", "short-2", "short-3"]
    b.queue.enqueue_many([make_job(args={"name": n}) for n in names])
    policies = Policies(lease=LeasePolicy(lease_ms))
    registry = Registry({"work": work})
    worker = Worker(b.queue, b.store, registry, policies=policies, prefetch=4)
    peer_queue, peer_store = b.peer() if b.peer else (b.queue, b.store)
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


def finished_outcomes_survive_a_fault_mid_batch(b: Backend) -> None:
    """A renewal that raises mid-batch cannot drop the outcomes already finished."""
    jobs = [make_job(args={"i": i}) for i in range(3)]
    b.queue.enqueue_many(jobs)
    clock = ManualClock(T0)
    policies = Policies(lease=LeasePolicy(LEASE_MS))

    def work(args: Any) -> None:
        clock.advance(LEASE_MS)  # each job takes a whole lease: the next needs a renewal

    worker = Worker(
        b.queue,
        b.store,
        Registry({"work": work}),
        clock=clock,
        policies=policies,
        prefetch=3,
        clock_check=False,
    )

    def broken(*_: Any) -> bool:
        raise ConnectionError("server went away")

    worker._heartbeat.renewed_within = lambda *_: False  # type: ignore[method-assign]
    calls = {"n": 0}
    real_renew = worker._heartbeat.renew

    def renew_once_then_fail(claim: Claim) -> bool:
        calls["n"] += 1
        return real_renew(claim) if calls["n"] == 1 else broken()

    worker._heartbeat.renew = renew_once_then_fail  # type: ignore[method-assign]
    try:
        worker.run_once()
    except ConnectionError:
        pass
    done = b.store.get(jobs[0].id)
    assert done is not None and done.status is JobStatus.COMPLETED, "finished outcome dropped"


def an_idle_worker_starts_delays_and_retries_on_time(b: Backend) -> None:
    """At default settings (a one-second poll), a delayed job and a retry start at their
    `run_at`, not at the next poll or promotion pass. The bound is loose on purpose: it
    tells waking on time (milliseconds) from waiting for a poll (up to a second)."""
    runs: list[float] = []

    def flaky(args: Any) -> None:
        runs.append(time.time())
        if len(runs) == 1:
            raise ConnectionError("first attempt fails")

    policies = Policies(retry=attrs.evolve(Policies().retry, initial_delay_ms=300, jitter=False))
    worker = Worker(b.queue, b.store, Registry({"work": flaky}), policies=policies)
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        time.sleep(0.3)  # idle, in its one-second wait
        job = make_job(now=datetime.now(UTC), delay=timedelta(milliseconds=300))
        b.queue.enqueue(job)
        due = job.run_at.timestamp()
        deadline = time.monotonic() + 5
        while len(runs) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        worker.stop()
        thread.join()
    assert len(runs) == 2, f"ran {len(runs)} times in 5 s"
    assert 0 <= runs[0] - due < 0.25, f"the delayed job started {runs[0] - due:.3f} s late"
    gap = runs[1] - runs[0]
    assert 0.3 <= gap < 0.3 + 0.25, f"the retry came {gap:.3f} s after the failure (policy 0.3 s)"


TRUST_CASES = (
    an_idle_worker_starts_delays_and_retries_on_time,
    a_revive_is_one_guarded_step,
    concurrent_revives_queue_a_dead_letter_once,
    a_poison_pill_write_is_refused_after_a_renewal,
    a_still_abandoned_poison_pill_is_dead_lettered,
    prefetched_claims_are_not_started,
    a_crash_with_prefetched_claims_charges_nothing,
    a_prefetched_job_that_kills_its_worker_is_still_counted,
    a_due_job_is_claimable_at_its_run_at,
    a_worker_starts_a_retry_when_its_backoff_ends,
    due_jobs_are_promoted_by_run_at_then_enqueue_order,
    promote_due_uses_the_same_order,
    the_lease_server_clock_is_checked,
    a_healthy_prefetching_worker_runs_each_job_once,
    finished_outcomes_survive_a_fault_mid_batch,
)
