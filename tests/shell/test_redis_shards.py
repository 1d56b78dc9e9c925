"""Shards on the Redis Cluster the tests start (`conveyor.testing.redis_cluster`): the
queues of one deployment spread over the masters, each shard under a hash tag of its
own, and the runtime's reads and figures put together across them."""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
import conveyor
import pytest
import redis
from conveyor.core import Job, JobStatus, Policies, Succeeded, ValidationError, decide, start
from conveyor.core.shards import ShardMap, key_slot
from conveyor.shell.adapters.redis.shard_tags import layout_key, open_shards, shard_tags
from conveyor.shell.adapters.redis.sharded import ShardedJobQueue
from conveyor.shell.adapters.redis_queue import RedisJobQueue, RedisKeys, connect_cluster
from conveyor.shell.async_enqueue import native_driver
from conveyor.shell.config import parse_config
from conveyor.shell.ports import HistoryFilter
from conveyor.testing.contract import CASES, Difference, Subject, ThreadWriter, run_case
from conveyor.testing.contract.support import T0, make_job
from conveyor.testing.redis_cluster import redis_cluster_urls
from conveyor.testing.state_machine import queue_machine
from conveyor.testing.state_machine.model import QUEUES
from test_adapter_surface import KNOWN_DIFFERENCES

PINS = {"a": 0, "b": 1, "c": 2}


@pytest.fixture
def client() -> Iterator[redis.RedisCluster]:
    made = connect_cluster(list(redis_cluster_urls()))
    made.flushall()
    yield made
    made.close()


def _config(**redis_keys: Any) -> dict[str, Any]:
    first, *more = redis_cluster_urls()
    return {
        "provider": "redis",
        "url": first,
        "redis": {"cluster": True, "urls": more, **redis_keys},
        "workers": {"queues": ["a", "b", "c"]},
        "startup_timeout_ms": 5000,
    }


def _sharded(**more: Any) -> dict[str, Any]:
    return _config(shards=3, queue_shards=PINS, **more)


def _master_port(client: redis.RedisCluster, key: str) -> int:
    """The port of the master that serves `key`, as the cluster says (CLUSTER KEYSLOT
    and CLUSTER SLOTS, asked of a node)."""
    node = client.get_random_node().redis_connection
    slot = int(node.execute_command("CLUSTER KEYSLOT", key))
    for first, last, master, *_ in node.execute_command("CLUSTER SLOTS"):
        if int(first) <= slot <= int(last):
            return int(master[1])
    raise AssertionError(f"no master serves {key!r}")


def _add(args: dict[str, int]) -> int:
    return args["a"] + args["b"]


def test_queues_pinned_to_different_shards_live_on_different_masters(
    client: redis.RedisCluster,
) -> None:
    queue, store = open_shards(client, "conveyor", ShardMap(3, PINS))
    jobs = {name: make_job(queue=name) for name in PINS}
    for job in jobs.values():
        queue.enqueue(job)
    ports = set()
    for name, job in jobs.items():
        shard = queue.shards[PINS[name]]
        key = shard.keys.job(str(job.id))
        assert client.exists(key) == 1
        # The core's CRC16 says what the cluster says.
        slot = int(
            client.get_random_node().redis_connection.execute_command("CLUSTER KEYSLOT", key)
        )
        assert key_slot(key) == slot
        ports.add(_master_port(client, key))
    assert len(ports) == 3
    # Shard 0 keeps today's tag; the others have tags of their own.
    assert queue.shards[0].keys.base == "{conveyor}"
    assert len({shard.keys.base for shard in queue.shards}) == 3
    store.close()


def test_one_shard_keeps_today_s_key_names_exactly(client: redis.RedisCluster) -> None:
    runtime = conveyor.build(_config(shards=1), handlers={"add": _add})
    try:
        assert isinstance(runtime.queue, RedisJobQueue)
        job = runtime.enqueue("add", {"a": 1, "b": 2}, queue="b")
        assert client.exists(RedisKeys.for_prefix("conveyor").job(str(job.id))) == 1
        assert client.exists(layout_key("conveyor")) == 0
        assert shard_tags(client, "conveyor", 1) == ("conveyor",)
    finally:
        runtime.close()


