"""Sweep cases for caller-chosen ids and unique keys (`JobQueue.enqueue_new`). Each
runs on every backend through `test_adapter_surface.py`.

Keys carry a fresh suffix: the PostgreSQL and Redis sweep servers outlive one case.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

import attrs
from backends import Backend
from conveyor.core import ErrorInfo, Failed, Job, JobStatus, Policies, Succeeded, decide, start
from conveyor.core.decisions import dead_letter
from conveyor.shell.ports import Claim
from helpers import T0, make_job


def _key() -> str:
    return f"report:{uuid.uuid4().hex}"


def _claim(b: Backend, now=T0) -> Claim:
    claim = b.queue.dequeue("default", now)
    assert isinstance(claim, Claim), f"expected a claim, got {claim!r}"
    return claim


def _complete(b: Backend, now=T0) -> Job:
    claim = _claim(b, now)
    record = decide(start(claim.job, now).unwrap(), Succeeded(1), now, Policies(), 0.5).job
    assert b.queue.finish(claim, record)
    return record


def _queued(b: Backend) -> int:
    counts = b.queue.counts(T0 + timedelta(days=1))
    return sum(c.ready + c.scheduled + c.in_flight for c in counts.values())


def same_id_twice_returns_the_first_job_unchanged(b: Backend) -> None:
    first = make_job(args={"n": 1})
    second = make_job(args={"n": 2}, id=first.id, priority="high")
    assert b.queue.enqueue_new(first) is None
    assert b.queue.enqueue_new(second) == first
    assert _claim(b).job == first, "the args were not replaced"
    assert _queued(b) == 1


def same_id_while_running_returns_it_as_running(b: Backend) -> None:
    first = make_job(args={"n": 1})
    assert b.queue.enqueue_new(first) is None
    claim = _claim(b)
    found = b.queue.enqueue_new(make_job(args={"n": 2}, id=first.id))
    assert found is not None and found.status is JobStatus.RUNNING
    assert found.args == first.args
    assert b.queue.ack(claim), "the claim was left alone"


def same_id_after_completion_returns_the_completed_record(b: Backend) -> None:
    first = make_job(args={"n": 1})
    assert b.queue.enqueue_new(first) is None
    record = _complete(b)
    assert b.queue.enqueue_new(make_job(args={"n": 2}, id=first.id)) == record
    assert _queued(b) == 0, "nothing new was queued"


def same_id_of_a_dead_letter_returns_the_dead_letter(b: Backend) -> None:
    first = make_job()
    assert b.queue.enqueue_new(first) is None
    claim = _claim(b)
    running = start(claim.job, T0).unwrap()
    dead = dead_letter(running, ErrorInfo("Boom", "no", False), T0).job
    assert b.queue.finish(claim, dead)
    found = b.queue.enqueue_new(make_job(id=first.id))
    assert found is not None and found.status is JobStatus.FAILED
    assert _queued(b) == 0


def a_unique_key_is_held_while_scheduled(b: Backend) -> None:
    key = _key()
    holder = make_job(unique_key=key, delay=timedelta(minutes=5))
    assert b.queue.enqueue_new(holder) is None
    found = b.queue.enqueue_new(make_job(unique_key=key))
    assert found == holder and found.status is JobStatus.SCHEDULED
    assert _queued(b) == 1


def a_unique_key_is_held_while_pending(b: Backend) -> None:
    key = _key()
    holder = make_job(unique_key=key, args={"n": 1})
    assert b.queue.enqueue_new(holder) is None
    assert b.queue.enqueue_new(make_job(unique_key=key, args={"n": 2})) == holder
    assert _queued(b) == 1


def a_unique_key_is_held_while_running(b: Backend) -> None:
    key = _key()
    holder = make_job(unique_key=key)
    assert b.queue.enqueue_new(holder) is None
    _claim(b)
    found = b.queue.enqueue_new(make_job(unique_key=key))
    assert found is not None and found.id == holder.id and found.status is JobStatus.RUNNING
    assert _queued(b) == 1


def a_unique_key_is_held_while_retrying(b: Backend) -> None:
    key = _key()
    holder = make_job(unique_key=key)
    assert b.queue.enqueue_new(holder) is None
    claim = _claim(b)
    failed = Failed(ErrorInfo("Boom", "try again"))
    retry = decide(start(claim.job, T0).unwrap(), failed, T0, Policies(), 0.5).job
    assert retry.status is JobStatus.RETRYING
    assert b.queue.replace(claim, retry)
    found = b.queue.enqueue_new(make_job(unique_key=key))
    assert found is not None and found.id == holder.id and found.status is JobStatus.RETRYING
    assert _queued(b) == 1


def a_unique_key_is_free_once_its_holder_finishes(b: Backend) -> None:
    key = _key()
    assert b.queue.enqueue_new(make_job(unique_key=key)) is None
    _complete(b)
    after = make_job(unique_key=key)
    assert b.queue.enqueue_new(after) is None, "the finished holder no longer counts"
    assert b.queue.enqueue_new(make_job(unique_key=key)) == after, "the new job holds it"


def a_unique_key_counting_completed_is_held_within_unique_for(b: Backend) -> None:
    key = _key()
    states = ["pending", "running", "completed"]
    holder = make_job(unique_key=key, unique_for=60, unique_states=states)
    assert b.queue.enqueue_new(holder) is None
    record = _complete(b)
    within = make_job(now=T0 + timedelta(seconds=59), unique_key=key)
    assert b.queue.enqueue_new(within) == record
    past = make_job(now=T0 + timedelta(seconds=61), unique_key=key)
    assert b.queue.enqueue_new(past) is None, "the window has passed"


def a_unique_key_expires_after_unique_for_even_while_pending(b: Backend) -> None:
    key = _key()
    holder = make_job(unique_key=key, unique_for=timedelta(seconds=10))
    assert b.queue.enqueue_new(holder) is None
    assert b.queue.enqueue_new(make_job(now=T0 + timedelta(seconds=9), unique_key=key)) == holder
    assert b.queue.enqueue_new(make_job(now=T0 + timedelta(seconds=10), unique_key=key)) is None
    assert _queued(b) == 2


def a_job_refused_for_its_id_takes_no_unique_key(b: Backend) -> None:
    done = make_job()
    assert b.queue.enqueue_new(done) is None
    record = _complete(b)
    key = _key()
    counting_completed = ["pending", "completed"]
    clash = make_job(id=done.id, unique_key=key, unique_states=counting_completed)
    assert b.queue.enqueue_new(clash) == record
    assert b.queue.find(done.id) is None, "nothing was queued under the taken id"
    fresh = make_job(unique_key=key)
    assert b.queue.enqueue_new(fresh) is None, "the refused job never held the key"


def enqueue_new_many_answers_each_job_in_list_order(b: Backend) -> None:
    key = _key()
    first = make_job(unique_key=key)
    same_key = make_job(unique_key=key)
    plain = make_job()
    same_id = attrs.evolve(make_job(args={"other": True}), id=first.id)
    answers = b.queue.enqueue_new_many([first, same_key, plain, same_id])
    assert answers == [None, first, None, first]
    assert b.queue.enqueue_new_many([]) == []
    assert _queued(b) == 2


def enqueue_new_never_replaces_what_enqueue_upserts(b: Backend) -> None:
    job = make_job(args={"n": 1})
    b.queue.enqueue(job)
    assert b.queue.enqueue_new(attrs.evolve(job, args=make_job(args={"n": 2}).args)) == job
    assert _claim(b).job.args == job.args


UNIQUE_CASES = (
    same_id_twice_returns_the_first_job_unchanged,
    same_id_while_running_returns_it_as_running,
    same_id_after_completion_returns_the_completed_record,
    same_id_of_a_dead_letter_returns_the_dead_letter,
    a_unique_key_is_held_while_scheduled,
    a_unique_key_is_held_while_pending,
    a_unique_key_is_held_while_running,
    a_unique_key_is_held_while_retrying,
    a_unique_key_is_free_once_its_holder_finishes,
    a_unique_key_counting_completed_is_held_within_unique_for,
    a_unique_key_expires_after_unique_for_even_while_pending,
    a_job_refused_for_its_id_takes_no_unique_key,
    enqueue_new_many_answers_each_job_in_list_order,
    enqueue_new_never_replaces_what_enqueue_upserts,
)
