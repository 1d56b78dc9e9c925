"""A worker process for the workflow fault test.

    python tests/faults/workflow_worker.py URL RUNS_FILE

Two worker threads on `URL` with the fault tests' short lease, until killed. `part`
sleeps a few ms and returns its number; `fan_in` appends one JSON line to
`RUNS_FILE` as it starts (fsynced, so a kill right after still leaves it): this
process's pid, how many inputs it read, how many of them the store did not yet hold
as completed, and the sum of their results.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import Any

from conveyor.core import JobStatus
from conveyor.shell.context import JobContext
from conveyor.shell.ports import records_of
from conveyor.shell.registry import Registry
from conveyor.shell.worker.loop import Worker
from fault_worker import open_backend, worker_options

LEASE_MS = 1500


def main() -> int:
    url, runs = sys.argv[1], sys.argv[2]
    queue, store = open_backend(url)

    def part(args: dict[str, Any]) -> int:
        time.sleep(int(args.get("ms", 3)) / 1000)
        return int(args["n"])

    def fan_in(args: dict[str, Any], ctx: JobContext) -> str:
        inputs = ctx.inputs()
        edges = queue.dependencies_of(ctx.job_id)
        held = records_of(store, [edge.dependency for edge in edges])
        records = [held.get(edge.dependency) for edge in edges]
        unfinished = sum(1 for r in records if r is None or r.status is not JobStatus.COMPLETED)
        line = {
            "pid": os.getpid(),
            "inputs": len(inputs),
            "unfinished": unfinished,
            "sum": sum(v for v in inputs.by_id.values() if isinstance(v, int)),
        }
        with open(runs, "a", encoding="utf-8") as out:
            out.write(json.dumps(line) + "\n")
            out.flush()
            os.fsync(out.fileno())
        return "merged"

    registry = Registry({"part": part, "fan_in": fan_in})

    def loop() -> None:
        # Kills every 1-3 s may cut the fan-in short several times in a row: that is the
        # crash this test allows, so the poison-pill budget (3 by default) is lifted.
        worker = Worker(queue, store, registry, **worker_options(LEASE_MS, max_reclaims=1000))
        while True:
            try:
                if not worker.run_once():
                    time.sleep(0.02)
            except Exception as error:  # an outage, a lock: carry on as a worker would
                print(f"round failed: {error!r}", file=sys.stderr, flush=True)
                time.sleep(0.05)

    for _ in range(2):
        threading.Thread(target=loop, daemon=True).start()
    print(f"ready {os.getpid()}", flush=True)
    threading.Event().wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
