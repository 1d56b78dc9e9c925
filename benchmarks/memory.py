"""A worker process's resident memory: idle, then over a long run of no-op jobs.

    python -m benchmarks.memory [--jobs 200000] [--rounds 10] [--backends sqlite,postgresql,redis]

Per backend, one `conveyor worker` process (the CLI, default settings, no
`--processes`) runs on its own queue. Its resident set (`VmRSS` of that process,
read from /proc) is taken:

* idle: after a first job ran and the worker then waited 3 s with nothing to do;
* busy: after each of `--rounds` rounds of `--jobs / --rounds` no-op jobs, enqueued
  with `enqueue_many` and drained by the worker before the reading.

Growth is the last round's reading minus the second's (the first round warms caches,
pools and prepared statements). A worker that keeps something per job it ran would
grow with every round; one that does not stays level. The peak resident set while
busy, beside the peers', is in the main harness (`benchmarks.run`, "worker peak RSS").
Writes benchmarks/results/memory.json.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from .result_wait import _config, _toml

QUEUE = "memory"
RESULTS = Path(__file__).resolve().parent / "results"

HANDLERS = """
def noop(args):
    return None
HANDLERS = {"noop": noop}
"""


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


def _drained(rt: Any, timeout_s: float) -> None:
    """Wait until the queue holds nothing ready, parked or in flight."""
    from datetime import UTC, datetime

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        counts = rt.queue.counts(datetime.now(UTC)).get(QUEUE)
        if counts is None or (counts.ready + counts.in_flight + counts.scheduled) == 0:
            return
        time.sleep(0.05)
    raise RuntimeError(f"the queue was not drained within {timeout_s:.0f} s")


def measure(backend: str, jobs: int, rounds: int) -> dict[str, Any]:
    import conveyor

    with tempfile.TemporaryDirectory(prefix="conveyor-memory-bench-") as tmp:
        folder = Path(tmp)
        (folder / "bench_memory_handlers.py").write_text(HANDLERS)
        where = _config(backend, folder)
        config = {
            **where,
            "handlers": ["bench_memory_handlers:HANDLERS"],
            "entry_points": False,
            "workers": {"queues": [QUEUE]},
        }
        (folder / "conveyor.toml").write_text(_toml(config))
        rt = conveyor.build({**where, "entry_points": False, "workers": {"queues": [QUEUE]}})
        env = {k: v for k, v in os.environ.items() if not k.startswith("CONVEYOR_")}
        env["PYTHONPATH"] = os.pathsep.join([str(folder), env.get("PYTHONPATH", "")])
        log = (folder / "worker.log").open("wb")
        worker = subprocess.Popen(
            [sys.executable, "-m", "conveyor.shell.cli", "--config", str(folder / "conveyor.toml"),
             "worker"],
            cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        try:
            rt.enqueue_many("noop", [{"i": -1}], queue=QUEUE)
            _drained(rt, 60)
            time.sleep(3)
            idle = rss_kib(worker.pid)
            per_round = jobs // rounds
            readings = []
            started = time.monotonic()
            for r in range(rounds):
                for start in range(0, per_round, 1000):
                    n = min(1000, per_round - start)
                    rt.enqueue_many("noop", [{"i": r * per_round + start + k} for k in range(n)],
                                    queue=QUEUE)  # fmt: skip
                _drained(rt, 600)
                readings.append(rss_kib(worker.pid))
                print(f"  {backend}: round {r + 1}/{rounds}: {readings[-1] / 1024:.1f} MiB",
                      flush=True)  # fmt: skip
            took = time.monotonic() - started
        finally:
            if worker.poll() is None:
                worker.send_signal(signal.SIGTERM)
                try:
                    worker.wait(30)
                except subprocess.TimeoutExpired:
                    os.killpg(worker.pid, signal.SIGKILL)
                    worker.wait(10)
            log.close()
            rt.close()
        return {
            "backend": backend,
            "jobs": per_round * rounds,
            "idle_mib": round(idle / 1024, 1),
            "busy_mib": [round(v / 1024, 1) for v in readings],
            "growth_mib": round((readings[-1] - readings[min(1, len(readings) - 1)]) / 1024, 1),
            "seconds": round(took, 1),
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.memory",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--jobs", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--backends", default="sqlite,postgresql,redis")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    results = []
    for backend in args.backends.split(","):
        print(f"{backend}: {args.jobs:,} no-op jobs in {args.rounds} rounds", flush=True)
        out = measure(backend, args.jobs, args.rounds)
        print(f"  idle {out['idle_mib']} MiB, growth rounds 2..{args.rounds}: "
              f"{out['growth_mib']} MiB", flush=True)  # fmt: skip
        results.append(out)
    load = os.getloadavg()
    report = {"load": [round(x, 2) for x in load], "cores": os.cpu_count(), "results": results}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "memory.json").write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {args.out / 'memory.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
