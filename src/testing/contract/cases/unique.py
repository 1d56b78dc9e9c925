"""Cases of caller-chosen ids and unique keys (`JobQueue.enqueue_new`).

Keys carry a fresh suffix: a server's data may outlive one case.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

import attrs

from ....core import ErrorInfo, Failed, Job, JobStatus, Policies, Succeeded, decide, start
from ....core.decisions import dead_letter
from ....shell.ports import Claim
from ..case import case
from ..subject import FINISHING, Subject
from ..support import T0, make_job


def _key() -> str:
    return f"report:{uuid.uuid4().hex}"


def _claim(s: Subject, now: datetime = T0) -> Claim:
    claim = s.queue.dequeue("default", now)
    assert isinstance(claim, Claim), f"expected a claim, got {claim!r}"
    return claim


def _complete(s: Subject, now: datetime = T0) -> Job:
    claim = _claim(s, now)
    record = decide(start(claim.job, now).unwrap(), Succeeded(1), now, Policies(), 0.5).job
    assert s.queue.finish(claim, record)
    return record


def _queued(s: Subject) -> int:
    counts = s.queue.counts(T0 + timedelta(days=1))
    return sum(c.ready + c.scheduled + c.in_flight for c in counts.values())


@case()
def same_id_twice_returns_the_first_job_unchanged(s: Subject) -> None:
    first = make_job(args={"n": 1})
    second = make_job(args={"n": 2}, id=first.id, priority="high")
    assert s.queue.enqueue_new(first) is None
    assert s.queue.enqueue_new(second) == first
    assert _claim(s).job == first, "the args were not replaced"
    assert _queued(s) == 1


@case()
def same_id_while_running_returns_it_as_running(s: Subject) -> None:
    first = make_job(args={"n": 1})
    assert s.queue.enqueue_new(first) is None
    claim = _claim(s)
    found = s.queue.enqueue_new(make_job(args={"n": 2}, id=first.id))
    assert found is not None and found.status is JobStatus.RUNNING
    assert found.args == first.args
    assert s.queue.ack(claim), "the claim was left alone"


@case(FINISHING)
def same_id_after_completion_returns_the_completed_record(s: Subject) -> None:
    first = make_job(args={"n": 1})
    assert s.queue.enqueue_new(first) is None
    record = _complete(s)
    assert s.queue.enqueue_new(make_job(args={"n": 2}, id=first.id)) == record
    assert _queued(s) == 0, "nothing new was queued"


@case(FINISHING)
def same_id_of_a_dead_letter_returns_the_dead_letter(s: Subject) -> None:
    first = make_job()
    assert s.queue.enqueue_new(first) is None
    claim = _claim(s)
    running = start(claim.job, T0).unwrap()
    dead = dead_letter(running, ErrorInfo("Boom", "no", False), T0).job
    assert s.queue.finish(claim, dead)
    found = s.queue.enqueue_new(make_job(id=first.id))
    assert found is not None and found.status is JobStatus.FAILED
    assert _queued(s) == 0


@case()
def a_unique_key_is_held_while_scheduled(s: Subject) -> None:
    key = _key()
    holder = make_job(unique_key=key, delay=timedelta(minutes=5))
    assert s.queue.enqueue_new(holder) is None
    found = s.queue.enqueue_new(make_job(unique_key=key))
    assert found == holder and found.status is JobStatus.SCHEDULED
    assert _queued(s) == 1


@case()
def a_unique_key_is_held_while_pending(s: Subject) -> None:
    key = _key()
    holder = make_job(unique_key=key, args={"n": 1})
    assert s.queue.enqueue_new(holder) is None
    assert s.queue.enqueue_new(make_job(unique_key=key, args={"n": 2})) == holder
    assert _queued(s) == 1


@case()
def a_unique_key_is_held_while_running(s: Subject) -> None:
    key = _key()
    holder = make_job(unique_key=key)
    assert s.queue.enqueue_new(holder) is None
    _claim(s)
    found = s.queue.enqueue_new(make_job(unique_key=key))
    assert found is not None and found.id == holder.id and found.status is JobStatus.RUNNING
    assert _queued(s) == 1


@case()
def a_unique_key_is_held_while_retrying(s: Subject) -> None:
    key = _key()
    holder = make_job(unique_key=key)
    assert s.queue.enqueue_new(holder) is None
    claim = _claim(s)
    failed = Failed(ErrorInfo("Boom", "try again"))
    retry = decide(start(claim.job, T0).unwrap(), failed, T0, Policies(), 0.5).job
    assert retry.status is JobStatus.RETRYING
    assert s.queue.replace(claim, retry)
    found = s.queue.enqueue_new(make_job(unique_key=key))
    assert found is not None and found.id == holder.id and found.status is JobStatus.RETRYING
    assert _queued(s) == 1


@case(FINISHING)
def a_unique_key_is_free_once_its_holder_finishes(s: Subject) -> None:
    key = _key()
    assert s.queue.enqueue_new(make_job(unique_key=key)) is None
    _complete(s)
    after = make_job(unique_key=key)
    assert s.queue.enqueue_new(after) is None, "the finished holder no longer counts"
    assert s.queue.enqueue_new(make_job(unique_key=key)) == after, "the new job holds it"


@case(FINISHING)
def a_unique_key_counting_completed_is_held_within_unique_for(s: Subject) -> None:
    key = _key()
    states = ["pending", "running", "completed"]
    holder = make_job(unique_key=key, unique_for=60, unique_states=states)
    assert s.queue.enqueue_new(holder) is None
    record = _complete(s)
    within = make_job(now=T0 + timedelta(seconds=59), unique_key=key)
    assert s.queue.enqueue_new(within) == record
    past = make_job(now=T0 + timedelta(seconds=61), unique_key=key)
    assert s.queue.enqueue_new(past) is None, "the window has passed"


@case()
def a_unique_key_expires_after_unique_for_even_while_pending(s: Subject) -> None:
    key = _key()
    holder = make_job(unique_key=key, unique_for=timedelta(seconds=10))
    assert s.queue.enqueue_new(holder) is None
    assert s.queue.enqueue_new(make_job(now=T0 + timedelta(seconds=9), unique_key=key)) == holder
    assert s.queue.enqueue_new(make_job(now=T0 + timedelta(seconds=10), unique_key=key)) is None
    assert _queued(s) == 2


@case(FINISHING)
def a_job_refused_for_its_id_takes_no_unique_key(s: Subject) -> None:
    done = make_job()
    assert s.queue.enqueue_new(done) is None
    record = _complete(s)
    key = _key()
    counting_completed = ["pending", "completed"]
    clash = make_job(id=done.id, unique_key=key, unique_states=counting_completed)
    assert s.queue.enqueue_new(clash) == record
    assert s.queue.find(done.id) is None, "nothing was queued under the taken id"
    fresh = make_job(unique_key=key)
    assert s.queue.enqueue_new(fresh) is None, "the refused job never held the key"


@case()
def enqueue_new_many_answers_each_job_in_list_order(s: Subject) -> None:
    key = _key()
    first = make_job(unique_key=key)
    same_key = make_job(unique_key=key)
    plain = make_job()
    same_id = attrs.evolve(make_job(args={"other": True}), id=first.id)
    answers = s.queue.enqueue_new_many([first, same_key, plain, same_id])
    assert answers == [None, first, None, first]
    assert s.queue.enqueue_new_many([]) == []
    assert _queued(s) == 2


@case()
def enqueue_new_never_replaces_what_enqueue_upserts(s: Subject) -> None:
    job = make_job(args={"n": 1})
    s.queue.enqueue(job)
    assert s.queue.enqueue_new(attrs.evolve(job, args=make_job(args={"n": 2}).args)) == job
    assert _claim(s).job.args == job.args


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
