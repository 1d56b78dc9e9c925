"""How a worker process and the supervisor hear their stop signals, in-process.

A signal handler runs in the main thread between two of its lines, wherever that
thread is, inside a lock's critical section included. These tests deliver the
signal at every line the waiting loop runs (a trace function calls the handler
there, as the interpreter would) and require that each stop ends: a handler that
needs a lock its own thread holds would hang instead.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

import pytest
from conveyor.shell.cli import supervisor as supervision
from conveyor.shell.worker import signals
from conveyor.shell.worker.signals import FORCED_EXIT, StopSignals

#: A hung stop shows as a thread still running after this long.
HUNG_S = 5.0


def signalled_at_line(
    run: Callable[[], Any],
    signal_at: dict[int, Callable[[], None]],
    counting_from: Callable[[], bool] = lambda: True,
) -> tuple[bool, list[Any]]:
    """Run `run` in a thread of its own, calling `signal_at[n]` (a signal handler) when
    that thread is about to run its n-th line (counted once `counting_from()` holds).
    Whether it ended within `HUNG_S`, and what it returned."""
    lines = 0
    got: list[Any] = []

    def trace(frame: FrameType, event: str, _arg: object) -> Any:
        nonlocal lines
        if event == "line" and (lines or counting_from()):
            lines += 1
            handler = signal_at.pop(lines, None)
            if handler is not None:
                handler()
        return trace

    def target() -> None:
        sys.settrace(trace)
        try:
            got.append(run())
        finally:
            sys.settrace(None)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(HUNG_S)
    return not thread.is_alive(), got


class FakeRuntime:
    """What `run_until_stopped` drives: pools that start, stop and close at once."""

    def __init__(self, stop_s: float = 0.0) -> None:
        self.stop_s = stop_s
        self.queue = None  # no database file to lose
        self.stopped_now = False
        self._handed_back = threading.Event()

    def start(self, *, job_budget: object = None) -> FakeRuntime:
        return self

    def stop(self, grace: float | None) -> bool:
        # Waits `stop_s` for its jobs, unless they are handed back first.
        return not self._handed_back.wait(self.stop_s)

    def stop_now(self) -> Any:
        self.stopped_now = True
        self._handed_back.set()
        return type("Handed", (), {"describe": lambda _self: "nothing held"})()

    def close(self) -> None:
        """Nothing to release."""


@pytest.fixture
def stops(monkeypatch: pytest.MonkeyPatch) -> Iterator[StopSignals]:
    # Many loop turns in few lines: the signal meets every line of a wait quickly.
    monkeypatch.setattr(signals, "TICK_S", 0.001)
    made = StopSignals(name="test worker")
    yield made
    # The graceful stop's thread wakes the loop as it ends: closed only after it.
    for thread in threading.enumerate():
        if thread.name == "conveyor-stop":
            thread.join(HUNG_S)
    made.wakeup.close()


@pytest.mark.parametrize("line", range(1, 160))
def test_a_first_signal_at_any_line_of_the_workers_wait_stops_it_gracefully(
    stops: StopSignals, line: int
) -> None:
    runtime = FakeRuntime()
    ended, got = signalled_at_line(
        lambda: signals.run_until_stopped(runtime, stops, grace_s=1.0),  # type: ignore[arg-type]
        {line: lambda: stops._on_signal(signal.SIGTERM, None)},
    )
    assert ended, f"a SIGTERM at line {line} of the wait hung the worker"
    assert got == [0] and not runtime.stopped_now


@pytest.mark.parametrize("line", range(1, 160))
def test_a_second_signal_at_any_line_of_the_graceful_stop_stops_it_at_once(
    stops: StopSignals, line: int
) -> None:
    runtime = FakeRuntime(stop_s=2.0)  # a stop that waits for its jobs
    ended, got = signalled_at_line(
        lambda: signals.run_until_stopped(runtime, stops, grace_s=1.0),  # type: ignore[arg-type]
        {
            1: lambda: stops._on_signal(signal.SIGTERM, None),
            line + 1: lambda: stops._on_signal(signal.SIGINT, None),
        },
    )
    assert ended, f"a second signal at line {line} of the stop hung the worker"
    assert got == [FORCED_EXIT] and runtime.stopped_now



class Sleepers(supervision.Supervisor):
    """A supervisor of copies that sleep until SIGTERM, each a `subprocess` of a bare
    interpreter (what they run is not what is tested here)."""

    def command(self, index: int) -> list[str]:
        return [sys.executable, "-c", SLEEPER]


SLEEPER = "import signal, sys, time\nsignal.signal(signal.SIGTERM, lambda *_: sys.exit(0))\ntime.sleep(60)\n"


@pytest.fixture
def sleepers() -> Iterator[Sleepers]:
    supervisor = Sleepers(["worker"], count=1)
    yield supervisor
    for child in supervisor._children.values():
        if isinstance(child, subprocess.Popen) and child.poll() is None:
            child.kill()  # a hung supervisor's copy: not left behind


@pytest.mark.parametrize("line", range(1, 100))
def test_a_signal_at_any_line_of_the_supervisors_watch_stops_its_copies(
    sleepers: Sleepers, line: int
) -> None:
    supervisor = sleepers
    ended, got = signalled_at_line(
        supervisor.run,
        {line: lambda: supervisor.stop(signal.SIGTERM)},
        # Counted once the copy is started: a process's start is the same either way.
        counting_from=lambda: bool(supervisor._children),
    )
    assert ended, f"a SIGTERM at line {line} of the watch hung the supervisor"
    assert got == [0]
    assert all(child.poll() is not None for child in supervisor._children.values())




def test_a_second_signal_at_any_line_of_the_first_ones_handler_is_heard() -> None:
    # Line after line until the handler ends before the line: every line it runs.
    line = 0
    while True:
        line += 1
        stops = StopSignals(name="test worker")
        signal_at = {line: lambda s=stops: s._on_signal(signal.SIGINT, None)}
        ended, _ = signalled_at_line(lambda s=stops: s._on_signal(signal.SIGTERM, None), signal_at)
        stops.wakeup.close()
        assert ended, f"a second signal at line {line} of the first one's handler hung"
        if signal_at:  # the handler ran fewer lines: all were tried
            break
        assert stops.graceful and stops.forced, f"the second signal at line {line} was lost"
    assert line > 3


def test_a_second_signal_at_any_line_of_the_supervisors_first_handler_is_heard() -> None:
    line = 0
    while True:
        line += 1
        supervisor = supervision.Supervisor(["worker"], count=1)
        signal_at = {line: lambda s=supervisor: s.stop(signal.SIGINT)}
        ended, _ = signalled_at_line(lambda s=supervisor: s.stop(signal.SIGTERM), signal_at)
        supervisor._close_wakeup()
        assert ended, f"a second signal at line {line} of the first one's handler hung"
        if signal_at:  # the handler ran fewer lines: all were tried
            break
        assert supervisor.stopping.is_set() and supervisor.forced.is_set(), f"line {line}"
        assert sorted(supervisor._stops) == sorted([signal.SIGTERM, signal.SIGINT])
    assert line > 3
