"""Cases of an operator's retry of a dead letter (`revive`): one guarded step that
queues the job and records it pending, only while it is still a dead letter, once
however many operators race, parked when its status says so."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import attrs

from ....core import (
    ErrorInfo,
    Job,
    JobStatus,
    Policies,
    Succeeded,
    dead_letter,
    decide,
    decide_revive,
    revive,
    start,
)
from ..case import case
from ..subject import FINISHING, Subject
from ..support import LATER, T0, Recorder, claim, in_flight, make_job, queued


def _dead_letter() -> Job:
    """A dead-letter record of a job that never went through this queue."""
    return dead_letter(start(make_job(), T0).unwrap(), ErrorInfo("Boom", "no", False), T0).job


def _finished_dead(s: Subject) -> Job:
    """A job run once and dead-lettered through the queue's own finish."""
    s.queue.enqueue(make_job())
    held = claim(s)
    dead = dead_letter(start(held.job, T0).unwrap(), ErrorInfo("Boom", "no", False), T0).job
    assert s.queue.finish(held, dead)
    return dead


@case(FINISHING)
def revive_requeues_and_records_only_while_the_job_is_a_dead_letter(s: Subject) -> None:
    dead = _dead_letter()
    s.store.record(dead)
    fresh = revive(dead, LATER)
    assert s.queue.revive(dead, fresh) is True
    assert s.store.get(dead.id) == fresh
    assert s.store.list_dead() == []
    assert claim(s, now=LATER).job == fresh
    assert s.queue.revive(dead, fresh) is False, "no longer a dead letter"
    assert in_flight(s, now=LATER) == 1, "the second revive touched the claim"
    assert s.queue.counts(LATER)["default"].ready == 0


@case(FINISHING)
def revive_writes_nothing_when_the_record_is_not_a_dead_letter(s: Subject) -> None:
    done = attrs.evolve(make_job(), status=JobStatus.COMPLETED, finished_at=T0)
    s.store.record(done)
    fresh = revive(attrs.evolve(done, status=JobStatus.FAILED), LATER)
    assert s.queue.revive(done, fresh) is False
    assert s.store.get(done.id) == done
    assert queued(s, LATER) == 0
    missing = _dead_letter()
    assert s.queue.revive(missing, revive(missing, LATER)) is False, "never recorded"
    assert s.store.get(missing.id) is None
    assert queued(s, LATER) == 0


@case(FINISHING)
def a_revived_job_may_be_parked(s: Subject) -> None:
    dead = _dead_letter()
    s.store.record(dead)
    run_at = T0 + timedelta(seconds=30)
    fresh = attrs.evolve(revive(dead, LATER), status=JobStatus.SCHEDULED, run_at=run_at)
    assert s.queue.revive(dead, fresh)
    assert s.queue.counts(T0)["default"].scheduled == 1
    assert s.queue.next_due("default") == run_at
    assert s.queue.dequeue("default", T0) is None


@case(FINISHING)
def a_revive_is_one_guarded_step(s: Subject) -> None:
    """An operator's retry, carried out by the executor, queues the job and records it
    pending together, and only while it is still a dead letter: a worker that finished
    the revived job is never overwritten by a second (late or duplicate) revive."""
    dead = _finished_dead(s)
    log: list[str] = []
    executor = s.executor(Recorder(s.queue, "queue", log, {}), s.store)
    revival = decide_revive(dead, T0)
    assert revival is not None
    assert executor.carry_out(None, revival) is True
    assert log == ["queue.revive"], "queued and recorded in one step"
    assert s.store.get(dead.id).status is JobStatus.PENDING
    assert executor.carry_out(None, revival) is False, "a duplicate finds no dead letter"
    assert s.queue.counts(T0)["default"].ready == 1, "queued once"
    held = claim(s)
    assert held.job.id == dead.id and held.job.retry_count == 0
    done = decide(start(held.job, T0).unwrap(), Succeeded(7), T0, Policies(), 0.5).job
    assert s.queue.finish(held, done)
    # A second operator acting on the same dead letter, after the worker finished it:
    assert executor.carry_out(None, revival) is False
    assert s.store.get(dead.id).status is JobStatus.COMPLETED
    assert s.queue.dequeue("default", T0) is None, "not queued a second time"


@case(FINISHING)
def concurrent_revives_queue_a_dead_letter_once(s: Subject) -> None:
    dead = _finished_dead(s)
    revival = decide_revive(dead, T0)
    assert revival is not None
    results: list[bool] = []
    peers = s.peers(4)
    barrier = threading.Barrier(len(peers))

    def revive_it(queue: Any) -> None:
        barrier.wait()
        results.append(queue.revive(revival.dead, revival.job))

    threads = [threading.Thread(target=revive_it, args=(q,)) for q, _ in peers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [False, False, False, True]
    assert claim(s).job.id == dead.id
    assert s.queue.dequeue("default", T0) is None


REVIVE_CASES = (
    revive_requeues_and_records_only_while_the_job_is_a_dead_letter,
    revive_writes_nothing_when_the_record_is_not_a_dead_letter,
    a_revived_job_may_be_parked,
    a_revive_is_one_guarded_step,
    concurrent_revives_queue_a_dead_letter_once,
)
