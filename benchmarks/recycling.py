"""Recycling worker processes: what a recycle costs, and how soon a supervisor stops.

    python -m benchmarks.recycling [--jobs 600] [--processes 2] [--per-child 10]
                                   [--rounds 3] [--out FILE]

On an embedded SQLite file, `conveyor worker --processes P --max-jobs-per-child J`
runs `--jobs` no-op jobs enqueued beforehand, so each copy is replaced every J jobs
(jobs / J recycles in all). Per round:

* seconds: from the supervisor's start until every job has run;
* recycles: the supervisor's "recycled" lines;
* per recycle: seconds x processes / recycles, the time one copy's slot takes from
  one copy's start to the next (its start-up, its J jobs, its graceful stop, and
  the supervisor's noticing it);
* stop: from SIGTERM, with the copies idle, until the supervisor has exited.

Conveyor against itself (no peer recycles this way); run it before and after a
change in the same window. Figures from a shared machine are indicative only.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HANDLERS = """
import os
RUNS = os.environ["RUNS_FILE"]
def noop(args):
    with open(RUNS, "a") as f:  # one line per run: the count the benchmark waits for
        f.write("1\\n")
HANDLERS = {"noop": noop}
"""


def one_round(jobs: int, processes: int, per_child: int) -> dict[str, Any]:
    import conveyor

    with tempfile.TemporaryDirectory(prefix="conveyor-recycling-bench-") as tmp:
        folder = Path(tmp)
        (folder / "recycling_bench_handlers.py").write_text(HANDLERS)
        url = f"sqlite:///{folder / 'jobs.db'}"
        (folder / "conveyor.toml").write_text(
            f'provider = "db"\nurl = "{url}"\nhandlers = ["recycling_bench_handlers:HANDLERS"]\n'
            'entry_points = false\n[workers]\ncount = 2\nqueues = ["default"]\n'
        )
        rt = conveyor.build({"provider": "db", "url": url, "entry_points": False})
        try:
            rt.enqueue_many("noop", [{"i": i} for i in range(jobs)])
            runs = folder / "runs.txt"
            runs.touch()
            env = {k: v for k, v in os.environ.items() if not k.startswith("CONVEYOR_")}
            env["PYTHONPATH"] = os.pathsep.join([str(folder), env.get("PYTHONPATH", "")])
            env["RUNS_FILE"] = str(runs)
            argv = [sys.executable, "-m", "conveyor.shell.cli", "worker", "--processes",
                    str(processes), "--max-jobs-per-child", str(per_child)]  # fmt: skip
            began = time.monotonic()
            worker = subprocess.Popen(
                argv, cwd=folder, env=env, stderr=subprocess.PIPE, text=True,
                start_new_session=True,
            )  # fmt: skip
            while len(runs.read_bytes()) < 2 * jobs:
                if worker.poll() is not None:
                    raise SystemExit(f"the supervisor exited: {worker.stderr.read()[-2000:]}")  # type: ignore[union-attr]
                time.sleep(0.02)
            seconds = time.monotonic() - began
            time.sleep(1.0)  # the copies idle, as a deploy's SIGTERM finds them
            asked = time.monotonic()
            worker.send_signal(signal.SIGTERM)
            _, stderr = worker.communicate(timeout=60)
            stop_s = time.monotonic() - asked
        finally:
            rt.close()
    recycles = stderr.count("recycled after")
    return {
        "seconds": round(seconds, 2),
        "recycles": recycles,
        "per_recycle_s": round(seconds * processes / max(1, recycles), 3),
        "stop_s": round(stop_s, 3),
        "exit": worker.returncode,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=600)
    p.add_argument("--processes", type=int, default=2)
    p.add_argument("--per-child", type=int, default=10)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args()
    load = os.getloadavg()[0]
    print(f"{args.jobs} no-op jobs, --processes {args.processes} --max-jobs-per-child "
          f"{args.per_child}, load {load:.1f} on {os.cpu_count()} cores")  # fmt: skip
    rounds = []
    for n in range(args.rounds):
        r = one_round(args.jobs, args.processes, args.per_child)
        rounds.append(r)
        print(f"round {n + 1}: {json.dumps(r)}", flush=True)
    summary = {
        key: statistics.median(r[key] for r in rounds)
        for key in ("seconds", "recycles", "per_recycle_s", "stop_s")
    }
    print(f"median: {json.dumps(summary)}")
    if args.out:
        args.out.write_text(
            json.dumps({"load": load, "args": vars(args) | {"out": str(args.out)},
                        "rounds": rounds, "median": summary}, indent=2) + "\n"
        )  # fmt: skip


if __name__ == "__main__":
    main()
