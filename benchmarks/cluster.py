"""What Redis Cluster costs: the same jobs through one Redis and through a cluster.

    python -m benchmarks.cluster                  # 2,000 jobs, best of 3 rounds
    python -m benchmarks.cluster --jobs 5000 --rounds 5

Each setup is built by `conveyor.build` from a config, as an application would, on
servers this script starts itself (`conveyor.testing`: one `redis-server`, and a
cluster of three masters with a replica each, all on this host):

* one Redis;
* the cluster (`[redis] cluster = true`), no replica wait;
* the cluster with `replica_wait = 1`.

Per setup: `Runtime.enqueue` one job per call, then `Runtime.drain` running them in
this process (claim, handler, finish), each in jobs per second of wall time. The
figures are the best round of each; the load average is printed beside them, since
on a shared machine the wall figures swing with it.
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from collections.abc import Callable
from typing import Any

import conveyor
import redis
from conveyor.testing.redis_cluster import RedisCluster
from conveyor.testing.redis_server import RedisServer


def _noop(args: Any) -> None:
    return None


def _round(config: dict[str, Any], flush: Callable[[], None], jobs: int) -> tuple[float, float]:
    """(enqueues per s, jobs run per s) of one round on an emptied backend."""
    flush()
    runtime = conveyor.build(config, handlers={"noop": _noop})
    try:
        start = time.perf_counter()
        for n in range(jobs):
            runtime.enqueue("noop", {"n": n})
        enqueued = time.perf_counter() - start
        start = time.perf_counter()
        runtime.drain(timeout_s=600)
        drained = time.perf_counter() - start
    finally:
        runtime.close()
    return jobs / enqueued, jobs / drained


def measure(jobs: int, rounds: int) -> list[tuple[str, float, float]]:
    server = RedisServer().start()
    cluster = RedisCluster().start()
    try:
        single = redis.Redis(port=server.port)
        seeds = redis.RedisCluster.from_url(cluster.url)
        first, *more = cluster.urls
        setups = [
            ("one Redis", {"url": server.url}, single.flushall),
            ("cluster", {"url": first, "redis": {"cluster": True, "urls": more}}, seeds.flushall),
            (
                "cluster, replica_wait = 1",
                {"url": first, "redis": {"cluster": True, "urls": more, "replica_wait": 1}},
                seeds.flushall,
            ),
        ]
        out = []
        for name, keys, flush in setups:
            config = {"provider": "redis", "entry_points": False, **keys}
            figures = [_round(config, flush, jobs) for _ in range(rounds)]
            out.append((name, max(f[0] for f in figures), max(f[1] for f in figures)))
        single.close()
        seeds.close()
        return out
    finally:
        cluster.cleanup()
        server.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    a = parser.parse_args()
    load_before = os.getloadavg()
    rows = measure(a.jobs, a.rounds)
    load_after = os.getloadavg()
    base_enqueue, base_run = rows[0][1], rows[0][2]
    print(
        f"{a.jobs} jobs, best of {a.rounds} rounds; {os.cpu_count()} cores "
        f"({platform.processor() or platform.machine()}); load average "
        f"{load_before[0]:.2f} before, {load_after[0]:.2f} after\n"
    )
    print("| setup | enqueue (jobs/s) | run (jobs/s) |")
    print("|---|---|---|")
    for name, enqueue, run in rows:
        print(
            f"| {name} | {enqueue:,.0f} ({enqueue / base_enqueue:.0%}) "
            f"| {run:,.0f} ({run / base_run:.0%}) |"
        )


if __name__ == "__main__":
    main()
