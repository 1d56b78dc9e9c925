"""`conveyor worker --processes N`: N worker processes under one supervisor.

Python runs one thread of Python code at a time per process, so a host with several
cores runs more jobs with several worker processes. The supervisor is small on
purpose: it starts N copies of the same `conveyor worker` command (each one an
ordinary worker with its own pools, heartbeat and lease keeper), passes SIGTERM and
SIGINT on to them, and starts a fresh copy when one dies unasked, or at once when
one stopped to be recycled (`--max-jobs-per-child`, `--max-memory-per-child`). It holds no claim
and runs no job: a copy that dies leaves its claims to the lease keeper like any
crashed worker, so nothing here can lose a job.

It also watches that each copy is alive in deed (`--stall-leases`): every copy keeps
a liveness mark fresh while its worker loops progress (`conveyor.shell.liveness`),
and the supervisor SIGKILLs and replaces a copy whose mark says it stalled (a server
connection hung, a reconnect that never succeeds) or has not been touched for the
stall limit (a copy stopped by SIGSTOP, or hung where it cannot even say so). Its
claims return with their leases, as a crashed copy's do.

Each copy runs in a process group of its own, so a Ctrl-C at the terminal reaches
the supervisor only, and each copy hears every signal exactly once, from the
supervisor: the first Ctrl-C stops them gracefully, the second at once (each hands
its claims back and exits 130; see `conveyor.shell.worker.signals`). Were they in
the terminal's group, one Ctrl-C would reach each copy twice, from the terminal
and from the supervisor, and count as two.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from ...core import StallPolicy
from ..liveness import LIVENESS_FILE_ENV, read_mark
from ..notices import notice
from ..wakeup import Flag, Wakeup
from ..worker.signals import FORCED_EXIT, RECYCLED_EXIT, UNFINISHED_EXIT

log = logging.getLogger("conveyor.supervisor")

#: The environment variable that tells each copy its number (0 to N-1).
PROCESS_INDEX_ENV = "CONVEYOR_PROCESS_INDEX"
#: The environment variable that tells each copy its supervisor's pid: a copy stops
#: gracefully when the supervisor dies (`parent_death`).
SUPERVISOR_PID_ENV = "CONVEYOR_SUPERVISOR_PID"
#: The most copies one supervisor runs: more is a typo, which would start them all
#: before anything could stop it.
MAX_PROCESSES = 1024

#: The CLI's exit when its input or config was refused; the supervisor's too.
INVALID_INPUT_EXIT = 2
#: A copy's exit when its input or config was refused (sysexits' EX_CONFIG): a code
#: of its own, since 2 may come from a job (a handler's or a C library's `exit(2)`),
#: which is a crash like any other, not a reason to stop every copy.
COPY_REFUSED_EXIT = 78

#: The first wait before a copy that died is started again; it doubles up to the cap
#: while copies keep dying soon after their start, so a crash loop does not spin.
RESTART_DELAY_S = 1.0
MAX_RESTART_DELAY_S = 30.0
#: A copy that ran at least this long died of something new: restart it promptly.
STABLE_AFTER_S = 60.0
#: How often the supervisor looks at liveness marks and restart delays; a copy's
#: exit and a stop signal wake it at once.
LOOK_S = 0.2


def _port_of(port: str, index: int) -> str:
    """Copy `index`'s metrics port: P + index, and 0 (any free port) for each when P is 0."""
    return str(int(port) + index) if int(port) else "0"


def child_argv(argv: Sequence[str], index: int) -> list[str]:
    """The command line of copy `index`: `argv` without `--processes`, and with
    `--metrics-port P` as `P + index` (each copy serves its own metrics)."""
    out: list[str] = []
    items = iter(argv)
    for item in items:
        if item == "--processes":
            next(items, None)
            continue
        if item.startswith("--processes="):
            continue
        if item == "--metrics-port":
            port = next(items, None)
            out += [item, _port_of(port, index)] if port is not None else [item]
            continue
        if item.startswith("--metrics-port="):
            out.append(f"--metrics-port={_port_of(item.partition('=')[2], index)}")
            continue
        out.append(item)
    return out


