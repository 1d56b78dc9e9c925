"""The Redis backend's lean hot path, against a real `redis-server`.

An idle worker's wake-up and its claim share one round trip (`wait_and_dequeue`:
the claim script is pipelined behind the blocking pop), and a finished batch of
prefetched claims is fenced by its call's held set and checked against the store's
history once, instead of reading every job's hash and record.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import attrs
import pytest
import redis
import redis.connection
from conveyor.core import ErrorInfo, Job, JobStatus, dead_letter, start
from conveyor.shell.adapters.redis_queue import RedisJobQueue, RedisJobStore
from conveyor.shell.ports import BadClaim, Claim, is_prefetched
from conveyor.shell.registry import Registry
from conveyor.shell.worker.loop import Worker
from conveyor.testing.redis_server import redis_url
from test_redis_backend import T0, TEST_DB, make_job

ERROR = ErrorInfo("boom", "it broke", False)


def dead(job: Job) -> Job:
    return dead_letter(start(job, T0).unwrap(), ERROR, T0).job


def completed(job: Job) -> Job:
    return attrs.evolve(start(job, T0).unwrap(), status=JobStatus.COMPLETED)


@pytest.fixture
def client() -> Iterator[redis.Redis]:
    c = redis.Redis.from_url(redis_url(TEST_DB))
    c.flushdb()
    yield c
    c.close()


@pytest.fixture
def queue(client: redis.Redis) -> RedisJobQueue:
    return RedisJobQueue(client)


@pytest.fixture
def store(client: redis.Redis) -> RedisJobStore:
    return RedisJobStore(client)


@pytest.fixture
def sends(monkeypatch: pytest.MonkeyPatch) -> Counter[int]:
    """Packed sends (round trips) per thread: a pipeline is one."""
    counted: Counter[int] = Counter()
    original = redis.connection.AbstractConnection.send_packed_command

    def counting(self: Any, command: Any, check_health: bool = True) -> None:
        counted[threading.get_ident()] += 1
        original(self, command, check_health)

    monkeypatch.setattr(redis.connection.AbstractConnection, "send_packed_command", counting)
    return counted


def _wait_until_blocked(client: redis.Redis) -> None:
    deadline = time.monotonic() + 5
    while not any(c.get("cmd") == "blpop" for c in client.client_list()):
        assert time.monotonic() < deadline, "the waiter never blocked"
        time.sleep(0.005)


def _in_background(call: Any) -> tuple[threading.Thread, dict[str, Any]]:
    out: dict[str, Any] = {}

    def run() -> None:
        out["thread"] = threading.get_ident()
        out["result"] = call()
        out["at"] = time.monotonic()

    thread = threading.Thread(target=run)
    thread.start()
    return thread, out


def _claims(found: list[Claim | BadClaim]) -> list[Claim]:
    assert all(isinstance(c, Claim) for c in found), found
    return [c for c in found if isinstance(c, Claim)]


# --- enqueue in one round trip ---------------------------------------------------------


def _calls(client: redis.Redis) -> Counter[str]:
    """Calls per command since the server started (commands run by scripts included)."""
    stats = client.info("commandstats")
    return Counter({k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in stats.items()})


def test_an_enqueue_is_one_script_in_one_round_trip(
    client: redis.Redis, queue: RedisJobQueue, sends: Counter[int]
) -> None:
    queue.enqueue(make_job())  # the server has the script from now on
    job, before = make_job(), _calls(client)
    sent = sends[threading.get_ident()]
    queue.enqueue(job)
    assert sends[threading.get_ident()] - sent == 1
    ran = _calls(client) - before
    assert ran["evalsha"] == 1
    # A new job has no earlier placement to look up field by field or take away, and a
    # short wake-up list needs no trim.
    assert ran["hdel"] == 0 and ran["hget"] == 0 and ran["ltrim"] == 0, ran
    assert client.hget(queue.keys.job(str(job.id)), "status") == b"ready"


def test_an_enqueue_again_takes_the_earlier_placement_away(
    client: redis.Redis, queue: RedisJobQueue
) -> None:
    job = make_job(run_at=T0 + timedelta(seconds=5))
    queue.enqueue(job)
    before = _calls(client)
    queue.enqueue(attrs.evolve(job, run_at=T0, status=JobStatus.PENDING))
    ran = _calls(client) - before
    assert ran["hdel"] == 1, ran
    assert client.zcard(queue.keys.scheduled("jobs")) == 0
    assert client.hget(queue.keys.job(str(job.id)), "status") == b"ready"
    assert client.hget(queue.keys.job(str(job.id)), "partition") is None


# --- pickup in one round trip ----------------------------------------------------------


def test_an_idle_wait_hands_over_a_job_enqueued_meanwhile_in_one_round_trip(
    client: redis.Redis, queue: RedisJobQueue, sends: Counter[int]
) -> None:
    waiter = RedisJobQueue(redis.Redis.from_url(redis_url(TEST_DB)))
    waiter.dequeue_many("jobs", T0, 10)  # the server has the claim script from now on
    thread, out = _in_background(lambda: waiter.wait_and_dequeue("jobs", T0, 10, 5.0))
    _wait_until_blocked(client)
    job = make_job()
    enqueued_at = time.monotonic()
    queue.enqueue(job)
    thread.join(timeout=10)
    claims = _claims(out["result"])
    assert [c.job.id for c in claims] == [job.id]
    assert out["at"] - enqueued_at < 2.0  # woken by the enqueue, not by the timeout
    assert sends[out["thread"]] == 1
    assert is_prefetched(claims[0].token)  # a batch's claims start unstarted
    assert queue.counts(T0)["jobs"].in_flight == 1


def test_a_wait_for_one_job_gives_a_started_claim(queue: RedisJobQueue) -> None:
    job = make_job()
    queue.enqueue(job)
    [claim] = _claims(queue.wait_and_dequeue("jobs", T0, 1, 1.0))
    assert claim.job.id == job.id
    assert claim.started
    assert queue.ack(claim)


def test_a_claim_behind_a_wait_is_leased_from_the_latest_end_of_the_wait(
    queue: RedisJobQueue,
) -> None:
    queue.enqueue(make_job())
    [claim] = _claims(queue.wait_and_dequeue("jobs", T0, 10, 0.2))
    assert claim.locked_at == T0 + timedelta(seconds=0.2)
    # Abandoned no earlier than a lease after the wait could have ended.
    assert queue.abandoned(T0 + timedelta(seconds=0.2)) == []
    assert [c.job.id for c in queue.abandoned(T0 + timedelta(seconds=0.201))] == [claim.job.id]


def test_a_quiet_wait_times_out_with_nothing(queue: RedisJobQueue) -> None:
    began = time.monotonic()
    assert queue.wait_and_dequeue("jobs", T0, 10, 0.1) == []
    assert time.monotonic() - began >= 0.09


def test_a_wait_claims_parked_jobs_due_when_it_was_sent(queue: RedisJobQueue) -> None:
    due = make_job(run_at=T0 + timedelta(seconds=1))
    queue.enqueue(due)  # parked: its wake token ends the wait at once
    assert queue.wait_and_dequeue("jobs", T0, 10, 1.0) == []
    claims = _claims(queue.wait_and_dequeue("jobs", T0 + timedelta(seconds=1), 10, 1.0))
    assert [c.job.id for c in claims] == [due.id]


def test_a_wait_on_a_server_that_lost_its_scripts_still_claims(
    client: redis.Redis, queue: RedisJobQueue
) -> None:
    job = make_job()
    queue.enqueue(job)
    client.script_flush()  # as a restarted server without its script cache
    assert [c.job.id for c in _claims(queue.wait_and_dequeue("jobs", T0, 10, 1.0))] == [job.id]


def test_a_wait_whose_reply_was_lost_returns_the_same_claims_once(
    queue: RedisJobQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    jobs = [make_job() for _ in range(3)]
    for job in jobs:
        queue.enqueue(job)
    original = RedisJobQueue._blocking_claim

    def lost_reply(self: RedisJobQueue, *args: Any) -> Any:
        original(self, *args)  # it ran on the server...
        raise redis.ConnectionError("...and the reply was lost")

    monkeypatch.setattr(RedisJobQueue, "_blocking_claim", lost_reply)
    claims = _claims(queue.wait_and_dequeue("jobs", T0, 2, 1.0))
    assert [c.job.id for c in claims] == [j.id for j in jobs[:2]]
    assert queue.counts(T0)["jobs"].in_flight == 2
    assert queue.counts(T0)["jobs"].ready == 1
    assert all(queue.extend(c, T0) for c in claims)  # the tokens it returned hold them


def test_an_idle_worker_runs_the_job_its_wake_up_claimed(queue: RedisJobQueue) -> None:
    ran, waiting = threading.Event(), threading.Event()
    handed: list[int] = []
    original = queue.wait_and_dequeue

    def spy(*args: Any) -> list[Claim | BadClaim]:
        waiting.set()
        found = original(*args)
        handed.append(len(found))
        return found

    queue.wait_and_dequeue = spy  # type: ignore[method-assign]
    registry = Registry({"work": lambda _: ran.set()})
    worker = Worker(queue, RedisJobStore(queue._client), registry, queue_name="jobs")
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        # Enqueue once the worker is in its wait (idle): a job enqueued after a wait
        # returned would be taken by the worker's next ordinary claim instead.
        assert waiting.wait(5)
        queue.enqueue(make_job(now=datetime.now(T0.tzinfo)))
        assert ran.wait(5)
    finally:
        worker.stop()
        thread.join(timeout=10)
    assert 1 in handed
    assert queue.counts(T0)["jobs"].in_flight == 0


def test_a_worker_stopping_with_claims_from_its_wake_up_hands_them_back(
    queue: RedisJobQueue, store: RedisJobStore
) -> None:
    ran: list[object] = []
    worker = Worker(queue, store, Registry({"work": ran.append}), queue_name="jobs", prefetch=10)
    original = queue.wait_and_dequeue

    def claim_then_stop(*args: Any) -> list[Claim | BadClaim]:
        found = original(*args)
        worker.stop()
        return found

    queue.wait_and_dequeue = claim_then_stop  # type: ignore[method-assign]
    job = make_job(now=datetime.now(T0.tzinfo))
    queue.enqueue(job)
    # Rounds find nothing, so the worker goes idle and its wake-up claims the job.
    worker.run_once = lambda **_: 0  # type: ignore[method-assign]
    worker.run()
    assert ran == []
    counts = queue.counts(T0)["jobs"]
    assert (counts.ready, counts.in_flight) == (1, 0)


# --- finishing a batch -----------------------------------------------------------------


def test_a_batch_finishing_a_job_recorded_before_moves_it_out_of_its_old_indexes(
    queue: RedisJobQueue, store: RedisJobStore
) -> None:
    job = make_job()
    store.record(dead(job))  # an earlier dead letter, revived
    queue.enqueue(job)
    [claim] = _claims(list(queue.dequeue_many("jobs", T0, 10)))
    assert queue.finish_many([(claim, completed(job))]) == [True]
    assert store.list_dead() == []
    assert store.count_dead() == {}
    assert [j.id for j in store.list_history(status=JobStatus.COMPLETED)] == [job.id]
    assert [j.id for j in store.list_history()] == [job.id]


def test_a_batch_of_dead_letters_counts_each_of_them(
    queue: RedisJobQueue, store: RedisJobStore
) -> None:
    jobs = [make_job() for _ in range(3)] + [make_job("other")]
    for job in jobs:
        queue.enqueue(job)
    claims = _claims(list(queue.dequeue_many("jobs", T0, 10)))
    claims += _claims(list(queue.dequeue_many("other", T0, 10)))
    items = [(c, dead(c.job)) for c in claims]
    assert queue.finish_many(items) == [True] * 4
    assert store.count_dead() == {"jobs": 3, "other": 1}
    assert len(store.list_dead()) == 4


def _calls(client: redis.Redis) -> Counter[str]:
    stats = client.info("commandstats")
    return Counter({k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in stats.items()})


def test_a_finished_batch_of_prefetched_claims_reads_no_job_hash(
    client: redis.Redis, queue: RedisJobQueue
) -> None:
    jobs = [make_job() for _ in range(10)]
    for job in jobs:
        queue.enqueue(job)
    claims = _claims(list(queue.dequeue_many("jobs", T0, 10)))
    before = _calls(client)
    assert queue.finish_many([(c, completed(c.job)) for c in claims]) == [True] * 10
    spent = _calls(client) - before
    # The batch's held set fences all ten at once, one ZMSCORE tells which had a record
    # before; per job only its record is written.
    assert spent["hmget"] == 0
    assert spent["smismember"] == 1
    assert spent["zmscore"] == 1
    assert spent["hset"] == 10
    assert client.keys("*:held:*") == []  # nothing is left behind


def _prefetched(queue: RedisJobQueue, n: int = 1) -> list[Claim]:
    for _ in range(n):
        queue.enqueue(make_job())
    return _claims(list(queue.dequeue_many("jobs", T0, n)))


def test_a_batch_refuses_a_prefetched_claim_with_a_cancel_request(
    queue: RedisJobQueue, store: RedisJobStore
) -> None:
    [claim] = _prefetched(queue)
    assert queue.request_cancel(claim.job.id, T0)
    assert queue.finish_many([(claim, completed(claim.job))]) == [False]
    cancelled = attrs.evolve(claim.job, status=JobStatus.CANCELLED)
    assert queue.finish_cancelled(claim, cancelled)
    assert store.get(claim.job.id) == cancelled


def test_a_batch_refuses_a_prefetched_claim_that_was_reclaimed(queue: RedisJobQueue) -> None:
    [claim] = _prefetched(queue)
    [abandoned] = queue.abandoned(T0 + timedelta(seconds=61))
    assert isinstance(abandoned, Claim)
    assert queue.reclaim(abandoned, claim.job, T0 + timedelta(seconds=61))
    assert queue.finish_many([(claim, completed(claim.job))]) == [False]
    assert queue.counts(T0)["jobs"].ready == 1


def test_a_batch_refuses_a_prefetched_claim_whose_job_was_enqueued_again(
    queue: RedisJobQueue,
) -> None:
    [claim] = _prefetched(queue)
    queue.enqueue(claim.job)
    assert queue.finish_many([(claim, completed(claim.job))]) == [False]
    assert queue.counts(T0)["jobs"].ready == 1


def test_a_batch_refuses_a_prefetched_claim_already_acked(queue: RedisJobQueue) -> None:
    [claim] = _prefetched(queue)
    assert queue.ack(claim)
    assert queue.finish_many([(claim, completed(claim.job))]) == [False]


def test_a_started_claim_finishes_by_its_new_token_only(queue: RedisJobQueue) -> None:
    [claim] = _prefetched(queue)
    started = queue.start_claim(claim, T0)
    assert started is not None
    assert queue.finish_many([(claim, completed(claim.job))]) == [False]
    assert queue.finish_many([(started, completed(claim.job))]) == [True]


def test_a_claim_taken_before_held_sets_existed_still_finishes_in_a_batch(
    client: redis.Redis, queue: RedisJobQueue, store: RedisJobStore
) -> None:
    claims = _prefetched(queue, 3)
    # What the previous layout left: the claims in the job hashes, no held set.
    for key in client.keys("*:held:*"):
        client.delete(key)
    assert queue.finish_many([(c, completed(c.job)) for c in claims]) == [True] * 3
    assert len(store.list_history(status=JobStatus.COMPLETED)) == 3
    assert queue.counts(T0)["jobs"].in_flight == 0


def test_a_wait_that_fails_still_hands_over_what_its_claim_took(
    client: redis.Redis, queue: RedisJobQueue
) -> None:
    job = make_job()
    queue.enqueue(job)
    client.set(queue.keys.wake("jobs"), "not a list")  # BLPOP now fails with WRONGTYPE
    assert [c.job.id for c in _claims(queue.wait_and_dequeue("jobs", T0, 10, 1.0))] == [job.id]
    with pytest.raises(redis.ResponseError):
        queue.wait_and_dequeue("jobs", T0, 10, 1.0)  # nothing claimed: the failure is told