def test_every_job_runs_once_and_is_read_back_from_its_shard(client: redis.RedisCluster) -> None:
    runs: Counter[int] = Counter()
    lock = threading.Lock()

    def count(args: dict[str, int]) -> int:
        with lock:
            runs[args["n"]] += 1
        return args["n"]

    runtime = conveyor.build(_sharded(), handlers={"count": count})
    try:
        assert isinstance(runtime.queue, ShardedJobQueue)
        jobs = [runtime.enqueue("count", {"n": n}, queue="abc"[n % 3]) for n in range(60)]
        many = runtime.enqueue_many("count", [{"n": n} for n in range(60, 90)], queue="b")
        # Status sums every shard's queues.
        ready = {q.queue: q.ready for q in runtime.status().queues}
        assert ready == {"a": 20, "b": 50, "c": 20}
        # Each shard holds only its own queues' jobs.
        by_shard = [set(shard.counts(T0)) for shard in runtime.queue.shards]
        assert by_shard == [{"a"}, {"b"}, {"c"}]
        waiter = threading.Thread(target=runtime.drain, kwargs={"timeout_s": 60}, daemon=True)
        waiter.start()
        # Reads by id find each job in whichever shard holds it.
        assert [runtime.result(job.id, timeout=60) for job in jobs] == list(range(60))
        waiter.join(60)
        assert runs == Counter(range(90))
        assert all(runtime.store.get(job.id) is not None for job in [*jobs, *many])
        assert runtime.prune(older_than_ms=0, dry_run=True) == 90
    finally:
        runtime.close()


def test_many_jobs_are_found_in_whichever_shards_hold_them(client: redis.RedisCluster) -> None:
    runtime = conveyor.build(_sharded(), handlers={"add": _add})
    try:
        jobs = [runtime.enqueue("add", {"n": n}, queue="abc"[n % 3]) for n in range(9)]
        ids = [uuid.uuid4(), *[job.id for job in jobs]]
        found = runtime.queue.find_many(ids)
        assert found == {job.id: runtime.queue.find(job.id) for job in jobs}
        assert {entry.queue for entry in found.values()} == {"a", "b", "c"}
    finally:
        runtime.close()


def test_a_workflow_across_shards_is_refused_naming_the_field(client: redis.RedisCluster) -> None:
    runtime = conveyor.build(_sharded(), handlers={"add": _add})
    try:
        first = runtime.enqueue("add", {"a": 1, "b": 1}, queue="a")
        with pytest.raises(ValidationError) as refused:
            runtime.enqueue("add", {"a": 1, "b": 1}, queue="b", after=[first])
        assert refused.value.fields == ("after",)
        assert "shard" in str(refused.value)
        # Nothing was written for the refused job; one in the same shard is taken.
        assert {q.queue: q.ready + q.waiting for q in runtime.status().queues} == {
            "a": 1,
            "b": 0,
            "c": 0,
        }
        then = runtime.enqueue("add", {"a": 2, "b": 2}, queue="a", after=[first])
        assert runtime.queue.dependencies_of(then.id)
        # A workflow within one shard is whole: shown, and named from its members.
        wf = conveyor.Workflow()
        root = wf.add("add", {"a": 3, "b": 3}, queue="c")
        leaf = wf.add("add", {"a": 4, "b": 4}, queue="c", after=[root])
        assert runtime.enqueue(wf) == wf.id
        assert runtime.workflow_of(leaf.job_id) == wf.id
        assert runtime.workflow_of(then.id) is None, "a job after others is in no workflow"
        assert [m.name for m in runtime.workflow(wf.id).members] == [root.name, leaf.name]
    finally:
        runtime.close()


def test_the_tags_chosen_first_are_kept_and_another_count_is_refused(
    client: redis.RedisCluster,
) -> None:
    tags = shard_tags(client, "conveyor", 3)
    assert tags[0] == "conveyor"
    assert shard_tags(client, "conveyor", 3) == tags
    with pytest.raises(ValidationError) as refused:
        shard_tags(client, "conveyor", 2)
    assert refused.value.fields == ("redis.shards",)


