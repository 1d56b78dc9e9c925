"""Worker processes and the one way every system's completions are counted.

Each measured worker is a fresh `spawn`ed Python process (so its RSS is its own,
not inherited from the orchestrator). It builds its system's worker (connects,
registers the no-op handler), says it is ready, waits for the go signal, then
runs the system's own worker loop. The handler of every system calls the same
`counting._hook(i, t)`: one lock, two stores into shared memory and, for latency, one
subtraction. The orchestrator polls the shared counters; nothing is asked of the
system under test to learn that a job ran.

At stop, a watcher thread records the process's peak RSS and its Redis round
trips, then leaves with `os._exit(0)`: no system gets to run a slow graceful
shutdown inside a measurement, and none is measured doing so.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import resource
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from .counting import _state

CTX = mp.get_context("spawn")

# ---- inside a worker process ---------------------------------------------------------


def _count_round_trips() -> None:
    """Count what redis-py sends: one packed send is one round trip (a pipeline is one)."""
    try:
        import redis.connection as rc
    except ImportError:
        return
    base = rc.AbstractConnection if hasattr(rc, "AbstractConnection") else rc.Connection
    original = base.send_packed_command

    def counted(self: Any, command: Any, check_health: bool = True) -> None:
        _state["trips"] += 1
        return original(self, command, check_health)

    base.send_packed_command = counted  # type: ignore[method-assign]


def peak_rss_kib() -> int:
    """This process's peak resident set (VmHWM). Not `ru_maxrss`: on Linux that one keeps
    the high-water mark of the image before `exec`, i.e. the orchestrator's."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def _watch(stop: Any, rss: Any, trips: Any, slot: int) -> None:
    stop.wait()
    with _state["lock"]:
        rss[slot] = peak_rss_kib()
        trips[slot] = _state["trips"]
    os._exit(0)


def child_main(spec: dict[str, Any], shared: dict[str, Any], slot: int) -> None:
    """Entry point of a worker process."""
    import logging

    logging.basicConfig(level=logging.ERROR)
    _state.update(
        lock=threading.Lock(),
        slot=slot,
        count=shared["count"],
        first=shared["first"],
        last=shared["last"],
        seen=shared["seen"],
        lat=shared["lat"],
        n=len(shared["seen"]),
        want_latency=spec.get("latency", False),
        trips=0,
    )
    _count_round_trips()
    threading.Thread(
        target=_watch, args=(shared["stop"], shared["rss"], shared["trips"], slot), daemon=True
    ).start()
    from . import workers

    try:
        run = workers.make_runner(spec)
    except BaseException as exc:
        shared["errors"].put(f"{spec['system']}: worker setup failed: {type(exc).__name__}: {exc}")
        raise
    shared["ready"].release()
    shared["go"].wait()
    try:
        run()
    except BaseException as exc:
        shared["errors"].put(f"{spec['system']}: worker died: {type(exc).__name__}: {exc}")
        raise


# ---- in the orchestrator -------------------------------------------------------------


@attrs.define
class Outcome:
    """What one batch of worker processes did."""

    processed: int
    distinct: int
    first: float
    last: float
    rss_kib: list[int]
    round_trips: int
    latencies: list[float]
    timed_out: bool
    errors: list[str]

    @property
    def rate(self) -> float:
        """Jobs/s from the first handler start to the last one (startup excluded)."""
        span = self.last - self.first
        return (self.processed - 1) / span if span > 0 and self.processed > 1 else 0.0


class Workers:
    """Start `procs` worker processes for `spec`; `go()`; wait for `target` jobs; stop."""

    def __init__(self, spec: dict[str, Any], procs: int, n_slots: int) -> None:
        self.spec, self.procs = spec, procs
        self.shared: dict[str, Any] = {
            "count": CTX.Array("q", procs, lock=False),
            "first": CTX.Array("d", procs, lock=False),
            "last": CTX.Array("d", procs, lock=False),
            "rss": CTX.Array("q", procs, lock=False),
            "trips": CTX.Array("q", procs, lock=False),
            "seen": CTX.Array("b", n_slots, lock=False),
            "lat": CTX.Array("d", n_slots if spec.get("latency") else 1, lock=False),
            "ready": CTX.Semaphore(0),
            "go": CTX.Event(),
            "stop": CTX.Event(),
            "errors": CTX.Queue(),
        }
        self.processes = [
            CTX.Process(target=child_main, args=(spec, self.shared, slot), daemon=True)
            for slot in range(procs)
        ]

    def start(self, timeout: float = 120.0) -> None:
        for p in self.processes:
            p.start()
        deadline = time.monotonic() + timeout
        for _ in self.processes:
            left = deadline - time.monotonic()
            if not self.shared["ready"].acquire(timeout=max(left, 0.01)):
                raise RuntimeError(f"{self.spec['system']}: workers not ready: {self._errors()}")

    def go(self) -> float:
        t0 = time.time()
        self.shared["go"].set()
        return t0

    def done(self) -> int:
        return int(sum(self.shared["count"]))

    def wait_for(
        self, target: int, timeout: float, on_poll: Callable[[], None] | None = None
    ) -> bool:
        deadline = time.monotonic() + timeout
        while self.done() < target:
            if time.monotonic() > deadline:
                return False
            if not any(p.is_alive() for p in self.processes):
                return False
            if on_poll is not None:
                on_poll()
            time.sleep(0.002)
        return True

    def _errors(self) -> list[str]:
        out = []
        q = self.shared["errors"]
        while True:
            try:
                out.append(q.get_nowait())
            except Exception:
                return out

    def stop(self, target: int, timed_out: bool) -> Outcome:
        s = self.shared
        counts = list(s["count"])
        firsts = [f for f, c in zip(s["first"], counts, strict=True) if c]
        lasts = [t for t, c in zip(s["last"], counts, strict=True) if c]
        seen = bytes(s["seen"])
        distinct = len(seen) - seen.count(0)
        lat = list(s["lat"][:target]) if self.spec.get("latency") else []
        s["stop"].set()
        for p in self.processes:
            p.join(10)
            if p.is_alive():
                p.kill()
                p.join(5)
        return Outcome(
            processed=sum(counts),
            distinct=distinct,
            first=min(firsts) if firsts else 0.0,
            last=max(lasts) if lasts else 0.0,
            rss_kib=list(s["rss"]),
            round_trips=int(sum(s["trips"])),
            latencies=[x for x in lat if x > 0],
            timed_out=timed_out,
            errors=self._errors(),
        )


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) by nearest rank."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[k]
