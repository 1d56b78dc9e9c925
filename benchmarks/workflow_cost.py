"""What workflows cost: enqueueing a 1,000-job workflow, and finishing a job that jobs
wait for, each against the same number of plain jobs.

    python -m benchmarks.workflow_cost [--jobs 1000] [--backends memory,sqlite,postgresql,redis]

* enqueue: one `runtime.enqueue(workflow)` of `--jobs - 1` parts and one fan-in that
  waits for all of them, against one `enqueue_many` of `--jobs` plain jobs;
* finish: the worker's finish of `--jobs` jobs, each the input of one waiting job
  (so each finish takes the settling path), against `--jobs` plain jobs. Measured as
  the time one in-process worker takes to drain them (claim, run a no-op handler,
  finish), divided by the number of inputs.

One process, one worker thread, no network beyond the database's; figures from a
shared machine are indicative only. PostgreSQL comes from
`conveyor.testing.postgres_server` (or DATABASE_URL).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import conveyor
from conveyor import Workflow


def _config(backend: str, scratch: Path) -> dict[str, Any]:
    base: dict[str, Any] = {"entry_points": False, "workers": {"count": 0}}
    if backend == "memory":
        return {"provider": "memory", **base}
    if backend == "sqlite":
        return {"provider": "db", "url": f"sqlite:///{scratch / 'jobs.db'}", **base}
    if backend == "redis":
        import redis
        from conveyor.testing.redis_server import redis_url

        url = redis_url(13)
        redis.Redis.from_url(url).flushdb()
        return {"provider": "redis", "redis": {"url": url, "prefix": "wfbench"}, **base}
    from conveyor.testing.postgres_server import fresh_database

    return {"provider": "db", "url": fresh_database(prefix="conveyor_bench"), **base}


def _timed(work: Any) -> float:
    start = time.perf_counter()
    work()
    return time.perf_counter() - start


def measure(backend: str, jobs: int, scratch: Path) -> dict[str, float]:
    config = _config(backend, scratch)
    if backend in ("sqlite", "postgresql"):
        from conveyor.shell.migrate import migrate

        migrate(conveyor.load_config(config))
    rt = conveyor.build(config, handlers={"noop": lambda a: None})
    try:
        plain_enqueue = _timed(lambda: rt.enqueue_many("noop", [{}] * jobs))
        plain_finish = _timed(rt.drain) / jobs
        wf = Workflow()
        parts = [wf.add("noop") for _ in range(jobs - 1)]
        wf.add("noop", after=parts)
        graph_enqueue = _timed(lambda: rt.enqueue(wf))
        rt.drain()
        paired = Workflow()
        for _ in range(jobs):
            paired.add("noop", after=[paired.add("noop")])
        rt.enqueue(paired)
        # Inputs and dependents share one queue: the drain finishes both; the
        # dependents' own finishes are plain ones.
        both = _timed(rt.drain)
        settling_finish = (both - plain_finish * jobs) / jobs
    finally:
        rt.close()
    return {
        "enqueue_plain_ms": plain_enqueue * 1000,
        "enqueue_workflow_ms": graph_enqueue * 1000,
        "finish_plain_us": plain_finish * 1e6,
        "finish_with_dependent_us": settling_finish * 1e6,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--backends", default="memory,sqlite,postgresql")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        for backend in args.backends.split(","):
            figures = measure(backend, args.jobs, Path(scratch))
            shown = ", ".join(f"{k} {v:.1f}" for k, v in figures.items())
            print(f"{backend}: {shown}")


if __name__ == "__main__":
    main()