class Supervisor:
    """Runs `count` copies of `conveyor <argv>` until told to stop."""

    def __init__(
        self,
        argv: Sequence[str],
        count: int,
        stall: StallPolicy | None = None,
        startup_s: float = 60.0,
    ) -> None:
        """With `stall` (enabled), a copy that stalls is replaced; one that never marks
        itself live is given `startup_s` more than the stall limit to start."""
        self.argv = list(argv)
        self.count = count
        self.stall = stall if stall is not None and stall.enabled else None
        self.startup_s = startup_s
        self._marks = Path(tempfile.mkdtemp(prefix="conveyor-liveness-")) if self.stall else None
        #: Copies killed as stalled, not yet replaced.
        self._stalled: set[int] = set()
        #: Copies replaced after they stalled.
        self.replaced = 0
        # Set in signal handlers, so lock-free flags; `_wakeup` wakes the run loop.
        self.stopping = Flag()
        #: Set by a second signal: the copies were told to stop at once.
        self.forced = Flag()
        self._wakeup = Wakeup()
        self._exit_watches: list[threading.Thread] = []
        self._children: dict[int, subprocess.Popen[bytes]] = {}
        #: The stop signals received, in order (`stop`), and how many of them each
        #: copy (by pid) was sent: the run loop passes them on (`_pass_on_stops`).
        self._stops: list[int] = []
        self._told: dict[int, int] = {}
        self._started: dict[int, float] = {}
        self._delay: dict[int, float] = {}
        #: Copies replaced after they stopped to be recycled.
        self.recycled = 0
        #: A copy's input or config was refused: everything stopped, exit 2.
        self.refused = False

    def command(self, index: int) -> list[str]:
        """The command line of copy `index`."""
        return [sys.executable, "-m", "conveyor.shell.cli", *child_argv(self.argv, index)]

    def _start(self, index: int) -> None:
        env = {**os.environ, PROCESS_INDEX_ENV: str(index), SUPERVISOR_PID_ENV: str(os.getpid())}
        if self._marks is not None:
            mark = self._marks / str(index)
            mark.unlink(missing_ok=True)  # the copy makes it once it is live
            env[LIVENESS_FILE_ENV] = str(mark)
        # A group of its own: signals come from the supervisor, once each.
        child = subprocess.Popen(self.command(index), env=env, process_group=0)
        self._children[index] = child
        self._started[index] = time.monotonic()
        if hasattr(os, "waitid"):
            watch = threading.Thread(
                target=self._wake_on_exit, args=(child.pid,), name="conveyor-child-exit",
                daemon=True,
            )  # fmt: skip
            watch.start()
            self._exit_watches = [w for w in self._exit_watches if w.is_alive()] + [watch]

    def _wake_on_exit(self, pid: int) -> None:
        """Wake the run loop when copy `pid` exits. WNOWAIT leaves the exit status to
        the loop's `poll`, so the `Popen` stays the one that reaps its process."""
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
        self._wakeup.wake()

    def stop(self, signum: int = signal.SIGTERM) -> None:
        """Ask every copy to stop with `signum`: the first asks them to stop gracefully
        (they finish or hand back their jobs), a second to stop at once. Safe in a
        signal handler: it only notes the request and wakes the run loop, which
        passes it on at once, to every copy alive then, including one it was starting
        when the signal came."""
        # The append first, one step: a second signal landing anywhere in this
        # handler still finds the first one counted, or is counted before it.
        self._stops.append(signum)
        if len(self._stops) > 1:
            self.forced.set()
        self.stopping.set()
        self._wakeup.wake()

    def _pass_on_stops(self) -> None:
        """Send each running copy the stop signals it has not been sent yet, in order.
        Only the run loop sends, so no copy hears one signal twice (a second would
        mean "at once")."""
        for child in list(self._children.values()):
            told = self._told.get(child.pid, 0)
            for signum in self._stops[told:]:
                if child.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        child.send_signal(signum)
                told += 1
            self._told[child.pid] = told

    def run(self) -> int:
        """Start the copies and watch them; after `stop`, wait for all of them. Returns
        0 when every copy stopped cleanly, else the first non-zero exit code."""
        try:
            return self._run()
        finally:
            self._close_wakeup()
            if self._marks is not None:
                shutil.rmtree(self._marks, ignore_errors=True)

    def _run(self) -> int:
        for index in range(self.count):
            if self.stopping.is_set():  # a stop while starting: start no more
                break
            self._start(index)
        due: dict[int, float] = {}
        while not self._woken_to_stop():
            now = time.monotonic()
            for index, child in list(self._children.items()):
                code = child.poll()
                if code is None:
                    self._watch(index, child, now)
                    continue
                if index in due:
                    continue
                lived = now - self._started[index]
                if index in self._stalled:
                    self._stalled.discard(index)
                    self.replaced += 1
                    self._start(index)
                    continue
                if code == COPY_REFUSED_EXIT:
                    # Its input or config was refused (the copy said why): a restart
                    # would be refused alike, for ever. Stop the rest and say so.
                    log.error(
                        "worker process %d (pid %d) refused its input or config (see "
                        "above); stopping",
                        index,
                        child.pid,
                    )
                    self.refused = True
                    self.stop(signal.SIGTERM)
                    break
                if code == RECYCLED_EXIT:
                    log.info(
                        "worker process %d (pid %d) recycled after %.0f s; starting another",
                        index,
                        child.pid,
                        lived,
                    )
                    self.recycled += 1
                    self._start(index)
                    continue
                delay = (
                    RESTART_DELAY_S
                    if lived >= STABLE_AFTER_S
                    else min(MAX_RESTART_DELAY_S, self._delay.get(index, RESTART_DELAY_S / 2) * 2)
                )
                self._delay[index] = delay
                due[index] = now + delay
                log.warning(
                    "worker process %d (pid %d) %s after %.0f s; "
                    "starting another in %.0f s (its claims return with their leases)",
                    index,
                    child.pid,
                    _ended(code),
                    lived,
                    delay,
                )
            for index, at in list(due.items()):
                if now >= at and not self.stopping.is_set():
                    del due[index]
                    self._start(index)
        # A copy killed as stalled just before the stop was replaced in all but the
        # restart: it stopped as cleanly as the rest.
        replaced = set(self._stalled)
        self._stalled.clear()
        # A copy that had exited before the stop and waited for its restart was told
        # then (its exit code, its claims left to their leases): not this stop's.
        crashed_before = set(due)
        # Still watched while they stop: a copy stopped by SIGSTOP would never act on
        # the signal, and one that stalls while draining would never end its drain.
        self._pass_on_stops()
        while running := [i for i, c in self._children.items() if c.poll() is None]:
            self._pass_on_stops()
            now = time.monotonic()
            for index in running:
                self._watch(index, self._children[index], now)
            self._wakeup.wait(LOOK_S)
        codes = [
            0 if index in replaced or index in crashed_before else _as_stopped(child.wait())
            for index, child in self._children.items()
        ]
        if self.forced.is_set():
            return FORCED_EXIT
        if self.refused:
            return INVALID_INPUT_EXIT
        # A copy that was recycling when the stop came stopped as cleanly as the rest;
        # one killed stalled while stopping left its jobs to their leases.
        if self._stalled:
            return UNFINISHED_EXIT
        return next((code for code in codes if code not in (0, RECYCLED_EXIT)), 0)

    def _close_wakeup(self) -> None:
        """Close the wake-up pipe once no exit watch can write to it (every copy has
        exited by now, so each watch is ending); a watch still alive keeps it open,
        lest its write land in a file that took the pipe's number."""
        for watch in self._exit_watches:
            watch.join(1.0)
        if not any(watch.is_alive() for watch in self._exit_watches):
            self._wakeup.close()

    def _woken_to_stop(self) -> bool:
        """Sleep until a copy exits, a signal comes or `LOOK_S` passes; True once a
        stop was asked for."""
        self._wakeup.wait(LOOK_S)
        return self.stopping.is_set()

    def _watch(self, index: int, child: subprocess.Popen[bytes], now: float) -> None:
        """SIGKILL copy `index` when its liveness mark says it stalled, or is older
        than the stall limit (not yet made: the limit plus the start-up allowance)."""
        if self.stall is None or self._marks is None or index in self._stalled:
            return
        limit = self.stall.limit_s
        reading = read_mark(self._marks / str(index))
        if reading is None:
            lived = now - self._started[index]
            if lived <= limit + self.startup_s:
                return
            why = f"not marked live in {lived:.0f} s since its start"
        elif reading.reason:
            why = reading.reason
        elif reading.age_s > limit:
            why = f"no sign of life for {reading.age_s:.0f} s (stopped, or hung)"
        else:
            return
        log.warning(
            "worker process %d (pid %d) %s; killing it%s (its claims return with their "
            "leases)",
            index,
            child.pid,
            why,
            "" if self.stopping.is_set() else " and starting another",
        )
        self._stalled.add(index)
        # Its own group: a process pool of its handlers goes with it.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGKILL)


