"""Limited claims on Redis, against a real `redis-server`: what its partition index
adds to the contract's `limits` cases. A flood does not make a claim read the
backlog; stale index entries never yield a claim; a queue whose jobs were ready
before its limits were used finds them; a re-sent take returns the same claims;
concurrent claimers (each with its own connection) never exceed a cap or a rate; an
ordinary queue pays one command per ready placement and nothing per claim."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import redis
from conveyor.core.limits import Cap, QueueLimits, Rate
from conveyor.shell.adapters.redis import limits as redis_limits
from conveyor.shell.adapters.redis_queue import RedisJobQueue, RedisKeys
from conveyor.shell.ports import Claim
from conveyor.testing.redis_server import redis_url
from helpers import T0, make_job

TEST_DB = 10  # a database of its own: other tests flush theirs
KEYS = RedisKeys.for_prefix("conveyor")


@pytest.fixture
def client() -> Iterator[redis.Redis]:
    c = redis.Redis.from_url(redis_url(TEST_DB))
    c.flushdb()
    yield c
    c.close()


@pytest.fixture
def queue(client: redis.Redis) -> RedisJobQueue:
    return RedisJobQueue(client)


def commands(client: redis.Redis) -> Counter[str]:
    """Calls per command since the server started (commands inside scripts included)."""
    stats = client.info("commandstats")
    return Counter({k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in stats.items()})


def commands_of(client: redis.Redis, call: Any) -> Counter[str]:
    """The commands `call()` ran on the server (the INFO calls around it left out)."""
    before = commands(client)
    call()
    after = commands(client)
    after.subtract(before)
    after["info"] -= 1
    return +after


def enqueue(q: RedisJobQueue, queue: str, partition: str, n: int, **options: Any) -> list[Any]:
    jobs = [make_job(queue=queue, partition=partition, args={"i": i}, **options) for i in range(n)]
    for at in range(0, n, 1000):
        q.enqueue_many(jobs[at : at + 1000])
    return jobs


def partitions(got: Any) -> list[str]:
    return [c.job.partition_key or "" for c in got.claims if isinstance(c, Claim)]


def test_a_flood_in_one_partition_leaves_the_claim_of_another_just_as_cheap(
    queue: RedisJobQueue, client: redis.Redis
) -> None:
    fair = QueueLimits(fair=True)
    cost = {}
    for name, flood in (("small", 200), ("big", 20_000)):
        queue.limit_usage(name, T0)  # limits in use from the start: every job indexed
        enqueue(queue, name, "flood", flood)
        enqueue(queue, name, "late", 1)
        assert partitions(queue.dequeue_limited(name, T0, 1, fair)) == ["flood"]
        took: list[Any] = []

        def claim(name: str = name, took: list[Any] = took) -> None:
            took.append(queue.dequeue_limited(name, T0, 1, fair))

        cost[name] = commands_of(client, claim)
        assert partitions(took[0]) == ["late"]
    # The same commands, one for one, whatever the backlog: nothing walks it.
    assert cost["big"] == cost["small"]
    assert sum(cost["big"].values()) < 60, cost["big"]
    # No list scan (LREM): the taken job stays in its list as a ghost; the only list
    # read is the trim of each list's head (at most 200 entries).
    for walk in ("lrem", "lpos", "zscan", "scan", "keys"):
        assert cost["big"][walk] == 0, walk
    assert cost["big"]["lrange"] <= 4


def test_stale_index_entries_never_make_a_claim_and_are_dropped_by_the_take(
    queue: RedisJobQueue, client: redis.Redis
) -> None:
    limits = QueueLimits(fair=True)
    queue.limit_usage("q", T0)
    jobs = enqueue(queue, "q", "a", 6)
    index = f"{KEYS.base}:pready:q:a"
    # Entries no path that moves jobs leaves behind, made by hand: the entry of a hash
    # deleted by hand, of an id that never was a job, of a job claimed since.
    client.delete(KEYS.job(str(jobs[0].id)))
    client.zadd(index, {"work:no-such-job": 1})
    plain = queue.dequeue_many("q", T0, 1)  # takes jobs[1] (the first has no hash)
    assert [c.job.id for c in plain if isinstance(c, Claim)] == [jobs[1].id]
    client.zadd(index, {f"work:{jobs[1].id}": 2_000_000_000_000_001})  # claimed since
    got = queue.dequeue_limited("q", T0, 10, limits)
    assert [c.job.id for c in got.claims if isinstance(c, Claim)] == [j.id for j in jobs[2:]]
    assert client.zcard(index) == 0
    assert queue.dequeue_limited("q", T0, 10, limits).claims == []


def test_a_take_refuses_a_plan_whose_job_was_claimed_meanwhile(
    queue: RedisJobQueue, client: redis.Redis
) -> None:
    """The read and the take are two scripts: a plain claim between them is seen by
    the take's own check, and the claim plans again."""
    limits = QueueLimits(fair=True)
    jobs = enqueue(queue, "q", "a", 3)
    limited = queue._limited
    original = limited.read
    raced: list[Any] = []

    def read_then_race(*args: Any, **kwargs: Any) -> Any:
        found = original(*args, **kwargs)
        if not raced:
            raced.extend(queue.dequeue_many("q", T0, 1))
        return found

    limited.read = read_then_race  # type: ignore[method-assign]
    got = queue.dequeue_limited("q", T0, 3, limits)
    assert [c.job.id for c in raced if isinstance(c, Claim)] == [jobs[0].id]
    assert [c.job.id for c in got.claims if isinstance(c, Claim)] == [j.id for j in jobs[1:]]


