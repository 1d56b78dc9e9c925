"""How long a `conveyor` command takes to start: what every CLI call, worker start and
recycled copy pays before it does anything.

    python -m benchmarks.startup [--runs 15]

Times, in fresh interpreters, `conveyor --help` (the CLI and the runtime's modules
loaded, no backend touched) and the import of what a Redis worker process loads
(the CLI, the runtime, the worker and the Redis adapter), and reports which of
SQLAlchemy and redis-py each loaded. Medians of `--runs`, wall time, in seconds.
Conveyor against itself: run it before and after a change in the same window.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

PROBES = {
    "conveyor --help": [sys.executable, "-m", "conveyor.shell.cli", "--help"],
    "a Redis worker's modules": [
        sys.executable,
        "-c",
        "import conveyor.shell.cli.command, conveyor.shell.cli.worker, conveyor.shell.runtime\n"
        "import conveyor.shell.worker.loop, conveyor.shell.adapters.redis, sys\n"
        "print([m for m in ('sqlalchemy', 'redis') if m in sys.modules])",
    ],
}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=15)
    args = p.parse_args()
    print(f"medians of {args.runs} runs, load {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    for name, argv in PROBES.items():
        times, out = [], ""
        for _ in range(args.runs):
            began = time.perf_counter()
            done = subprocess.run(argv, capture_output=True, text=True, check=True)
            times.append(time.perf_counter() - began)
            out = done.stdout.strip().splitlines()[-1] if "-c" in argv else ""
        print(json.dumps({"probe": name, "median_s": round(statistics.median(times), 3),
                          "min_s": round(min(times), 3), "loaded": out}))  # fmt: skip


if __name__ == "__main__":
    main()
