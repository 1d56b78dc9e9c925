"""The Redis backend's own part of the trust work: parked jobs of the previous key
layout, `abandoned` and `revive` as one script each, and one retry layer whose
re-sends are safe. What every backend shares (prefetched claims, claim-time
promotion, guarded finishes, revive, the server's clock) is in the contract
(`conveyor.testing.contract`), run on Redis by test_adapter_surface.py.

Against a real `redis-server` (database 14, flushed), as in test_redis_backend.py.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any
from uuid import uuid4

import attrs
import pytest
import redis
from conveyor.core import ErrorInfo, Job, JobStatus, dead_letter, start
from conveyor.shell.adapters.redis_queue import RedisJobQueue, RedisJobStore, connect
from conveyor.shell.codec import encode
from conveyor.shell.ports import BadClaim, Claim
from conveyor.testing.redis_server import RedisServer, redis_url
from test_redis_backend import T0, TEST_DB, CountingRedis, make_job


class LossyRedis(CountingRedis):
    """A real client that can lose the reply of its next script call after the server
    ran it, as a dropped connection does; `between` runs in that gap."""

    lose_next = False
    between: Callable[[], None] | None = None

    def execute_command(self, *args: Any, **options: Any) -> Any:
        reply = super().execute_command(*args, **options)
        if self.lose_next and str(args[0]).upper() == "EVALSHA":
            self.lose_next = False
            if self.between is not None:
                self.between()
            raise redis.ConnectionError("the reply was lost")
        return reply


@pytest.fixture
def client() -> Iterator[LossyRedis]:
    c = LossyRedis.from_url(redis_url(TEST_DB))
    c.flushdb()
    yield c
    c.close()


@pytest.fixture
def other() -> Iterator[redis.Redis]:
    c = redis.Redis.from_url(redis_url(TEST_DB))
    yield c
    c.close()


@pytest.fixture
def queue(client: redis.Redis) -> RedisJobQueue:
    return RedisJobQueue(client, retry_budget_s=5)


@pytest.fixture
def store(client: redis.Redis) -> RedisJobStore:
    return RedisJobStore(client)


def dead(job: Job) -> Job:
    return dead_letter(start(job, T0).unwrap(), ErrorInfo("boom", "it broke", False), T0).job


def only_claim(result: Claim | BadClaim | None) -> Claim:
    assert isinstance(result, Claim), f"expected a claim, got {result!r}"
    return result


# --- the previous key layout --------------------------------------------------------------


def test_parked_jobs_written_by_the_previous_layout_are_still_found(
    client: redis.Redis, queue: RedisJobQueue
) -> None:
    """Before the enqueue sequence, a scheduled member was the bare id, scored in ms."""
    run_at = T0 + timedelta(seconds=2)
    old = [make_job(run_at=run_at) for _ in range(2)]
    for job in old:
        key, run_ms = queue.keys.job(str(job.id)), int(run_at.timestamp() * 1000)
        client.hset(
            key,
            mapping={
                "body": encode(job),
                "status": "scheduled",
                "queue": "jobs",
                "priority": "normal",
                "run_ms": run_ms,
                "run_us": run_ms * 1000,
            },
        )
        client.zadd(queue.keys.scheduled(), {str(job.id): run_ms})
        client.zadd(queue.keys.scheduled("jobs"), {str(job.id): run_ms})
    client.sadd(queue.keys.queues(), "jobs")
    assert queue.next_due("jobs") == run_at
    assert queue.dequeue("jobs", run_at - timedelta(milliseconds=1)) is None
    queue.enqueue(attrs.evolve(old[1], run_at=run_at + timedelta(seconds=1)))
    assert client.zcard(queue.keys.scheduled()) == 2, "the upsert left the old member behind"
    assert only_claim(queue.dequeue("jobs", run_at)).job == old[0]
    assert queue.promote_due(run_at + timedelta(seconds=1)) == 1


# --- one script per call ------------------------------------------------------------------


def test_abandoned_is_one_read_only_script(client: CountingRedis, queue: RedisJobQueue) -> None:
    assert queue.abandoned(T0) == []  # loads the script, should another test have flushed it
    queue.enqueue(make_job())
    claim = only_claim(queue.dequeue("jobs", T0))
    client.hset(queue.keys.job(str(claim.job.id)), "body", b"not json")
    client.sent.clear()
    [bad] = queue.abandoned(T0 + timedelta(seconds=1))
    assert isinstance(bad, BadClaim) and bad.token == claim.token
    assert client.sent == {"EVALSHA": 1}
    assert client.hget(queue.keys.job(str(claim.job.id)), "token") == claim.token.encode()


def test_a_revive_is_one_script_call(
    client: CountingRedis, queue: RedisJobQueue, store: RedisJobStore
) -> None:
    letter = dead(make_job())
    store.record(letter)
    fresh = attrs.evolve(letter, status=JobStatus.PENDING, attempt=0)
    assert queue.revive(dead(make_job()), fresh) is False  # loads the script
    client.sent.clear()
    assert queue.revive(letter, fresh) is True
    assert client.sent == {"EVALSHA": 1}


# --- one retry layer, and re-sends that are safe ------------------------------------------


def test_connect_turns_redis_pys_own_retries_off() -> None:
    client = connect(redis_url(TEST_DB))
    try:
        retry = client.get_retry()
        assert retry is not None and retry.get_retries() == 0
        assert client.connection_pool.get_connection().retry.get_retries() == 0
    finally:
        client.close()


def test_a_resent_claim_returns_the_job_its_token_took(
    client: LossyRedis, queue: RedisJobQueue
) -> None:
    jobs = [make_job() for _ in range(3)]
    queue.enqueue_many(jobs)
    client.lose_next = True
    claim = only_claim(queue.dequeue("jobs", T0))
    assert claim.job == jobs[0]
    assert queue.counts(T0)["jobs"].in_flight == 1, "the re-send took a second job"
    assert queue.ack(claim) is True


def test_a_resent_batch_claim_returns_the_batch_its_tokens_took(
    client: LossyRedis, queue: RedisJobQueue
) -> None:
    jobs = [make_job() for _ in range(5)]
    queue.enqueue_many(jobs)
    client.lose_next = True
    batch = [only_claim(c) for c in queue.dequeue_many("jobs", T0, 2)]
    assert [c.job for c in batch] == jobs[:2]
    assert queue.counts(T0)["jobs"].in_flight == 2, "the re-send took more jobs"
    assert all(queue.ack(c) for c in batch)


def test_a_resent_claim_whose_job_was_lost_meanwhile_takes_nothing(
    client: LossyRedis, other: redis.Redis, queue: RedisJobQueue
) -> None:
    queue.enqueue(make_job())
    queue.enqueue(make_job())
    peer = RedisJobQueue(other)
    stolen: list[Claim] = []

    def reenqueue_and_steal() -> None:
        [held] = peer.abandoned(T0 + timedelta(seconds=1))
        assert isinstance(held, Claim)
        peer.enqueue(held.job)  # an upsert unlocks the claim
        stolen.append(only_claim(peer.dequeue("jobs", T0)))

    client.between = reenqueue_and_steal
    client.lose_next = True
    assert queue.dequeue("jobs", T0) is None
    assert queue.counts(T0)["jobs"].in_flight == 1 and len(stolen) == 1


def test_resent_finishes_and_starts_report_what_landed_and_write_once(
    client: LossyRedis, queue: RedisJobQueue, store: RedisJobStore
) -> None:
    jobs = [make_job() for _ in range(3)]
    queue.enqueue_many(jobs)
    batch = [only_claim(c) for c in queue.dequeue_many("jobs", T0, 3)]
    client.lose_next = True
    started = queue.start_claim(batch[0], T0)
    assert started is not None and started.started
    assert queue.start_claim(batch[0], T0) is None

    done = attrs.evolve(start(jobs[0], T0).unwrap(), status=JobStatus.COMPLETED)
    client.lose_next = True
    assert queue.finish(started, done) is True
    assert queue.finish(started, done) is False, "only a re-send of one call succeeds twice"
    records = [attrs.evolve(j, status=JobStatus.COMPLETED) for j in jobs[1:]]
    client.lose_next = True
    assert queue.finish_many(list(zip(batch[1:], records, strict=True))) == [True, True]
    assert store.list_history() == [*records[::-1], done]


def test_a_resent_enqueue_does_not_pull_back_a_job_claimed_meanwhile(
    client: LossyRedis, other: redis.Redis, queue: RedisJobQueue
) -> None:
    job = make_job()
    peer = RedisJobQueue(other)
    taken: list[Claim] = []
    client.between = lambda: taken.append(only_claim(peer.dequeue("jobs", T0)))
    client.lose_next = True
    queue.enqueue(job)
    assert [c.job for c in taken] == [job]
    assert queue.counts(T0)["jobs"].in_flight == 1
    assert peer.ack(taken[0]) is True, "the re-send unlocked the claim"


def test_a_resent_replace_reports_the_write_that_landed(
    client: LossyRedis, queue: RedisJobQueue
) -> None:
    queue.enqueue(make_job())
    claim = only_claim(queue.dequeue("jobs", T0))
    retry = attrs.evolve(
        start(claim.job, T0).unwrap(), status=JobStatus.RETRYING, run_at=T0 + timedelta(1)
    )
    client.lose_next = True
    assert queue.replace(claim, retry) is True
    assert queue.replace(claim, retry) is False
    assert queue.counts(T0)["jobs"].scheduled == 1


def test_an_outage_shorter_than_the_budget_is_ridden_out() -> None:
    server = RedisServer(extra_args=["--appendfsync", "always"]).start()
    try:
        queue = RedisJobQueue(server.url, retry_budget_s=10)
        queue.enqueue(make_job())
        server.kill()
        restarter = threading.Timer(0.5, server.start)
        restarter.start()
        began = time.monotonic()
        claim = only_claim(queue.dequeue("jobs", T0))
        restarter.join()
        assert 0.4 < time.monotonic() - began < 10
        assert queue.ack(claim) is True
        queue.close()
    finally:
        server.cleanup()


def test_without_a_budget_an_outage_fails_at_once() -> None:
    server = RedisServer().start()
    try:
        queue = RedisJobQueue(server.url, retry_budget_s=0)
        bounded = RedisJobQueue(server.url, retry_budget_s=0.5)
        server.kill()
        began = time.monotonic()
        with pytest.raises(redis.ConnectionError):
            queue.dequeue("jobs", T0)
        assert time.monotonic() - began < 1
        began = time.monotonic()
        with pytest.raises(redis.ConnectionError):
            bounded.enqueue(make_job(id=uuid4()))
        assert 0.4 < time.monotonic() - began < 3
    finally:
        server.cleanup()


