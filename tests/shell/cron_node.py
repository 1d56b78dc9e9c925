"""A worker process for the cron fault test.

    python tests/shell/cron_node.py CONFIG LEDGER

Builds the runtime of CONFIG (whose `[[cron]]` entries name the job type `tick`),
starts its pools and its cron ticker, and appends one line to LEDGER for every
job its enqueues actually wrote (the `enqueued` hook: not called when a slot's job
was already there) and for every job it starts. Each line is written with one
`os.write` on a file opened for appending, so a SIGKILL never leaves half a line.
Prints `ready` once running; stops cleanly on SIGTERM.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Any

import conveyor
from conveyor.core import Job


def main(config: str, ledger: str) -> int:
    fd = os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    pid = os.getpid()

    def write(kind: str, job: Job) -> None:
        os.write(fd, f"{kind} {job.id} {pid} {job.created_at.isoformat()}\n".encode())

    def tick(args: Any) -> str:
        return "ok"

    runtime = conveyor.build(config, handlers={"tick": tick})
    runtime.hooks.on_enqueued(lambda job: write("enqueued", job))
    runtime.hooks.on_started(lambda job: write("started", job))
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    with runtime:
        print("ready", flush=True)
        done.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
