"""A worker process for the limits fault tests.

    python tests/faults/limits_worker.py --backend URL --ledger PATH --limits JSON [options]

The same handlers and ledger as `fault_worker.py` (each execution's start and end,
pid and wall time), run by a `WorkerPool` whose claims go through the queue's limits:
`--limits` is one `[limits.<queue>]` table as JSON, read through the config parser.
Prints `ready <pid>` once its workers run; stops on SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conveyor.shell.config import parse_config
from conveyor.shell.registry import Registry
from conveyor.shell.worker.loop import WorkerPool
from fault_worker import make_handlers, open_backend, worker_options
from ledger import Ledger


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--backend", required=True)
    p.add_argument("--ledger", required=True)
    p.add_argument("--limits", required=True, help="one [limits.<queue>] table, as JSON")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--lease-ms", type=int, default=1500)
    p.add_argument("--poll-ms", type=int, default=20)
    p.add_argument("--prefetch", type=int, default=1)
    a = p.parse_args()
    limits = dict(parse_config({"limits": {"default": json.loads(a.limits)}}).limits)
    queue, store = open_backend(a.backend)
    pool = WorkerPool(
        queue,
        store,
        Registry(make_handlers(Ledger(a.ledger))),
        worker_count=a.threads,
        queue_name="default",
        limits=limits["default"],
        **worker_options(a.lease_ms, poll_ms=a.poll_ms, prefetch=a.prefetch),
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    pool.start()
    print(f"ready {os.getpid()}", flush=True)
    while not stop.wait(0.1):
        pass
    return 0 if pool.stop(2.0) else 3


if __name__ == "__main__":
    sys.exit(main())