def test_a_deployment_laid_out_in_shards_is_refused_as_one_shard(
    client: redis.RedisCluster,
) -> None:
    # One shard read no layout: the jobs of shards 1 and 2 vanished from every view.
    shard_tags(client, "conveyor", 3)
    with pytest.raises(ValidationError) as refused:
        conveyor.build(_config(shards=1), handlers={"add": _add})
    assert refused.value.fields == ("redis.shards",)
    assert "laid out in 3 shards, not 1" in str(refused.value)


def test_queued_jobs_one_shard_holds_for_queues_that_shards_would_move_are_refused(
    client: redis.RedisCluster,
) -> None:
    # Opened in shards, a deployment laid out as one looked for queue b's jobs in
    # shard 1, and never ran them.
    single = conveyor.build(_config(shards=1, queue_shards={}), handlers={"add": _add})
    try:
        single.enqueue("add", {"a": 1, "b": 2}, queue="a")  # stays in shard 0
        moved = single.enqueue("add", {"a": 1, "b": 2}, queue="b")
        with pytest.raises(ValidationError) as refused:
            conveyor.build(_sharded(), handlers={"add": _add})
        assert refused.value.fields == ("redis.shards",)
        assert "queue b" in str(refused.value) and "queue a" not in str(refused.value)
        assert client.exists(layout_key("conveyor")) == 0, "nothing laid out"
        # Once b is drained, the same deployment opens in shards, its queue a kept.
        assert single.drain(timeout_s=30).completed == 2
        assert single.get(moved.id).state is JobStatus.COMPLETED
    finally:
        single.close()
    sharded = conveyor.build(_sharded(), handlers={"add": _add})
    try:
        assert isinstance(sharded.queue, ShardedJobQueue)
    finally:
        sharded.close()


def test_a_listing_across_shards_keeps_the_order_of_one(client: redis.RedisCluster) -> None:
    # Shard after shard: shard 0's pending jobs came before shard 1's running one, and
    # a limit cut the running job off.
    runtime = conveyor.build(_sharded(), handlers={"add": _add})
    try:
        later = datetime.now(UTC) + timedelta(hours=1)
        parked = runtime.enqueue("add", {"a": 0, "b": 0}, queue="a", run_at=later)
        pending_c = runtime.enqueue("add", {"a": 0, "b": 0}, queue="c")
        pending_a = [runtime.enqueue("add", {"a": n, "b": 0}, queue="a") for n in range(3)]
        running = runtime.enqueue("add", {"a": 0, "b": 0}, queue="b")
        claim = runtime.queue.dequeue("b", datetime.now(UTC))
        assert claim is not None and claim.job.id == running.id
        listed = [v.job_id for v in runtime.list_jobs(limit=10)]
        expected = [running.id, *(j.id for j in pending_a), pending_c.id, parked.id]
        assert listed == [str(i) for i in expected]
        assert [v.job_id for v in runtime.list_jobs(limit=1)] == [str(running.id)]
    finally:
        runtime.close()


@pytest.fixture
def on_shards() -> Iterator[Subject]:
    """The Redis backend in three shards on the test cluster (no pins: the contract's
    queues go by the hash), every master flushed first."""
    urls = list(redis_cluster_urls())
    client = connect_cluster(urls)
    client.flushall()
    clients = [client]
    shard_map = ShardMap(3)

    def peer() -> tuple[Any, Any]:
        other = connect_cluster(urls)
        clients.append(other)
        return open_shards(other, "conveyor", shard_map)

    queue, store = open_shards(client, "conveyor", shard_map)

    def corrupt(job: Job, payload: str) -> None:
        client.hset(queue.of(job.queue).keys.job(str(job.id)), "body", payload)

    def cleanup() -> None:
        for made in clients:
            made.close()

    yield Subject(
        "redis-shards",
        queue,
        store,
        cleanup=cleanup,
        peer=peer,
        corrupt=corrupt,
        async_writer=lambda: ThreadWriter(queue),
        promote_per_claim=100,
    )
    cleanup()