def test_jobs_ready_before_the_limits_were_used_are_found_in_chunks(
    queue: RedisJobQueue, client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(redis_limits, "INDEX_BUDGET", 50)
    a = enqueue(queue, "q", "a", 300)
    b = enqueue(queue, "q", "b", 200, priority="high")
    parked = make_job(queue="q", partition="c", run_at=T0 + timedelta(seconds=1))
    queue.enqueue(parked)
    assert queue.promote_due(T0 + timedelta(seconds=2)) == 1
    # A chunk of the upgrade, then jobs placed while it is under way, then the rest.
    assert not int(queue._run(queue._limited._index, "q", 50))
    late = enqueue(queue, "q", "a", 5)
    usage = queue.limit_usage("q", T0)
    assert dict(usage.ready) == {"a": 305, "b": 200, "c": 1}
    limits = QueueLimits(fair=True)
    seen: list[Any] = []
    while got := queue.dequeue_limited("q", T0 + timedelta(seconds=2), 20, limits).claims:
        seen += [c.job for c in got if isinstance(c, Claim)]
    assert len(seen) == len({j.id for j in seen}) == 506
    # Priorities first; within a partition, FIFO (the promoted job's turn is its
    # promotion); the late ones after the rest of their partition.
    assert [j.id for j in seen[:200]] == [j.id for j in b]
    assert [j.id for j in seen if j.partition_key == "a"] == [j.id for j in a + late]
    assert parked.id in {j.id for j in seen}


def test_a_resent_take_returns_the_claims_of_the_first(
    queue: RedisJobQueue, client: redis.Redis
) -> None:
    """A take whose reply was lost is sent again by the retry loop: its receipt makes
    the second send answer with the first's claims instead of taking more."""
    limits = QueueLimits(fair=True, rates=(Rate(5, 60.0),))
    enqueue(queue, "q", "a", 4)
    enqueue(queue, "q", "b", 4)
    limited = queue._limited
    take, run = limited._take, limited._run
    first: list[Any] = []

    def lost_reply(script: Any, *args: Any) -> Any:
        if script is take and not first:
            first.append(run(script, *args))  # landed; its answer never arrived
        return run(script, *args)

    limited._run = lost_reply  # type: ignore[method-assign]
    got = queue.dequeue_limited("q", T0, 3, limits)
    ids = [c.job.id for c in got.claims if isinstance(c, Claim)]
    assert len(ids) == 3
    assert [str(i) for i in ids] == [r.decode() for r in first[0][1][::2]]
    assert client.zcard(KEYS.inflight("q")) == 3
    # One take's tokens, not two.
    [bucket] = queue.limit_usage("q", T0).buckets.values()
    assert bucket.tokens == 2.0


def test_concurrent_claimers_never_exceed_a_cap(client: redis.Redis) -> None:
    limits = QueueLimits(max_running=3, caps=(Cap(1, per_partition=True),))
    setup = RedisJobQueue(client)
    for partition in ("a", "b", "c", "d"):
        enqueue(setup, "q", partition, 40)
    problems: list[str] = []
    done = Counter[str]()
    lock = threading.Lock()

    def work() -> None:
        own = redis.Redis.from_url(redis_url(TEST_DB))
        q = RedisJobQueue(own)
        try:
            deadline = time.monotonic() + 60
            while sum(done.values()) < 160 and time.monotonic() < deadline:
                got = [
                    c for c in q.dequeue_limited("q", T0, 2, limits).claims if isinstance(c, Claim)
                ]
                usage = q.limit_usage("q", T0).running
                per = Counter[str]()
                for (_, partition), n in usage.items():
                    per[partition] += n
                if sum(per.values()) > 3 or any(n > 1 for n in per.values()):
                    problems.append(f"running {dict(usage)}")
                for claim in got:
                    assert q.ack(claim)
                    with lock:
                        done[claim.job.partition_key or ""] += 1
        finally:
            own.close()

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not problems, problems[:3]
    assert done == {"a": 40, "b": 40, "c": 40, "d": 40}


def test_concurrent_claimers_share_one_bucket(client: redis.Redis) -> None:
    limits = QueueLimits(rates=(Rate(25, 60.0),))
    enqueue(RedisJobQueue(client), "q", "a", 100)
    taken = Counter[int]()
    lock = threading.Lock()

    def work(n: int) -> None:
        own = redis.Redis.from_url(redis_url(TEST_DB))
        q = RedisJobQueue(own)
        try:
            for _ in range(10):
                got = q.dequeue_limited("q", T0, 3, limits).claims
                with lock:
                    taken[n] += len(got)
        finally:
            own.close()

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    # The bucket starts full (25) and no time passes: exactly 25 starts in all.
    assert sum(taken.values()) == 25


def test_an_ordinary_queue_pays_one_command_per_ready_placement_and_none_per_claim(
    queue: RedisJobQueue, client: redis.Redis
) -> None:
    queue.limit_usage("limited", T0)  # another queue of the deployment is limited
    jobs = [make_job(queue="plain", args={"i": i}) for i in range(10)]
    placed = commands_of(client, lambda: queue.enqueue_many(jobs))
    assert placed["sismember"] == 10
    assert placed["zadd"] == 10  # ready_at only: no partition index
    claimed = commands_of(client, lambda: queue.dequeue_many("plain", T0, 10))
    assert claimed["zrem"] == 1 and "sismember" not in claimed and "hset" in claimed
    assert not client.exists(f"{KEYS.base}:parts:plain")


def test_a_limited_queue_keeps_its_counts_exact(queue: RedisJobQueue) -> None:
    limits = QueueLimits(fair=True)
    enqueue(queue, "q", "a", 30)
    enqueue(queue, "q", "b", 3)
    got = queue.dequeue_limited("q", T0, 6, limits).claims
    counts = queue.counts(T0)["q"]
    assert (counts.ready, counts.in_flight) == (27, 6)
    assert dict(queue.limit_usage("q", T0).ready) == {"a": 27}
    assert len({c.job.id for c in got}) == 6


def test_an_upsert_into_another_partition_moves_the_job_in_the_index(
    queue: RedisJobQueue, client: redis.Redis
) -> None:
    job = make_job(queue="q", partition="a")
    queue.enqueue(job)
    assert dict(queue.limit_usage("q", T0).ready) == {"a": 1}
    queue.enqueue(make_job(id=job.id, queue="q", partition="b", priority="high"))
    usage = queue.limit_usage("q", T0)
    assert dict(usage.ready) == {"b": 1}
    assert [(c.partition, c.priority) for c in usage.candidates] == [("b", 1)]
    [claim] = queue.dequeue_limited(
        "q", T0, 5, QueueLimits(caps=(Cap(1, per_partition=True),))
    ).claims
    assert isinstance(claim, Claim) and claim.job.partition_key == "b"
    assert dict(queue.limit_usage("q", T0).running) == {("work", "b"): 1}


def test_ghost_copies_behind_a_job_held_by_a_cap_are_dropped(
    queue: RedisJobQueue, client: redis.Redis
) -> None:
    """One partition's next job waits behind a cap for hours while another runs
    thousands: the ghosts of those thousands, queued behind the waiting job in the
    same list, are dropped all the same, and the list stays short."""
    limits = QueueLimits(fair=True, caps=(Cap(1, job_type="slow"),))
    queue.enqueue_many([make_job("slow", queue="q", partition="A") for _ in range(3)])
    [running] = queue.dequeue_limited("q", T0, 1, limits).claims
    for _ in range(3):
        queue.enqueue_many([make_job("fast", queue="q", partition="B") for _ in range(500)])
        while got := queue.dequeue_limited("q", T0, 50, limits).claims:
            for claim in got:
                assert isinstance(claim, Claim) and claim.job.job_type == "fast"
                assert queue.ack(claim)
    list_key = "{conveyor}:queue:q:normal"
    assert client.llen(list_key) <= 2 + 50 + 200
    assert queue.counts(T0)["q"].ready == 2
    # The two slow jobs are still first in line once the cap frees.
    assert isinstance(running, Claim) and queue.ack(running)
    taken = queue.dequeue_limited("q", T0, 5, limits).claims
    assert [c.job.job_type for c in taken if isinstance(c, Claim)] == ["slow"]


def test_a_scan_of_a_queue_leaves_out_a_ghost_whose_job_moved_to_another_queue(
    queue: RedisJobQueue,
) -> None:
    from conveyor.shell.ports import Place

    job = make_job(queue="q", partition="A")
    queue.enqueue(job)
    [claim] = queue.dequeue_limited("q", T0, 1, QueueLimits(fair=True)).claims
    assert isinstance(claim, Claim)
    moved = make_job(id=job.id, queue="r")
    queue.enqueue(moved)
    assert [e.job_id for e in queue.scan("q", Place.READY)] == []
    assert [(e.job_id, e.queue) for e in queue.scan("r", Place.READY)] == [(str(job.id), "r")]
