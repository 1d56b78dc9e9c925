"""A Redis Cluster loses its master under load: SIGKILL the master that holds the
deployment's slot while a producer enqueues and three worker processes run, and let
its replica take over (the cluster's own failover).

With `replica_wait = 1` every enqueue the producer saw acknowledged was on a replica
before the acknowledgement, so none is lost. Without it, Redis replicates after it
answers, and what the master acknowledged in the moment before it died may be gone:
the loss is counted, printed, and must stay within that window (docs/redis.md,
"Redis Cluster").

Each test forms a cluster of its own (six processes, about three seconds). The killed
server is started again once its replica has taken over, and rejoins as the new
master's replica: until then the new master has no replica, and every wait for one
runs out (told as a warning; docs/redis.md).
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
import redis
from conveyor.core import create_job
from conveyor.shell.adapters.redis_queue import RedisJobQueue, ReplicaWait, connect_cluster
from conveyor.testing.redis_cluster import RedisCluster
from fault_harness import Site, make_site, wait_until
from fault_worker import cluster_url
from ledger import Ledger

pytestmark = pytest.mark.timeout(240)

JOBS = 5000
WORKERS = 3
#: Kill the master once this many enqueues were acknowledged.
KILL_AFTER = 1500
#: How far before the kill an acknowledged enqueue may still be unreplicated, on a
#: healthy loopback link (the documented window is the replication lag; this bounds it
#: generously for a loaded 2-core host).
WINDOW_S = 1.0


@pytest.fixture
def cluster() -> Iterator[RedisCluster]:
    made = RedisCluster().start()
    yield made
    made.cleanup()


def acknowledged(ledger: Ledger, since: float = 0.0, until: float = float("inf")) -> int:
    conn = ledger._conn()
    query = "SELECT COUNT(DISTINCT job_id) FROM enqueues WHERE outcome = 'ok' AND done_at > ?"
    return int(conn.execute(query + " AND done_at <= ?", (since, until)).fetchone()[0])


def run_failover(site: Site, cluster: RedisCluster) -> tuple[float, float]:
    """Producer and workers running while the deployment's master is SIGKILLed; waits
    until the queue is empty. Returns when the kill happened and how long the
    cluster took to be whole again (s)."""
    workers = [site.spawn(threads=2) for _ in range(WORKERS)]
    producer = site.produce_in_background(JOBS, pause_s=0, tries=40)
    wait_until(
        lambda: acknowledged(site.ledger) >= KILL_AFTER, timeout_s=40, what="enqueues to flow"
    )
    master = cluster.master_of("{conveyor}:queues")
    killed_at = time.time()
    master.kill()
    # The cluster notices after its node timeout, then the replica is elected.
    wait_until(
        lambda: cluster.master_of("{conveyor}:queues").port != master.port,
        timeout_s=30,
        what="the replica to take over",
    )
    cluster.wait_healthy(timeout_s=30)
    healed_s = time.time() - killed_at
    # Back on its port and nodes.conf, the old master rejoins as the new one's replica,
    # as an operator's restart does: until then the new master has none to wait for.
    master.start()
    cluster.wait_replicated("{conveyor}:queues", timeout_s=30)
    producer.join(180)
    assert not producer.is_alive(), "the producer did not finish"

    def empty() -> bool:
        try:
            c = site.counts()
        except Exception:
            return False
        return c.ready + c.scheduled + c.in_flight == 0

    wait_until(empty, timeout_s=60, what="the workers to empty the queue")
    for w in workers:
        assert w.alive, f"worker {w.pid} died in the failover:\n{w.stderr()}"
        w.signal(signal.SIGTERM)
    for w in workers:
        w.wait()
    return killed_at, healed_s


def test_with_replica_wait_a_master_failover_loses_no_job(
    cluster: RedisCluster, tmp_path: Path
) -> None:
    site = make_site("redis-cluster", tmp_path, cluster_url(cluster.urls, replica_wait=1))
    try:
        _, healed_s = run_failover(site, cluster)
        result = site.figures()
        print(f"[replica_wait=1] failover took {healed_s:.1f}s; lost {result.lost}")
        assert result.acknowledged >= JOBS * 0.99
        assert result.lost == 0, sorted(result.lost_ids)[:10]
        assert result.stuck == 0
    finally:
        site.close()


def test_without_replica_wait_the_loss_stays_within_the_replication_window(
    cluster: RedisCluster, tmp_path: Path
) -> None:
    site = make_site("redis-cluster", tmp_path, cluster_url(cluster.urls, replica_wait=0))
    try:
        killed_at, healed_s = run_failover(site, cluster)
        result = site.figures()
        window = acknowledged(site.ledger, killed_at - WINDOW_S, killed_at)
        print(
            f"[replica_wait=0] failover took {healed_s:.1f}s; lost {result.lost} of "
            f"{window} enqueues acknowledged in the {WINDOW_S:.0f}s before the kill"
        )
        assert result.acknowledged >= JOBS * 0.99
        assert result.lost <= window
        assert result.stuck == 0
    finally:
        site.close()


@pytest.mark.parametrize("replicas", [0, 1])
def test_what_a_failover_loses_is_what_no_replica_had_and_the_wait_tells_it(
    cluster: RedisCluster, replicas: int, caplog: pytest.LogCaptureFixture
) -> None:
    """The window made wide on purpose: the replica is stopped (SIGSTOP) and cut off
    while jobs are enqueued, the master is killed before it catches up, and the
    replica takes over. Every one of those enqueues was acknowledged, and every one is lost; with a
    replica wait each was also told as a timed-out wait, without one nothing tells."""
    # A short wait: a stopped replica never answers it.
    wait = ReplicaWait(replicas=replicas, timeout_ms=100)
    queue = RedisJobQueue(connect_cluster(cluster.urls), replica_wait=wait)
    kept = [site_job() for _ in range(5)]
    for job in kept:
        queue.enqueue(job)
    master = cluster.master_of("{conveyor}:queues")
    replica = cluster.replica_of(master)
    cluster.wait_replicated("{conveyor}:queues")
    assert replica.pid is not None
    os.kill(replica.pid, signal.SIGSTOP)
    try:
        # Drop the master's link to it too: what the master takes from now on is only
        # in its own memory (a stopped process would still find it in its socket).
        on_master = redis.Redis(port=master.port)
        on_master.client_kill_filter(_type="replica")
        on_master.close()
        unreplicated = [site_job() for _ in range(20)]
        with caplog.at_level(logging.WARNING, logger="conveyor.redis"):
            for job in unreplicated:
                queue.enqueue(job)  # acknowledged: it returned
        master.kill()
    finally:
        os.kill(replica.pid, signal.SIGCONT)
    cluster.take_over(replica)
    wait_until(
        lambda: cluster.master_of("{conveyor}:queues").port == replica.port,
        timeout_s=30,
        what="the replica to take over",
    )
    cluster.wait_healthy(timeout_s=30)
    found = {job.id: queue.find(job.id) is not None for job in kept + unreplicated}
    lost = [job for job in unreplicated if not found[job.id]]
    print(f"[replica_wait={replicas}] lost {len(lost)} of {len(unreplicated)} unreplicated")
    assert all(found[job.id] for job in kept), "a replicated enqueue was lost"
    assert len(lost) == len(unreplicated)
    told = caplog.text.count("acknowledged by 0 of 1 replicas")
    assert (told, queue.replicas.timeouts) == ((20, 20) if replicas else (0, 0))
    queue.close()


def site_job() -> Any:
    return create_job(id=uuid4(), job_type="work", now=datetime.now(UTC)).unwrap()