def _listings_merge_by_finish_time(s: Subject) -> None:
    """Across shards, a filtered listing is each shard's newest first merged by
    finish time: records finished at distinct instants come in that order, from any
    shard; counts add up."""
    made = []
    for n in range(12):
        queue = "fast" if n % 3 else "slow"
        job = make_job("mail" if n % 2 else "resize", queue=queue)
        done = finish(start(job, T0).unwrap(), T0 + timedelta(seconds=n))
        s.store.record(done)
        made.append(done)
    newest = [str(j.id) for j in reversed(made)]
    assert [str(j.id) for j in s.store.find_history(HistoryFilter())] == newest
    mail = [str(j.id) for j in reversed(made) if j.job_type == "mail"]
    assert [str(j.id) for j in s.store.find_history(HistoryFilter(job_type="mail"))] == mail
    assert [str(j.id) for j in s.store.find_history(HistoryFilter(), offset=3, limit=4)] == (
        newest[3:7]
    )
    assert s.store.count_history(HistoryFilter(queue="slow")) == 4
    assert s.store.count_history(HistoryFilter()) == 12


def finish(running: Job, when: datetime) -> Job:
    return decide(running, Succeeded(1), when, Policies(), 0.5).job


#: The Redis backend's own differences hold on shards too; and a listing across
#: shards can order records only by their finish time.
SHARD_DIFFERENCES = {
    **KNOWN_DIFFERENCES,
    **{
        (case, "redis-shards"): why
        for (case, name), why in KNOWN_DIFFERENCES.items()
        if name == "redis"
    },
    ("history_is_filtered_by_queue_and_type_in_the_store", "redis-shards"): Difference(
        "records finished in the same instant in two shards have no recording order "
        "between them (each shard keeps its own)",
        _listings_merge_by_finish_time,
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_contract_on_three_shards(case: str, on_shards: Subject) -> None:
    run_case(case, on_shards, SHARD_DIFFERENCES)


def fresh_sharded_queue() -> tuple[Any, Callable[[], None], Any]:
    """An empty queue of three shards on the test cluster (every master flushed), the
    machine's queues pinned to shard 2: its jobs wait on jobs of either queue, which
    one shard must hold, and the reads by id and the figures still ask every shard."""
    client = connect_cluster(list(redis_cluster_urls()))
    client.flushall()
    queue, store = open_shards(client, "conveyor", ShardMap(3, dict.fromkeys(QUEUES, 2)))
    return queue, client.close, store


TestRedisShardsQueueMachine = queue_machine(fresh_sharded_queue).TestCase


def test_aenqueue_routes_through_the_sync_enqueue_with_shards() -> None:
    sharded = parse_config({"provider": "redis", "redis": {"shards": 2}})
    assert native_driver(sharded) is None
    assert native_driver(parse_config({"provider": "redis"})) == "redis.asyncio"


def test_a_queue_whose_pin_changed_shows_the_jobs_left_in_its_old_shard(
    client: redis.RedisCluster,
) -> None:
    before, _ = open_shards(client, "conveyor", ShardMap(3, {"a": 0}))
    before.enqueue(make_job(queue="a"))
    after, _ = open_shards(client, "conveyor", ShardMap(3, {"a": 1}))
    after.enqueue(make_job(queue="a"))
    assert after.counts(T0)["a"].ready == 2


def test_a_job_left_in_its_queues_old_shard_can_still_be_cancelled(
    client: redis.RedisCluster,
) -> None:
    # The cancel went to the queue's new shard, found nothing, and was told as the
    # backend failing ("see the log").
    before = conveyor.build(_config(shards=3, queue_shards={"a": 0}), handlers={"add": _add})
    try:
        later = datetime.now(UTC) + timedelta(hours=1)
        left = before.enqueue("add", {"a": 1, "b": 2}, queue="a", run_at=later)
    finally:
        before.close()
    after = conveyor.build(_config(shards=3, queue_shards={"a": 1}), handlers={"add": _add})
    try:
        after.cancel(left.id)
        assert after.get(left.id).state is JobStatus.CANCELLED
        assert after.status().queues == () or all(q.scheduled == 0 for q in after.status().queues)
    finally:
        after.close()


def test_jobs_left_in_a_queues_old_shard_are_listed_and_cancelled_by_queue(
    client: redis.RedisCluster,
) -> None:
    # A listing or a bulk cancel by queue looked in the queue's shard only: the job
    # `status` counted was neither shown nor cancelled.
    before = conveyor.build(_config(shards=3, queue_shards={"a": 0}), handlers={"add": _add})
    try:
        left = before.enqueue("add", {"a": 1, "b": 2}, queue="a")
    finally:
        before.close()
    after = conveyor.build(_config(shards=3, queue_shards={"a": 1}), handlers={"add": _add})
    try:
        new = after.enqueue("add", {"a": 1, "b": 3}, queue="a")
        listed = {v.job_id for v in after.list_jobs(queue="a")}
        assert listed == {str(left.id), str(new.id)}
        assert after.cancel_many(queue="a").cancelled == 2
        assert after.get(left.id).state is JobStatus.CANCELLED
    finally:
        after.close()


def test_shards_offer_every_role_one_redis_offers() -> None:
    """A role the sharded queue or store lacks would make the runtime treat sharded
    Redis as a backend without it (workflows refused, cases not run), not fail."""
    import inspect

    from conveyor.shell import ports
    from conveyor.shell.adapters.redis import RedisJobQueue, RedisJobStore
    from conveyor.shell.ports import workflows

    roles = [
        p
        for module in (ports, workflows)
        for _, p in inspect.getmembers(module, inspect.isclass)
        if getattr(p, "_is_runtime_protocol", False)
    ]
    queue, close, store = fresh_sharded_queue()
    client = connect_cluster(list(redis_cluster_urls()))
    try:
        one_queue, one_store = RedisJobQueue(client), RedisJobStore(client)
        for role in roles:
            for single, sharded in ((one_queue, queue), (one_store, store)):
                if isinstance(single, role):
                    assert isinstance(sharded, role), f"{type(sharded).__name__} is no {role}"
    finally:
        close()
        client.close()


def test_ending_the_waits_ends_an_idle_wait_on_any_shard_of_a_cluster(
    client: redis.RedisCluster,
) -> None:
    """Each wait is a blocking pop on its queue's master; `end_waits` reaches them all."""
    queue, _ = open_shards(client, "conveyor", ShardMap(3, PINS))
    got: dict[str, bool] = {}
    waiters = [
        threading.Thread(target=lambda name=name: got.update({name: queue.wait_for_work(name, 30)}))
        for name in PINS
    ]
    began = time.monotonic()
    for waiter in waiters:
        waiter.start()
    # Asked again until all end: a wait that had not begun at the first ask is asked again.
    while any(w.is_alive() for w in waiters) and time.monotonic() - began < 3:
        queue.end_waits()
        for waiter in waiters:
            waiter.join(0.05)
    assert not any(w.is_alive() for w in waiters), "a wait did not end within 3 s of 30"
    assert got == dict.fromkeys(PINS, True)


def test_ending_the_waits_of_a_closed_client_raises_nowhere(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A stop may come after the client was closed (a test's teardown, an app's
    shutdown): the push is best effort, off the stop's thread, and fails quietly."""
    client = connect_cluster(list(redis_cluster_urls()))
    queue, _ = open_shards(client, "conveyor", ShardMap(3, PINS))
    assert queue.wait_for_work("a", 0.01) is False  # a queue waited on: ends are pushed
    client.close()
    raised: list[BaseException] = []
    monkeypatch.setattr(threading, "excepthook", lambda hook: raised.append(hook.exc_value))
    queue.end_waits()
    for thread in [t for t in threading.enumerate() if t.name == "conveyor-end-waits"]:
        thread.join(5)
    assert raised == []


def test_a_wait_is_registered_with_every_shard_and_woken_by_the_one_that_records_its_job(
    client: redis.RedisCluster,
) -> None:
    """A job's id does not say which shard records it: the wait is registered with each,
    and each shard's inbox has a listener."""
    _, store = open_shards(client, "conveyor", ShardMap(3, PINS))
    job = make_job(queue="c")
    try:
        with store.watch_finished(job.id) as watch:
            for shard in store.shards:
                assert client.exists(shard.keys.waiters(str(job.id))) == 1
            store.of("c").record(attrs.evolve(job, status=JobStatus.COMPLETED, result=7))
            assert watch.wait(10.0), "the shard's record woke the waiter"
            carried = watch.take_carried()
            assert carried is not None and carried.result == 7
    finally:
        store.close()
