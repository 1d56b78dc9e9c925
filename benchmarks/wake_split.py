"""Where a result wait's wake goes, inside the waiting process (`result_wait --split`).

While installed, `WakeSplit` stamps (wall time, `time.time()`, the clock the handlers
stamp their end with) four moments of each job's wake in this process:

* heard: the process's listener hands a finish in (`FinishSignals.announce`, which
  every backend's listener calls, with or without the record);
* handed on: the waiter's watch is signalled (`FinishWatch._fire`), the record decoded;
* running: the waiter runs again (`FinishWatch.wait` / `wait_async` returned);
* settled: the waiter has its outcome from the carried record
  (`ResultMethods._carried_outcome`), or knows it must read the store.

`segments(ended)` gives the median of each step in ms, the first being from the
handler's end (in the worker process) to heard. The wrappers add a few microseconds
of their own to each step; they are the benchmark's, never the library's.
"""

from __future__ import annotations

import itertools
import statistics
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from conveyor.shell.adapters import finish_signals
from conveyor.shell.runtime import results

STEPS = ("heard", "handed on", "running", "settled")


class WakeSplit:
    def __init__(self) -> None:
        self.stamps: dict[str, dict[str, float]] = {}

    def _stamp(self, job_id: Any, step: str) -> None:
        # The first of each step counts: a waiter's later rounds are not its wake.
        self.stamps.setdefault(str(job_id), {}).setdefault(step, time.time())

    @contextmanager
    def installed(self) -> Iterator[WakeSplit]:
        signals, watch, methods = (
            finish_signals.FinishSignals,
            finish_signals.FinishWatch,
            results.ResultMethods,
        )
        real = (signals.announce, watch._fire, watch.wait, watch.wait_async,
                methods._carried_outcome)  # fmt: skip
        announce, fire, wait, wait_async, carried = real
        split = self

        def announce_(self: Any, job_id: Any, body: Any = None) -> None:
            split._stamp(job_id, "heard")
            announce(self, job_id, body)

        def fire_(self: Any, record: Any) -> None:
            split._stamp(self.job_id, "handed on")
            fire(self, record)

        def wait_(self: Any, timeout_s: float) -> bool:
            woke = wait(self, timeout_s)
            split._stamp(self.job_id, "running")
            return woke

        async def wait_async_(self: Any, timeout_s: float) -> bool:
            woke = await wait_async(self, timeout_s)
            split._stamp(self.job_id, "running")
            return woke

        def carried_(self: Any, job_id: Any, watch_: Any, seen: Any) -> Any:
            out = carried(self, job_id, watch_, seen)
            split._stamp(job_id, "settled")
            return out

        signals.announce, watch._fire, watch.wait = announce_, fire_, wait_
        watch.wait_async, methods._carried_outcome = wait_async_, carried_
        try:
            yield self
        finally:
            signals.announce, watch._fire, watch.wait = real[:3]
            watch.wait_async, methods._carried_outcome = real[3:]

    def segments(self, ended: Mapping[str, float]) -> dict[str, float]:
        """Median ms of each step, over the jobs whose every step was stamped in order
        (a waiter that read its record before the finish was heard has none)."""
        steps: dict[str, list[float]] = {}
        for job_id, end in ended.items():
            stamp = self.stamps.get(job_id, {})
            times = [end, *(stamp.get(step) for step in STEPS)]
            if None in times or times != sorted(times):
                continue
            names = ["finish to heard", "heard to handed on", "to running", "to settled"]
            for name, (a, b) in zip(names, itertools.pairwise(times), strict=True):
                steps.setdefault(name, []).append(b - a)
        return {k: round(statistics.median(v) * 1000, 3) for k, v in steps.items()} | {
            "jobs": len(next(iter(steps.values()), []))
        }
