"""Waiting for results: how soon `Runtime.result` / `aresult` wake after a job finishes.

    python -m benchmarks.result_wait [--jobs 1000] [--processes 4] [--rate 100]
                                     [--backends sqlite,postgresql,redis] [--mode async,threads]

`conveyor worker --processes N` runs in the background on the backend; this process
enqueues `--jobs` jobs at a steady `--rate` per second (below the workers' capacity,
so a job waits for nothing but its pickup), and waits for every one of them at once:

* `async`: each job enqueued with `await runtime.aenqueue(...)` and waited for with
  one `await runtime.aresult(id)`, all on one event loop;
* `threads`: each job enqueued with `runtime.enqueue(...)` and waited for by a thread
  of its own calling `runtime.result(id)`.

Each handler sleeps 5-25 ms and returns when it started and ended (`time.time()`,
one machine, one clock). Two figures per job:

* pickup: the job's start minus the moment its enqueue was called (what a worker
  waits to see a new job: the backend's pickup latency under this load);
* wake: the moment the waiter got the result minus the handler's end (the finish's
  write and its signal to this process, which hands the waiter the record: carried
  by the signal on PostgreSQL and Redis, read once per commit for every waiter on
  SQLite; a waiter reads the record itself only when it was not handed it).

With `--split`, each wake is also timed step by step in this process
(`benchmarks.wake_split`): from the handler's end until this process hears the
finish, then the hand-over to the waiter, until it runs, until it has settled.

The check is that every waiter returns the value its job returned (none lost, none
wrong) and that wake stays within pickup: a waiter hears a finish as fast as a worker
hears an enqueue (the last column: the median wake over the median pickup, unrounded).
Times are reported as p50 / p95 / p99 / max in ms; figures from a shared machine are
indicative only.

PostgreSQL comes from `conveyor.testing.postgres_server`, Redis from
`conveyor.testing.redis_server` (or DATABASE_URL / REDIS_URL).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

QUEUE = "results"
REDIS_DB = 4

HANDLERS = """
import random, time
def sleepy(args):
    started = time.time()
    time.sleep(random.uniform(0.005, 0.025))
    return {"i": args["i"], "started": started, "ended": time.time()}
