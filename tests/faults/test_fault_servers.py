"""The servers fail under a running system: PostgreSQL sessions terminated and the
server crashed and restarted; Redis killed with SIGKILL and restarted from its AOF.

A producer enqueues through the ledger while it happens (an attempt that raises is
recorded as an error and retried with the same id) and two worker processes run.
Afterwards every enqueue that was reported ok must be completed.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from conveyor.testing.redis_server import RedisServer
from fault_harness import Site, WorkerProc, make_site, wait_until
from fault_pg import PgCluster

pytestmark = pytest.mark.timeout(90)

JOBS = 300
#: Worker threads of `run_through` (2 processes x 2 threads). A server outage can fail
#: the outcome write of the job each one holds; after its lease that job runs again.
IN_FLIGHT = 4


def run_through(site: Site, fault: threading.Thread, *, jobs: int = JOBS) -> list[WorkerProc]:
    """Workers and a producer running while `fault` does its damage; then wait for the
    workers to empty the queue. Returns the workers, still running."""
    workers = [site.spawn(threads=2), site.spawn(threads=2)]
    producer = site.produce_in_background(jobs, sleep_ms=5)
    fault.start()
    producer.join(60)
    fault.join(60)
    assert not producer.is_alive() and not fault.is_alive()

    def empty() -> bool:
        try:
            c = site.counts()
        except Exception:
            return False  # the server is still coming back
        return c.ready + c.scheduled + c.in_flight == 0

    try:
        wait_until(empty, timeout_s=40, what="the workers to empty the queue")
    except AssertionError:
        for w in workers:
            if w.alive:
                w.signal(signal.SIGUSR1)
        time.sleep(1)
        for w in workers:
            print(f"--- worker {w.pid} ---\n{w.stderr()}")
        print(site.counts())
        raise
    return workers


def stop(workers: list[WorkerProc]) -> None:
    for w in workers:
        assert w.alive, f"worker {w.pid} died during the server fault:\n{w.stderr()}"
        w.signal(signal.SIGTERM)
    for w in workers:
        assert w.wait() == 0


# ---- PostgreSQL -----------------------------------------------------------------------


def terminate_sessions(url: str, rounds: int, every_s: float, killed: list[int]) -> None:
    """From a connection of its own, `pg_terminate_backend` every other session on the
    database, `rounds` times."""
    engine = sa.create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        for _ in range(rounds):
            time.sleep(every_s)
            with engine.connect() as conn:
                n = conn.execute(
                    sa.text(
                        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                        "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                    )
                ).scalar_one()
            killed.append(int(n))
    finally:
        engine.dispose()


@pytest.fixture
def pg_site(tmp_path: Path) -> Iterator[Site]:
    site = make_site("postgresql", tmp_path)
    yield site
    site.close()


def test_postgresql_sessions_terminated_mid_run_lose_no_acknowledged_enqueue(
    pg_site: Site,
) -> None:
    killed: list[int] = []
    fault = threading.Thread(target=terminate_sessions, args=(pg_site.url, 8, 0.3, killed))
    workers = run_through(pg_site, fault)
    assert sum(killed) >= 8, f"sessions were terminated each round: {killed}"
    stop(workers)

    f = pg_site.figures()
    f.assert_no_loss(duplicates_at_most=f.unreleased)
    assert f.acknowledged == f.completed
    assert f.acknowledged >= JOBS * 0.9, "most enqueues got through"


@pytest.fixture
def pg_cluster(tmp_path: Path) -> Iterator[PgCluster]:
    cluster = PgCluster().start()
    yield cluster
    cluster.cleanup()


def test_a_postgresql_crash_and_restart_loses_no_acknowledged_enqueue(
    pg_cluster: PgCluster, tmp_path: Path
) -> None:
    site = make_site("postgresql", tmp_path, url=pg_cluster.url)

    def crash_and_restart() -> None:
        time.sleep(1.0)
        pg_cluster.crash()
        time.sleep(1.0)
        pg_cluster.start()

    try:
        workers = run_through(site, threading.Thread(target=crash_and_restart))
        stop(workers)
        f = site.figures()
        f.assert_no_loss(duplicates_at_most=f.unreleased + IN_FLIGHT)
        assert f.acknowledged == f.completed
        assert f.enqueue_errors > 0, "the crash was felt by the producer"
    finally:
        site.close()


# ---- Redis ----------------------------------------------------------------------------


@pytest.fixture
def redis_always() -> Iterator[RedisServer]:
    server = RedisServer(extra_args=["--appendfsync", "always"]).start()
    yield server
    server.cleanup()


def test_a_redis_kill_9_and_restart_loses_no_acknowledged_enqueue(
    redis_always: RedisServer, tmp_path: Path
) -> None:
    site = make_site("redis", tmp_path, url=redis_always.url)

    restarted: list[bool] = []

    def kill_and_restart() -> None:
        time.sleep(1.0)
        redis_always.kill()
        time.sleep(0.5)
        redis_always.start()
        restarted.append(True)

    try:
        workers = run_through(site, threading.Thread(target=kill_and_restart))
        stop(workers)
        f = site.figures()
        f.assert_no_loss(duplicates_at_most=f.unreleased + IN_FLIGHT)
        assert restarted, "the server was killed and restarted mid-run"
        assert f.acknowledged == f.completed
        # The adapter retries within its budget (a quarter lease), so a half-second
        # outage costs the producer no failed enqueue.
        assert (f.enqueue_errors, f.acknowledged) == (0, f.attempted)
    finally:
        site.close()
