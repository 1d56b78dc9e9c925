"""What Redis Cluster costs: the same jobs through one Redis and through a cluster.

    python -m benchmarks.cluster                  # 2,000 jobs, best of 3 rounds
    python -m benchmarks.cluster --jobs 5000 --rounds 5
    python -m benchmarks.cluster --spread --jobs 20000  # queues over the masters

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

`--spread` measures how throughput grows with queues: with 1, 2 and 3 queues, one
process per queue enqueues its share of the jobs (`Runtime.enqueue_many`, 100 a call),
then one process per queue drains its queue, all started together; on one Redis,
on the cluster with every key under one tag, and on the cluster with `shards = 3`
and queue k pinned to shard k (so each queue has a master of its own).
"""

from __future__ import annotations

import argparse
import multiprocessing
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


#: Jobs per `Runtime.enqueue_many` call in `--spread`: the servers, not one client's
#: round trips, are what the spread is meant to show.
_BATCH = 100


def _loadavg() -> str:
    with open("/proc/loadavg") as f:
        return f.read().strip()


def _one_queue(
    config: dict[str, Any], queue: str, jobs: int, phase: str, go: Any, out: Any
) -> None:
    """A process that enqueues `jobs` jobs to `queue`, or drains it, once `go` is set;
    it puts its elapsed seconds on `out`."""
    runtime = conveyor.build({**config, "workers": {"queues": [queue]}}, handlers={"noop": _noop})
    try:
        go.wait()
        start = time.perf_counter()
        if phase == "enqueue":
            for first in range(0, jobs, _BATCH):
                batch = [{"n": n} for n in range(first, min(first + _BATCH, jobs))]
                runtime.enqueue_many("noop", batch, queue=queue)
        else:
            runtime.drain(timeout_s=900)
        out.put(time.perf_counter() - start)
    finally:
        runtime.close()


def _spread_round(config: dict[str, Any], queues: int, jobs: int) -> tuple[float, float]:
    """(enqueues per s, jobs run per s) of `jobs` jobs over `queues` queues, one process
    per queue in each phase; the wall time is the slowest process's."""
    ctx = multiprocessing.get_context("spawn")
    rates = []
    for phase in ("enqueue", "run"):
        go, out = ctx.Event(), ctx.Queue()
        procs = [
            ctx.Process(target=_one_queue, args=(config, f"q{k}", jobs // queues, phase, go, out))
            for k in range(queues)
        ]
        for proc in procs:
            proc.start()
        time.sleep(2.0)  # every process built its runtime before the clock starts
        go.set()
        slowest = max(out.get(timeout=900) for _ in procs)
        for proc in procs:
            proc.join()
        rates.append((jobs // queues) * queues / slowest)
    return rates[0], rates[1]


def spread(jobs: int, rounds: int) -> list[tuple[str, int, float, float]]:
    """(setup, queues, enqueues per s, jobs run per s), best of `rounds` each."""
    server = RedisServer().start()
    cluster = RedisCluster().start()
    try:
        single = redis.Redis(port=server.port)
        seeds = redis.RedisCluster.from_url(cluster.url)
        first, *more = cluster.urls
        on_cluster = {"url": first, "redis": {"cluster": True, "urls": more}}
        pins = {"q0": 0, "q1": 1, "q2": 2}
        sharded = {
            "url": first,
            "redis": {**on_cluster["redis"], "shards": 3, "queue_shards": pins},
        }
        setups = [
            ("one Redis", {"url": server.url}, single.flushall),
            ("cluster, one tag", on_cluster, seeds.flushall),
            ("cluster, shards = 3", sharded, seeds.flushall),
        ]
        out = []
        for name, keys, flush in setups:
            config = {"provider": "redis", "entry_points": False, **keys}
            for queues in (1, 2, 3):
                figures = []
                for _ in range(rounds):
                    flush()
                    figures.append(_spread_round(config, queues, jobs))
                best = (max(f[0] for f in figures), max(f[1] for f in figures))
                print(f"  {name}, {queues} queue(s): {best[0]:,.0f} / {best[1]:,.0f} jobs/s")
                out.append((name, queues, *best))
        single.close()
        seeds.close()
        return out
    finally:
        cluster.cleanup()
        server.cleanup()


def main_spread(jobs: int, rounds: int) -> None:
    load_before = _loadavg()
    rows = spread(jobs, rounds)
    load_after = _loadavg()
    print(
        f"\n{jobs} jobs per figure, best of {rounds} rounds; {os.cpu_count()} cores "
        f"({platform.processor() or platform.machine()}); /proc/loadavg "
        f"{load_before!r} before, {load_after!r} after\n"
    )
    print("| setup | queues | enqueue (jobs/s) | run (jobs/s) |")
    print("|---|---|---|---|")
    for name, queues, enqueue, run in rows:
        print(f"| {name} | {queues} | {enqueue:,.0f} | {run:,.0f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--spread", action="store_true", help="queues over the masters")
    a = parser.parse_args()
    if a.spread:
        main_spread(a.jobs, a.rounds)
        return
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
