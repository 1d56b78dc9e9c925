"""Workflows on the Redis backend against a real server: what is its own (the
settle section's fence, the cost of a plain finish, waiting jobs in counts and
scans, concurrent finishes of one fan-in). What every backend shares is in the
contract's workflow cases and the state machine's workflow rules.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from uuid import uuid4

import pytest
import redis
from conveyor.core import (
    ErrorInfo,
    Job,
    JobStatus,
    Policies,
    Succeeded,
    create_job,
    dead_letter,
    decide,
    start,
)
from conveyor.core.dependencies import DEPENDENCY_FAILED, Edge, OnFailure
from conveyor.core.transitions import Event, transition
from conveyor.shell.adapters.dependents import settle_dependents
from conveyor.shell.adapters.memory import MemoryJobQueue, MemoryJobStore
from conveyor.shell.adapters.redis.arguments import cutoff_ms, record_args
from conveyor.shell.adapters.redis.settling import STALE, _Plan
from conveyor.shell.adapters.redis_queue import RedisJobQueue, RedisJobStore
from conveyor.shell.ports import Claim, Place
from conveyor.shell.ports.workflows import Graph, Member
from conveyor.testing.redis_server import redis_url
from helpers import CountingRedis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

TEST_DB = 14
T0 = datetime(2026, 1, 1, tzinfo=UTC)
LATER = T0 + timedelta(seconds=10)


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


def make_job(job_type: str = "work") -> Job:
    return create_job(id=uuid4(), job_type=job_type, now=T0, queue="jobs").unwrap()


def fan_in(queue: RedisJobQueue, parts: list[Job], merge: Job) -> None:
    edges = tuple(Edge(merge.id, p.id, OnFailure.FAIL) for p in parts)
    queue.enqueue_graph(Graph((*(Member(p) for p in parts), Member(merge, edges)), uuid4()))


def claimed(queue: RedisJobQueue) -> Claim:
    got = queue.dequeue("jobs", T0)
    assert isinstance(got, Claim)
    return got


def done(job: Job) -> Job:
    return decide(start(job, T0).unwrap(), Succeeded("ok"), T0, Policies(), 0.5).job


def test_a_settle_section_whose_facts_changed_is_refused_whole(queue: RedisJobQueue) -> None:
    a, b, merge = make_job("a"), make_job("b"), make_job("merge")
    fan_in(queue, [a, b], merge)
    held_a, held_b = claimed(queue), claimed(queue)
    record_a = done(held_a.job)
    # A's decision, made while B still runs: the merge stays waiting.
    plan = _Plan(queue._read_dependents, record_a)
    assert settle_dependents(plan, record_a) == []
    assert queue.finish(held_b, done(held_b.job))
    args = [str(a.id), held_a.token, cutoff_ms(None), *record_args(record_a), uuid4().hex]
    assert queue._write("finish", queue._finish, *args, *plan.section()) == STALE
    found = queue.find(a.id)
    assert found is not None and found.place is Place.IN_FLIGHT, "a stale section wrote"
    # Sent as the adapter sends it, the decision is made again, and the merge released.
    assert queue.finish(held_a, record_a)
    assert claimed(queue).job.id == merge.id
    assert queue.dequeue("jobs", LATER) is None


def test_a_stay_rests_on_one_input_still_unfinished(queue: RedisJobQueue) -> None:
    a, b, c, merge = make_job("a"), make_job("b"), make_job("c"), make_job("merge")
    fan_in(queue, [a, b, c], merge)
    held = {h.job.id: h for h in (claimed(queue), claimed(queue), claimed(queue))}
    record_a = done(a)
    plan = _Plan(queue._read_dependents, record_a)
    assert settle_dependents(plan, record_a) == []
    # B finishing meanwhile does not refuse A's stay: C is still running, as seen.
    assert queue.finish(held[b.id], done(b))
    args = [str(a.id), held[a.id].token, cutoff_ms(None), *record_args(record_a), uuid4().hex]
    assert queue._write("finish", queue._finish, *args, *plan.section()) == 1
    found = queue.find(merge.id)
    assert found is not None and found.place is Place.WAITING
    assert queue.finish(held[c.id], done(c))
    assert claimed(queue).job.id == merge.id


def test_a_job_nothing_waits_for_finishes_in_one_script(
    client: CountingRedis, queue: RedisJobQueue
) -> None:
    warm, plain, root, leaf = make_job(), make_job(), make_job("root"), make_job("leaf")
    queue.enqueue(warm)
    queue.enqueue(plain)
    fan_in(queue, [root], leaf)
    held = {c.job.id: c for c in (claimed(queue), claimed(queue), claimed(queue))}
    # The script loaded first: a server another test restarted has lost its scripts.
    assert queue.finish(held[warm.id], done(warm))
    client.sent = collections.Counter()
    assert queue.finish(held[plain.id], done(plain))
    assert client.sent == {"EVALSHA": 1}
    client.sent = collections.Counter()
    assert queue.finish(held[root.id], done(root))
    # Refused for want of a section, the reads of the decision, and the settling send.
    assert client.sent["EVALSHA"] > 2
    assert claimed(queue).job.id == leaf.id


def test_waiting_jobs_are_counted_and_scanned(queue: RedisJobQueue) -> None:
    root, leaves = make_job("root"), [make_job("leaf") for _ in range(3)]
    queue.enqueue_graph(
        Graph(
            (Member(root), *(Member(j, (Edge(j.id, root.id),)) for j in leaves)),
        )
    )
    counts = queue.counts(T0)["jobs"]
    assert (counts.ready, counts.waiting) == (1, 3)
    # In the order they were written, from the queue's waiting set or every queue's.
    assert [e.job_id for e in queue.scan("jobs", Place.WAITING)] == [str(j.id) for j in leaves]
    assert [e.job_id for e in queue.scan(place=Place.WAITING)] == [str(j.id) for j in leaves]


def test_a_fan_in_finished_by_racing_threads_is_released_once(
    queue: RedisJobQueue, store: RedisJobStore
) -> None:
    parts, merge = [make_job("part") for _ in range(40)], make_job("merge")
    fan_in(queue, parts, merge)
    held = [claimed(queue) for _ in parts]
    barrier = threading.Barrier(4)

    def finish(mine: list[Claim]) -> None:
        barrier.wait()
        for claim in mine:
            assert queue.finish(claim, done(claim.job))

    threads = [threading.Thread(target=finish, args=(held[i::4],)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(store.get(p.id).status is JobStatus.COMPLETED for p in parts)
    assert claimed(queue).job.id == merge.id
    assert queue.dequeue("jobs", LATER) is None, "the fan-in was released twice"


def test_a_batch_finish_leaves_a_job_with_dependents_to_a_finish_that_settles_them(
    client: CountingRedis, queue: RedisJobQueue, store: RedisJobStore
) -> None:
    plain, root, leaf = make_job(), make_job("root"), make_job("leaf")
    queue.enqueue(plain)
    fan_in(queue, [root], leaf)
    held = queue.dequeue_many("jobs", T0, 2)
    assert sorted(str(c.job.id) for c in held) == sorted([str(plain.id), str(root.id)])
    assert queue.finish_many([(c, done(c.job)) for c in held]) == [True, True]
    assert store.get(plain.id).status is JobStatus.COMPLETED
    assert store.get(root.id).status is JobStatus.COMPLETED
    assert claimed(queue).job.id == leaf.id


def test_a_cancelled_finish_ends_the_dependents_in_its_script(
    queue: RedisJobQueue, store: RedisJobStore
) -> None:
    root, leaf, tail = make_job("root"), make_job("leaf"), make_job("tail")
    queue.enqueue_graph(
        Graph(
            (
                Member(root),
                Member(leaf, (Edge(leaf.id, root.id),)),
                Member(tail, (Edge(tail.id, leaf.id),)),
            )
        )
    )
    held = claimed(queue)
    assert queue.request_cancel(root.id, T0)
    record = transition(start(root, T0).unwrap(), Event.CANCEL, T0).unwrap()
    assert queue.finish_cancelled(held, record)
    assert store.get(leaf.id).last_error.type == DEPENDENCY_FAILED
    assert store.get(tail.id).last_error.type == DEPENDENCY_FAILED, "no cascade"
    assert queue.find(leaf.id) is None and queue.find(tail.id) is None
    assert queue.counts(T0)["jobs"].waiting == 0


def _drawn_graph(data: st.DataObject) -> Graph:
    """A random graph: each job waits for up to three earlier ones, each under a random
    failure policy."""
    jobs = [make_job(f"j{i}") for i in range(data.draw(st.integers(2, 7), label="size"))]
    members = []
    for i, job in enumerate(jobs):
        deps = data.draw(st.lists(st.integers(0, i - 1), unique=True, max_size=3)) if i else []
        policy = st.sampled_from(list(OnFailure))
        policies = data.draw(st.lists(policy, min_size=len(deps), max_size=len(deps)))
        edges = tuple(Edge(job.id, jobs[d].id, p) for d, p in zip(deps, policies, strict=True))
        members.append(Member(job, edges))
    return Graph(tuple(members), uuid4())


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_redis_settles_every_graph_as_the_memory_queue_does(
    client: CountingRedis, data: st.DataObject
) -> None:
    """Random graphs, random outcomes, finished in a random order: Redis (its scripts
    and the facts they check) ends every job as the memory queue (the reference, its
    decisions taken under one lock) does."""
    client.flushdb()
    on_redis, redis_store = RedisJobQueue(client), RedisJobStore(client)
    memory_store = MemoryJobStore()
    in_memory = MemoryJobQueue(memory_store)
    graph = _drawn_graph(data)
    # Ids are fresh on every run; order by place in the graph so a replayed example
    # draws the same choices for the same jobs.
    place = {m.job.id: n for n, m in enumerate(graph.members)}
    written = on_redis.enqueue_graph(graph)
    assert [j.status for j in written] == [j.status for j in in_memory.enqueue_graph(graph)]
    while True:
        got = {c.job.id: c for c in on_redis.dequeue_many("jobs", T0, 10)}
        reference = {c.job.id: c for c in in_memory.dequeue_many("jobs", T0, 10)}
        assert set(got) == set(reference), "a different set of jobs was released"
        if not got:
            break
        for job_id in data.draw(st.permutations(sorted(got, key=place.__getitem__)), label="order"):
            job = start(got[job_id].job, T0).unwrap()
            if data.draw(st.booleans(), label="fails"):
                record = dead_letter(job, ErrorInfo("Boom", "no", False), T0).job
            else:
                record = done(got[job_id].job)
            assert on_redis.finish(got[job_id], record)
            assert in_memory.finish(reference[job_id], record)
    for member in graph.members:
        ours, theirs = redis_store.get(member.job.id), memory_store.get(member.job.id)
        assert theirs is not None and ours is not None, "a job was left unfinished"
        assert ours.status is theirs.status
        assert (ours.last_error and ours.last_error.type) == (
            theirs.last_error and theirs.last_error.type
        )
    assert on_redis.counts(T0)["jobs"].waiting == 0
