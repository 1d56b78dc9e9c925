"""Worker processes where the server is not the limit: 1 against N processes.

    python -m benchmarks.scaling [--backends postgresql,redis] [--jobs 2000] [--work-ms 4]

Each job burns `--work-ms` of CPU in its handler (a loop, not a sleep), so the
worker's own work, not the server, decides the rate. For each backend, `--jobs`
jobs are enqueued, then `conveyor worker --processes N` runs them to the end, as a
user starts it (a subprocess with a config file). Rate = (jobs - 1) / (last finish -
first start), from the attempt history each job carries (start-up excluded).
The machine's cores bound what N processes can give: on 2 cores, 2 processes can
at best double one.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

HANDLERS = """
import time

WORK_S = {work_s}


def burn(args):
    end = time.thread_time() + WORK_S
    while time.thread_time() < end:
        pass


HANDLERS = {{"burn": burn}}
"""


def _backend_toml(backend: str, folder: Path) -> str:
    if backend == "sqlite":
        return f'provider = "db"\nurl = "sqlite:///{folder / "jobs.db"}"\n'
    if backend == "redis":
        import redis
        from conveyor.testing.redis_server import redis_url

        url = redis_url(4)
        redis.Redis.from_url(url).flushdb()
        return f'provider = "redis"\n[redis]\nurl = "{url}"\n'
    from conveyor.testing.postgres_server import fresh_database

    return f'provider = "db"\nurl = "{fresh_database(prefix="conveyor_scaling")}"\n'


def run_once(backend: str, processes: int, jobs: int, work_ms: float) -> float:
    """Jobs/s of `conveyor worker --processes N` over `jobs` CPU-bound jobs."""
    from conveyor.shell.runtime import build

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "scaling_handlers.py").write_text(HANDLERS.format(work_s=work_ms / 1000))
        head = _backend_toml(backend, folder)
        body = textwrap.dedent(
            """
            handlers = ["scaling_handlers:HANDLERS"]
            entry_points = false
            """
        )
        tail = '\n[workers]\nqueues = ["default"]\n'
        toml = head.replace("[redis]", body + "[redis]") if "[redis]" in head else head + body
        config = folder / "conveyor.toml"
        config.write_text(toml + tail)
        env = {k: v for k, v in os.environ.items() if not k.startswith("CONVEYOR_")}
        env["PYTHONPATH"] = str(folder) + os.pathsep + env.get("PYTHONPATH", "")
        cli = [sys.executable, "-m", "conveyor.shell.cli", "-c", str(config)]
        subprocess.run([*cli, "migrate"], env=env, cwd=folder, check=True, capture_output=True)
        sys.path.insert(0, str(folder))  # the enqueuing side loads the handlers too
        try:
            runtime = build(str(config))
        finally:
            sys.path.remove(str(folder))
        try:
            enqueued = runtime.enqueue_many("burn", [{"i": i} for i in range(jobs)])
            worker = subprocess.Popen(
                [*cli, "worker", "--processes", str(processes)],
                env=env,
                cwd=folder,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            try:
                deadline = time.monotonic() + 600
                while time.monotonic() < deadline:
                    counts = runtime.queue.counts(runtime.clock.now()).get("default")
                    if counts is None or counts.ready + counts.in_flight == 0:
                        break
                    time.sleep(0.2)
            finally:
                worker.terminate()
                worker.wait(timeout=60)
            return _rate([runtime.get(job.id) for job in enqueued])
        finally:
            runtime.close()


def _rate(views: list[Any]) -> float:
    starts, ends = [], []
    for view in views:
        assert view is not None and view.job is not None, "a job went missing"
        attempt = view.job.attempts[-1]
        starts.append(attempt.started_at)
        ends.append(attempt.finished_at)
    span = (max(ends) - min(starts)).total_seconds()
    return (len(views) - 1) / span


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.scaling", description=__doc__)
    parser.add_argument("--backends", default="postgresql,redis")
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--work-ms", type=float, default=4.0)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    print(f"cores: {os.cpu_count()}, load average: {os.getloadavg()[0]:.2f}")
    for backend in args.backends.split(","):
        for round_ in range(1, args.rounds + 1):
            one = run_once(backend, 1, args.jobs, args.work_ms)
            many = run_once(backend, args.processes, args.jobs, args.work_ms)
            print(
                f"{backend} round {round_}: 1 process {one:,.0f} jobs/s,"
                f" {args.processes} processes {many:,.0f} jobs/s: {many / one:.2f}x"
                f" (load {os.getloadavg()[0]:.2f})",
                flush=True,
            )


if __name__ == "__main__":
    main()
