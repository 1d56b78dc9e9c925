"""The Redis Cluster the tests start (`conveyor.testing.redis_cluster`): three
masters with a replica each, every slot served, and the Redis backend on it: the
adapter contract and the state machine run here on the cluster (the other
backend-parametrized tests do not: the cluster runs the same scripts as one Redis)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

import conveyor
import pytest
import redis
from backends import REDIS_TEST_DB, Backend, make_backend
from conveyor.shell.adapters.redis_queue import (
    RedisJobQueue,
    RedisJobStore,
    ReplicaWait,
    connect_cluster,
)
from conveyor.shell.ports import JobQueue
from conveyor.testing.contract import CASES, run_case
from conveyor.testing.contract.support import T0, make_job
from conveyor.testing.redis_cluster import SLOTS, redis_cluster, redis_cluster_urls
from conveyor.testing.state_machine import queue_machine
from test_adapter_surface import KNOWN_DIFFERENCES


def test_the_test_cluster_has_three_masters_each_with_a_replica() -> None:
    cluster = redis_cluster()
    client = redis.RedisCluster.from_url(cluster.url)
    try:
        shards = client.cluster_slots()  # {(first, last): {"primary": ..., "replicas": [...]}}
        assert len(shards) == 3
        assert sum(last - first + 1 for first, last in shards) == SLOTS
        assert all(len(shard["replicas"]) == 1 for shard in shards.values())
        ports = {shard["primary"][1] for shard in shards.values()}
        ports |= {replica[1] for shard in shards.values() for replica in shard["replicas"]}
        assert ports == {server.port for server in cluster.servers}
    finally:
        client.close()


@pytest.fixture
def on_cluster() -> Iterator[Backend]:
    made = make_backend("redis-cluster")
    yield made
    made.cleanup()


#: The Redis backend's own differences hold on a cluster too.
CLUSTER_DIFFERENCES = {
    **KNOWN_DIFFERENCES,
    **{
        (case, "redis-cluster"): why
        for (case, name), why in KNOWN_DIFFERENCES.items()
        if name == "redis"
    },
}


@pytest.mark.parametrize("case", list(CASES))
def test_contract_on_the_cluster(case: str, on_cluster: Backend) -> None:
    run_case(case, on_cluster, CLUSTER_DIFFERENCES)


def test_the_cluster_subject_runs_on_a_cluster_client(on_cluster: Backend) -> None:
    assert isinstance(on_cluster.queue._client, redis.RedisCluster)
    assert on_cluster.queue.finishes_with(on_cluster.store)
    # Not with a store on another server, even under the same prefix.
    from conveyor.testing.redis_server import redis_url

    elsewhere = RedisJobStore(redis_url(REDIS_TEST_DB))
    try:
        assert not on_cluster.queue.finishes_with(elsewhere)
    finally:
        elsewhere.close()


def fresh_cluster_queue() -> tuple[JobQueue, Callable[[], None], RedisJobStore]:
    """An empty queue on the test cluster (every master flushed first)."""
    client = connect_cluster(list(redis_cluster_urls()))
    client.flushall()
    return RedisJobQueue(client), client.close, RedisJobStore(client)


TestRedisClusterQueueMachine = queue_machine(fresh_cluster_queue).TestCase


def _cluster_config(**redis_keys: Any) -> dict[str, Any]:
    first, *more = redis_cluster_urls()
    return {
        "provider": "redis",
        "url": first,
        "redis": {"cluster": True, "urls": more, **redis_keys},
        "startup_timeout_ms": 5000,
    }


def test_a_runtime_built_for_the_cluster_runs_jobs_and_reports_them() -> None:
    client = connect_cluster(list(redis_cluster_urls()))
    client.flushall()
    client.close()
    runtime = conveyor.build(_cluster_config(replica_wait=1), handlers={"add": _add})
    try:
        assert isinstance(runtime.queue, RedisJobQueue)
        assert isinstance(runtime.queue._client, redis.RedisCluster)
        jobs = [runtime.enqueue("add", {"a": n, "b": 1}) for n in range(3)]
        assert runtime.status().queues[0].ready == 3
        waiter = threading.Thread(target=runtime.drain, kwargs={"timeout_s": 30}, daemon=True)
        waiter.start()
        # Woken by the finish, published on the cluster's bus.
        assert [runtime.result(job.id, timeout=30) for job in jobs] == [1, 2, 3]
        waiter.join(30)
        assert runtime.prune(older_than_ms=0, dry_run=True) == 3
        assert runtime.queue.replicas.timeouts == 0
    finally:
        runtime.close()


def _add(args: dict[str, int]) -> int:
    return args["a"] + args["b"]


def test_a_replica_wait_that_times_out_is_told_and_counted(
    on_cluster: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    # Each master has one replica: a wait for two runs out, and says so.
    client = on_cluster.queue._client
    queue = RedisJobQueue(client, replica_wait=ReplicaWait(replicas=2, timeout_ms=50))
    with caplog.at_level(logging.WARNING, logger="conveyor.redis"):
        queue.enqueue(make_job())
    assert queue.replicas.timeouts == 1
    assert "acknowledged by 1 of 2 replicas" in caplog.text
    # The write itself landed: the wait never undoes it.
    assert queue.counts(T0)["default"].ready == 1
    enough = RedisJobQueue(client, replica_wait=ReplicaWait(replicas=1, timeout_ms=5000))
    enough.enqueue(make_job())
    assert enough.replicas.timeouts == 0


def test_an_outage_on_the_cluster_is_told_as_the_cluster_s(on_cluster: Backend) -> None:
    from conveyor.shell.outage import for_queue

    state = for_queue(on_cluster.queue)
    assert state.backend == "Redis Cluster"
    seeds = {f"127.0.0.1:{port}" for port in (s.port for s in redis_cluster().servers)}
    assert set(state.where.removeprefix("redis://").split(",")) <= seeds


def _forget_scripts(client: redis.RedisCluster) -> None:
    """SCRIPT FLUSH on every node: as after a restart, or on a master that never ran
    the scripts (a replica promoted by a failover)."""
    for node in client.get_nodes():
        node.redis_connection.script_flush()


def test_a_batch_enqueue_loads_its_script_on_a_node_that_lost_it(on_cluster: Backend) -> None:
    # A cluster pipeline sends EVALSHA alone: the node answers NOSCRIPT until it is given
    # the script, which the batch does, then sends the batch's writes again.
    queue, client = on_cluster.queue, on_cluster.queue._client
    _forget_scripts(client)
    queue.enqueue_many([make_job(), make_job()])
    _forget_scripts(client)
    assert queue.enqueue_new_many([make_job(), make_job()]) == [None, None]
    assert queue.counts(T0)["default"].ready == 4


def test_an_asyncio_batch_enqueue_loads_its_script_on_a_node_that_lost_it(
    on_cluster: Backend,
) -> None:
    import asyncio

    writer = on_cluster.async_writer()
    _forget_scripts(on_cluster.queue._client)

    async def send() -> None:
        try:
            await writer.enqueue_many([make_job(), make_job()])
        finally:
            await writer.aclose()

    asyncio.run(send())
    assert on_cluster.queue.counts(T0)["default"].ready == 2