def _ended(code: int) -> str:
    """How a copy ended, as a log line says it: by a signal, named, or its exit code."""
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


def _as_stopped(code: int) -> int:
    """A copy's exit code once the copies were told to stop: one that ended by the
    SIGTERM it was sent had not yet set up its signal handlers, so it had claimed
    nothing, and stopped as cleanly as one that finished its jobs."""
    return 0 if code == -signal.SIGTERM else code


def supervise(
    argv: Sequence[str], count: int, stall: StallPolicy | None = None, startup_s: float = 60.0
) -> int:
    """Run `count` worker processes for the `conveyor` command line `argv` until
    SIGTERM or SIGINT, which each copy receives in turn (a second one stops them at
    once). Returns the exit code: the first non-zero one of a copy (130 when a copy
    was stopped by force), else 0. A copy that stalls (`stall`) is replaced."""
    supervisor = Supervisor(argv, count, stall, startup_s)
    received: list[int] = []

    def on_signal(signum: int, _frame: object) -> None:
        received.append(signum)
        name = signal.Signals(signum).name
        how = (
            "again, stopping them at once"
            if supervisor.stopping.is_set()
            else "stopping them gracefully (once more to stop at once)"
        )
        notice(f"conveyor worker: {name}, {count} processes: {how}")
        # The first stop (a Ctrl-C, a hangup) reaches the copies as SIGTERM: one that
        # has not set up its handlers yet then ends by it, having claimed nothing, and
        # counts as stopped cleanly (`_as_stopped`); a SIGINT would end it with a
        # KeyboardInterrupt traceback and an exit code of its own.
        # (The first the operator sent: a stop of the supervisor's own, after a copy
        # refused its input, does not count.)
        first = len(received) == 1
        supervisor.stop(signal.SIGTERM if first or signum == signal.SIGHUP else signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    # A hangup (a closed terminal) would end the supervisor at once and leave its
    # copies, each in a group of its own, running with nobody to watch or stop them.
    signal.signal(signal.SIGHUP, on_signal)
    notice(f"conveyor worker: starting {count} process{'es' if count != 1 else ''}")
    return supervisor.run()
