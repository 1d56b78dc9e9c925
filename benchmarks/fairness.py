"""Fair shares under a flood, and the cost of a limited claim.

    python -m benchmarks.fairness [--flood 10000] [--backends memory,sqlite,postgresql,redis]

1. Fairness: one tenant enqueues `--flood` no-op jobs, then another tenant enqueues
   10. `--workers` worker threads (prefetch `--prefetch`) run the queue; for each of
   the 10 the figure is how many of the flood's jobs had started before it. With
   `fair = true` that is about `prefetch` per worker; without limits the 10 wait for
   the whole flood.
2. Cost per claim: `--jobs` no-op jobs over 10 tenants, drained by one worker
   (prefetch `--prefetch`), on a queue without limits and on one with fair shares
   and a queue cap that never binds: jobs/s both ways.
3. Claim by claim: with `--queued` jobs over 10 tenants (enqueued tenant by tenant),
   the median time of one claim of 10 jobs, limited (fair shares and the same cap)
   and ordinary (`dequeue_many`), each claim's jobs acknowledged before the next; on
   Redis also the commands one limited claim runs (INFO commandstats, commands
   inside scripts included).

PostgreSQL comes from the test server (`conveyor.testing.postgres_server`), Redis
from `conveyor.testing.redis_server` (or `REDIS_URL`). Figures from a shared machine
are indicative only.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

QUEUE = "bench"
LATE = 10
#: The Redis database the runs use (flushed before each).
REDIS_DB = 3


def _config(backend: str, folder: Path) -> dict[str, Any]:
    if backend == "memory":
        return {"provider": "memory"}
    if backend == "sqlite":
        return {"provider": "db", "url": f"sqlite:///{folder / 'bench.db'}"}
    if backend == "redis":
        import redis
        from conveyor.testing.redis_server import redis_url

        url = redis_url(REDIS_DB)
        client = redis.Redis.from_url(url)
        client.flushdb()
        client.close()
        return {"provider": "redis", "redis": {"url": url}}
    from conveyor.testing.postgres_server import fresh_database

    return {
        "provider": "db",
        "url": fresh_database(prefix="conveyor_fairness"),
        "auto_migrate": True,
    }


def _runtime(
    config: dict[str, Any], limits: dict[str, Any] | None, handler: Callable[[Any], None]
) -> Any:
    import conveyor

    full = {**config, "workers": {"queues": [QUEUE]}, "limits": {QUEUE: limits} if limits else {}}
    return conveyor.build(full, handlers={"noop": handler}, env={})


def fairness(
    config: dict[str, Any], *, fair: bool, flood: int, workers: int, prefetch: int
) -> list[int]:
    """For each late job, how many flood jobs had started before it."""
    started: list[str] = []
    lock = threading.Lock()

    def handler(args: Any) -> None:
        with lock:
            started.append(args["who"])

    runtime = _runtime(config, {"fair": True} if fair else None, handler)
    for at in range(0, flood, 1000):
        runtime.enqueue_many(
            "noop", [{"who": "flood"}] * min(1000, flood - at), queue=QUEUE, tenant_id="flood"
        )
    runtime.enqueue_many("noop", [{"who": "late"}] * LATE, queue=QUEUE, tenant_id="late")
    stop = threading.Event()

    def run() -> None:
        worker = runtime.worker(QUEUE, prefetch=prefetch)
        while not stop.is_set():
            if not worker.run_once():
                stop.set()

    threads = [threading.Thread(target=run) for _ in range(workers)]
    for t in threads:
        t.start()
    while not stop.is_set():
        with lock:
            if started.count("late") == LATE:
                stop.set()
        time.sleep(0.005)
    for t in threads:
        t.join()
    runtime.close()
    before, floods = [], 0
    for who in started:
        if who == "flood":
            floods += 1
        else:
            before.append(floods)
    return before


def claim_cost(config: dict[str, Any], *, limited: bool, jobs: int, prefetch: int) -> float:
    """Jobs/s of one worker draining `jobs` no-op jobs over 10 tenants."""
    limits = {"fair": True, "max_running": 10_000} if limited else None
    runtime = _runtime(config, limits, lambda args: None)
    for tenant in range(10):
        runtime.enqueue_many("noop", [{}] * (jobs // 10), queue=QUEUE, tenant_id=f"t{tenant}")
    worker = runtime.worker(QUEUE, prefetch=prefetch)
    began = time.perf_counter()
    done = worker.drain()
    took = time.perf_counter() - began
    runtime.close()
    return done / took


def _redis_commands(runtime: Any) -> int:
    """Commands the server has run (INFO itself left out)."""
    stats = runtime.queue._client.info("commandstats")
    return sum(int(v["calls"]) for k, v in stats.items() if k != "cmdstat_info")


def claim_latency(
    config: dict[str, Any], *, limited: bool, queued: int, claims: int = 50
) -> tuple[float, float | None]:
    """Median ms of one claim of 10 jobs with `queued` jobs over 10 tenants, and on
    Redis the commands of one claim (mean)."""
    from conveyor.core.limits import Cap, QueueLimits

    runtime = _runtime(config, None, lambda args: None)
    for tenant in range(10):
        for at in range(0, queued // 10, 1000):
            runtime.enqueue_many(
                "noop", [{}] * min(1000, queued // 10 - at), queue=QUEUE, tenant_id=f"t{tenant}"
            )
    limits = QueueLimits(fair=True, caps=(Cap(10_000),))
    queue = runtime.queue
    redis = config["provider"] == "redis"
    if limited:
        queue.limit_usage(QUEUE, runtime.clock.now())  # the one-time index, not timed
    took: list[float] = []
    ran: list[int] = []
    for _ in range(claims):
        now = runtime.clock.now()
        before = _redis_commands(runtime) if redis else 0
        began = time.perf_counter()
        if limited:
            got = list(queue.dequeue_limited(QUEUE, now, 10, limits).claims)
        else:
            got = list(queue.dequeue_many(QUEUE, now, 10))
        took.append((time.perf_counter() - began) * 1000)
        if redis:
            ran.append(_redis_commands(runtime) - before - 1)  # the first INFO
        for claim in got:
            queue.ack(claim)
    runtime.close()
    return statistics.median(took), (statistics.mean(ran) if ran else None)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backends", default="memory,sqlite,postgresql,redis")
    p.add_argument("--flood", type=int, default=10_000)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--prefetch", type=int, default=10)
    p.add_argument("--jobs", type=int, default=2000)
    p.add_argument("--queued", type=int, default=10_000)
    a = p.parse_args()
    print(f"flood {a.flood}, {a.workers} workers, prefetch {a.prefetch}; cost: {a.jobs} jobs")
    print("| backend | flood jobs started before each late one: fair | no limits |", end="")
    print(" jobs/s unlimited | jobs/s limited |")
    print("|---|---|---|---|---|")
    for backend in a.backends.split(","):
        with tempfile.TemporaryDirectory() as folder:
            row = []
            for fair in (True, False):
                config = _config(backend, Path(folder) / f"f{fair}")
                (Path(folder) / f"f{fair}").mkdir()
                before = fairness(
                    config, fair=fair, flood=a.flood, workers=a.workers, prefetch=a.prefetch
                )
                row.append(f"{min(before)}..{max(before)}")
            for limited in (False, True):
                config = _config(backend, Path(folder) / f"c{limited}")
                (Path(folder) / f"c{limited}").mkdir()
                row.append(
                    f"{claim_cost(config, limited=limited, jobs=a.jobs, prefetch=a.prefetch):,.0f}"
                )
        print(f"| {backend} | " + " | ".join(row) + " |", flush=True)
    print(f"\none claim of 10 jobs, {a.queued} queued over 10 tenants (median of 50)")
    print("| backend | limited, ms | ordinary, ms | Redis commands per limited claim |")
    print("|---|---|---|---|")
    for backend in a.backends.split(","):
        with tempfile.TemporaryDirectory() as folder:
            cells = []
            commands = None
            for limited in (True, False):
                (Path(folder) / f"l{limited}").mkdir()
                config = _config(backend, Path(folder) / f"l{limited}")
                ms, ran = claim_latency(config, limited=limited, queued=a.queued)
                cells.append(f"{ms:.2f}")
                commands = ran if limited else commands
            cells.append("-" if commands is None else f"{commands:.0f}")
        print(f"| {backend} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
