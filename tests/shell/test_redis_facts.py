"""The Redis scripts get facts, not rules, against a real `redis-server`: a job's
partition and job type and a record's finish minute and time are worked out in
Python from the core and handed over, and data written before the scripts were
given them (a job hash or a record without them, as an earlier version wrote it)
is still claimed, counted and pruned by the same rules: Python reads the body and
hands the facts over. What every backend agrees on is the contract's `facts`
cases."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import timedelta
from importlib.resources import files

import attrs
import pytest
import redis
from conveyor.core import PRIORITY_ORDER, JobStatus, Priority, PruneOrder
from conveyor.core.limits import Cap, QueueLimits
from conveyor.core.throughput import FINISH_COUNT_RETENTION_S
from conveyor.shell.adapters.redis import RedisJobQueue, RedisJobStore, RedisKeys
from conveyor.shell.adapters.redis.scripts import core_values
from conveyor.shell.ports import Claim
from conveyor.testing.redis_server import redis_url
from helpers import T0, make_job

TEST_DB = 11  # a database of its own: other tests flush theirs
KEYS = RedisKeys.for_prefix("conveyor")
LATER = T0 + timedelta(seconds=10)
LUA = files("conveyor.shell.adapters.redis").joinpath("lua")


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


def as_an_earlier_version_wrote_it(client: redis.Redis, job_id: object) -> None:
    """Take from a job's hash the facts an earlier version did not keep."""
    client.hdel(KEYS.job(str(job_id)), "partition", "job_type", "part", "jtype")


def test_no_script_holds_a_rule_of_the_core() -> None:
    """No script reads a job's partition, tenant, type or finish time out of its body,
    parses a date, or spells out the priorities or the count retention: those come
    from the core, rendered (`core_values`) or as arguments."""
    for script in LUA.iterdir():
        if not script.name.endswith(".lua"):
            continue
        source = script.read_text("utf-8")
        for rule in ("partition_key", "tenant_id", "finished_at", "['job_type']", "days_from"):
            assert rule not in source, f"{script.name} reads {rule}"
        # The one body a script decodes: a unique key's holder, for its status. A
        # workflow's edges are the adapter's own [id, policy] pairs, and its document
        # the adapter's own list of names and ids, not a job's body.
        if script.name != "unique_lock.lua":
            own = source.count("cjson.decode(edge)") + source.count("cjson.decode(workflow_doc)")
            assert source.count("cjson.decode") - own == 0, script.name
        assert not re.search(r"'(critical|high|normal|low)'", source), script.name
        assert str(FINISH_COUNT_RETENTION_S) not in source, script.name
    rendered = core_values()
    assert [p.value for p in PRIORITY_ORDER] == re.findall(r"'(\w+)'", rendered)
    for priority in Priority:
        assert f"{priority.value} = {priority.rank}" in rendered


def test_a_job_parked_by_an_earlier_version_is_promoted_into_its_partition(
    queue: RedisJobQueue, client: redis.Redis
) -> None:
    queue.limit_usage("q", T0)  # limited from the start
    parked = make_job("mail", queue="q", partition="p", run_at=T0 + timedelta(seconds=5))
    queue.enqueue(parked)
    as_an_earlier_version_wrote_it(client, parked.id)
    first = make_job("mail", queue="q", partition="p", run_at=T0 + timedelta(seconds=5))
    queue.enqueue(first)
    # The claim promotes both; the one without facts waits for Python to read its body.
    limits = QueueLimits(caps=(Cap(1, per_partition=True),))
    [claim] = queue.dequeue_limited("q", LATER, 5, limits).claims
    assert isinstance(claim, Claim) and claim.job.id == parked.id
    usage = queue.limit_usage("q", LATER)
    assert dict(usage.running) == {("mail", "p"): 1}
    assert dict(usage.ready) == {"p": 1}
    assert [(c.id, c.partition, c.job_type) for c in usage.candidates] == [
        (str(first.id), "p", "mail")
    ]
    assert not client.hexists(f"{KEYS.base}:limits:q", "nofacts")


def test_a_ready_job_written_by_an_earlier_version_is_indexed_by_its_body(
    queue: RedisJobQueue, client: redis.Redis
) -> None:
    jobs = [make_job("mail", queue="q", tenant_id=t) for t in ("a", "b", "a")]
    queue.enqueue_many(jobs)
    for job in jobs:
        as_an_earlier_version_wrote_it(client, job.id)
    usage = queue.limit_usage("q", T0)
    assert dict(usage.ready) == {"a": 2, "b": 1}
    fair = QueueLimits(fair=True)
    got = [c.job.tenant_id for c in queue.dequeue_limited("q", T0, 3, fair).claims]
    assert got == ["a", "b", "a"]


def test_a_job_claimed_by_an_earlier_version_is_counted_under_its_partition(
    queue: RedisJobQueue, client: redis.Redis
) -> None:
    queue.limit_usage("q", T0)
    job = make_job("charge", queue="q", partition="acme", run_at=T0 + timedelta(seconds=1))
    queue.enqueue(job)
    [claim] = queue.dequeue_many("q", LATER, 1)
    as_an_earlier_version_wrote_it(client, job.id)
    assert dict(queue.limit_usage("q", LATER).running) == {("charge", "acme"): 1}
    # Its partition's cap is full: the claim counts it too.
    queue.enqueue(make_job("charge", queue="q", partition="acme"))
    limits = QueueLimits(caps=(Cap(1, per_partition=True),))
    assert queue.dequeue_limited("q", LATER, 5, limits).claims == []
    assert isinstance(claim, Claim)


def test_records_without_their_finish_time_are_pruned_by_the_time_in_their_body(
    store: RedisJobStore, client: redis.Redis
) -> None:
    now = T0 + timedelta(days=30)
    old = [make_job() for _ in range(3)]
    new = make_job()
    for job, age in [*((j, timedelta(days=9)) for j in old), (new, timedelta(days=1))]:
        done = attrs.evolve(job, status=JobStatus.COMPLETED, finished_at=now - age, attempt=1)
        store.record(done)
        client.hdel(KEYS.store(str(job.id)), "finished_us")
    order = PruneOrder(
        completed_before=now - timedelta(days=7),
        dead_before=None,
        keep_completed=None,
        keep_dead=None,
        limit=100,
    )
    assert store.count_prunable(order) == 3
    assert store.prune(order) == 3
    assert [j.id for j in store.list_history()] == [new.id]
    # The facts handed over are kept: the next walk reads them from the record.
    kept = client.hget(KEYS.store(str(new.id)), "finished_us")
    assert kept is not None and int(kept) > 0


def test_a_record_counts_in_the_minute_and_for_the_time_the_core_says(
    store: RedisJobStore, client: redis.Redis
) -> None:
    at = T0 + timedelta(minutes=3, seconds=59)
    done = attrs.evolve(make_job(), status=JobStatus.COMPLETED, finished_at=at, attempt=1)
    cancelled = attrs.evolve(make_job(), status=JobStatus.CANCELLED, finished_at=at)
    store.record(done)
    store.record(cancelled)
    counts = store.finished_per_minute(T0, 5)
    assert counts.completed == (0, 0, 0, 1, 0)
    assert counts.failed == (0, 0, 0, 0, 0)
    minute = at.strftime("%Y%m%d%H%M")
    assert client.hgetall(f"{KEYS.base}:finished:{minute}") == {b"completed": b"1"}
    assert 0 < client.ttl(f"{KEYS.base}:finished:{minute}") <= FINISH_COUNT_RETENTION_S