HANDLERS = {"sleepy": sleepy}
"""


def _config(backend: str, folder: Path) -> dict[str, Any]:
    if backend == "sqlite":
        return {"provider": "db", "url": f"sqlite:///{folder / 'jobs.db'}"}
    if backend == "postgresql":
        from conveyor.testing.postgres_server import fresh_database

        url = fresh_database(prefix="conveyor_results_bench")
        return {"provider": "db", "url": url, "auto_migrate": True}
    if backend == "redis":
        from conveyor.testing.redis_server import redis_url

        prefix = f"results-{uuid.uuid4().hex[:8]}"
        return {"provider": "redis", "redis": {"url": redis_url(REDIS_DB), "prefix": prefix}}
    raise SystemExit(f"unknown backend {backend!r}")


def _toml(config: dict[str, Any]) -> str:
    def value(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v) + "]"
        return json.dumps(v) if isinstance(v, str) else str(v)

    top = [f"{k} = {value(v)}\n" for k, v in config.items() if not isinstance(v, dict)]
    tables = [
        f"[{k}]\n" + "".join(f"{kk} = {value(vv)}\n" for kk, vv in v.items())
        for k, v in config.items()
        if isinstance(v, dict)
    ]
    return "".join(top + tables)


class Workers:
    """`conveyor worker --processes N` on the site's config, stopped with SIGTERM."""

    def __init__(self, folder: Path, processes: int) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CONVEYOR_")}
        env["PYTHONPATH"] = os.pathsep.join([str(folder), env.get("PYTHONPATH", "")])
        self.log = (folder / "worker.log").open("wb")
        self.popen = subprocess.Popen(
            [sys.executable, "-m", "conveyor.shell.cli", "--config", str(folder / "conveyor.toml"),
             "worker", "--processes", str(processes)],
            cwd=folder, env=env, stdout=self.log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait(10)
        self.log.close()


def _warm_up(rt: Any, timeout_s: float = 60.0) -> None:
    """Wait until the workers run a job: their start-up is not what is measured."""
    job = rt.enqueue("sleepy", {"i": -1}, queue=QUEUE)
    rt.result(job.id, timeout=timeout_s)


def _run_async(rt: Any, jobs: int, rate: float) -> list[dict[str, float]]:
    async def wait_one(job_id: Any, enqueued: float) -> dict[str, float]:
        value = await rt.aresult(job_id, timeout=120)
        return {**value, "id": str(job_id), "enqueued": enqueued, "woke": time.time()}

    async def main() -> list[dict[str, float]]:
        waits = []
        start = time.monotonic()
        for i in range(jobs):
            await asyncio.sleep(max(0.0, start + i / rate - time.monotonic()))
            enqueued = time.time()
            job = await rt.aenqueue("sleepy", {"i": i}, queue=QUEUE)
            waits.append(asyncio.create_task(wait_one(job.id, enqueued)))
        return list(await asyncio.gather(*waits))

    return asyncio.run(main())


def _run_threads(rt: Any, jobs: int, rate: float) -> list[dict[str, float]]:
    got: list[dict[str, float]] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def wait_one(job_id: Any, enqueued: float) -> None:
        try:
            value = rt.result(job_id, timeout=120)
        except BaseException as exc:  # counted as a lost outcome below
            with lock:
                errors.append(exc)
            return
        with lock:
            got.append({**value, "id": str(job_id), "enqueued": enqueued, "woke": time.time()})

    threads = []
    start = time.monotonic()
    for i in range(jobs):
        time.sleep(max(0.0, start + i / rate - time.monotonic()))
        enqueued = time.time()
        job = rt.enqueue("sleepy", {"i": i}, queue=QUEUE)
        thread = threading.Thread(target=wait_one, args=(job.id, enqueued), daemon=True)
        thread.start()
        threads.append(thread)
    for thread in threads:
        thread.join()
    if errors:
        print(f"    {len(errors)} waiters failed, first: {errors[0]!r}")
    return got


def _quantiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    return {
        "p50": statistics.median(ordered), "p95": at(0.95), "p99": at(0.99), "max": ordered[-1],
    }  # fmt: skip


def measure(
    backend: str, mode: str, jobs: int, processes: int, rate: float, split: bool = False
) -> dict[str, Any]:
    import conveyor

    from .wake_split import WakeSplit

    stamps = WakeSplit()

    with tempfile.TemporaryDirectory(prefix="conveyor-results-bench-") as tmp:
        folder = Path(tmp)
        (folder / "bench_result_handlers.py").write_text(HANDLERS)
        where = _config(backend, folder)
        config = {
            **where,
            "handlers": ["bench_result_handlers:HANDLERS"],
            "entry_points": False,
            "workers": {"count": 2, "queues": [QUEUE]},
        }
        (folder / "conveyor.toml").write_text(_toml(config))
        rt = conveyor.build({**where, "entry_points": False, "workers": {"queues": [QUEUE]}})
        workers = Workers(folder, processes)
        try:
            _warm_up(rt)
            began = time.monotonic()
            with stamps.installed() if split else contextlib.nullcontext():
                got = (_run_async if mode == "async" else _run_threads)(rt, jobs, rate)
            elapsed = time.monotonic() - began
        finally:
            workers.stop()
            rt.close()
    returned = sorted(int(v["i"]) for v in got)
    return {
        "backend": backend,
        "mode": mode,
        "jobs": jobs,
        "returned": len(got),
        "all_right": returned == list(range(jobs)),
        "seconds": round(elapsed, 1),
        "pickup_ms": {k: round(v * 1000, 1) for k, v in
                      _quantiles([v["started"] - v["enqueued"] for v in got]).items()},
        "wake_ms": {k: round(v * 1000, 1) for k, v in
                    _quantiles([v["woke"] - v["ended"] for v in got]).items()},
        # The check: the median wake over the median pickup, unrounded (at most 1).
        "wake_over_pickup": round(
            statistics.median([v["woke"] - v["ended"] for v in got])
            / statistics.median([v["started"] - v["enqueued"] for v in got]), 3),
        **({"wake_split_ms": stamps.segments({v["id"]: v["ended"] for v in got})}
           if split else {}),
    }  # fmt: skip


def _line(r: dict[str, Any]) -> str:
    def q(d: dict[str, float]) -> str:
        return " / ".join(f"{d[k]:.1f}" for k in ("p50", "p95", "p99", "max"))

    return (
        f"| {r['backend']} | {r['mode']} | {r['returned']}/{r['jobs']}"
        f"{'' if r['all_right'] else ' (WRONG)'} | {q(r['pickup_ms'])} | {q(r['wake_ms'])} "
        f"| {r['wake_over_pickup']:.2f} |"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backends", default="sqlite,postgresql,redis")
    p.add_argument("--mode", default="async,threads")
    p.add_argument("--jobs", type=int, default=1000)
    p.add_argument("--processes", type=int, default=4)
    p.add_argument("--rate", type=float, default=100.0, help="jobs enqueued per second")
    p.add_argument("--out", type=Path, default=None, help="also write the results as JSON")
    p.add_argument(
        "--split", action="store_true", help="also time each step of a wake in this process"
    )
    args = p.parse_args()
    load = os.getloadavg()[0]
    print(f"{args.jobs} jobs at {args.rate:g}/s, {args.processes} worker processes x 2 workers, "
          f"load {load:.1f} on {os.cpu_count()} cores")  # fmt: skip
    print("| backend | waiters | outcomes | pickup ms p50/p95/p99/max | wake ms p50/p95/p99/max "
          "| wake / pickup |")
    print("|---|---|---|---|---|---|")
    results = []
    for backend in args.backends.split(","):
        for mode in args.mode.split(","):
            result = measure(backend, mode, args.jobs, args.processes, args.rate, args.split)
            results.append(result)
            print(_line(result), flush=True)
            if "wake_split_ms" in result:
                print(f"|   split, median ms | {result['wake_split_ms']} |", flush=True)
    if args.out:
        args.out.write_text(json.dumps({"load": load, "results": results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
