"""How `conveyor worker` stops: the first SIGINT, SIGTERM or SIGHUP gracefully, the next
at once.

The first signal is a warm stop: no new claims, prefetched jobs handed back, running
jobs given `--grace` seconds (`workers.grace_ms`) to finish; what is still running
then stays in flight and returns with its lease (exit 3), as before. A second signal
(Ctrl-C twice, or SIGTERM after SIGINT) is a cold stop, as Celery, RQ and Dramatiq
users expect: the worker stops waiting, hands every claim it holds back to ready at
once (`Runtime.stop_now`), prints one line naming those jobs and exits 130, the
shell's code for a stop by Ctrl-C, so scripts can tell a forced stop from a clean one.

With a drain timeout (`conveyor worker --drain-timeout S`, for Kubernetes and other
supervisors that send SIGTERM and later SIGKILL), the first signal waits at most S
seconds for running jobs and then hands back what is still running, as a second
signal would, instead of leaving it to its lease: set S below the supervisor's kill
deadline (`terminationGracePeriodSeconds`) and no job waits out a lease after a
rolling deploy.
"""

from __future__ import annotations

import signal
import threading
import time
from typing import TYPE_CHECKING

from ..notices import notice
from ..ports import FileBackedJobQueue
from ..wakeup import Wakeup

if TYPE_CHECKING:
    from ..health import ProcessHealth
    from ..runtime import Runtime
    from .recycling import Recycling

#: The exit status of a stop forced by a second signal (128 + SIGINT, as shells use).
FORCED_EXIT = 130
#: What a copy of `--processes N` is sent when its supervisor dies (`parent_death`).
#: The kernel sends it again each time the copy passes to another of the dead
#: supervisor's threads, so, unlike SIGTERM, it is a graceful stop however often.
SUPERVISOR_GONE = getattr(signal, "SIGUSR2", None)
#: How often the main thread looks at what it is not woken for (a reason to recycle,
#: the drain timeout) while it waits.
TICK_S = 0.1


class StopSignals:
    """SIGINT and SIGTERM handlers that count: once asks to stop, twice insists.

    A handler only notes its signal (one list append) and wakes the waiting loop
    (`wakeup`): it takes no lock, so a signal that lands while the main thread is in
    the middle of its wait, or of the handler of the signal before, cannot deadlock it
    (`conveyor.shell.wakeup`)."""

    def __init__(self, name: str = "conveyor worker") -> None:
        self.name = name
        #: The signals heard, in order: an append is one step, so a second signal
        #: landing inside the first one's handler still counts as a second.
        self._heard: list[int] = []
        #: Woken by each signal and by the end of the graceful stop.
        self.wakeup = Wakeup()

    @property
    def graceful(self) -> bool:
        """A first signal came: stop gracefully."""
        return bool(self._heard)

    @property
    def forced(self) -> bool:
        """A second one came: stop at once."""
        return len(self._heard) > 1

    def install(self, *, supervised: bool = False) -> StopSignals:
        """The handlers; a copy of `--processes N` (`supervised`) also takes
        `SUPERVISOR_GONE` (SIGUSR2, which any other process leaves to its code, as
        a `faulthandler` registered on it)."""
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        # A hangup (a closed terminal, a dropped SSH session) is a stop too: by default
        # it would end the process at once, its running jobs left to their leases.
        signal.signal(signal.SIGHUP, self._on_signal)
        if supervised and SUPERVISOR_GONE is not None:
            signal.signal(SUPERVISOR_GONE, self._on_supervisor_gone)
        return self

    def _on_supervisor_gone(self, signum: int, _frame: object) -> None:
        if self._heard:
            return  # stopping already: this asks no more than that
        self._heard.append(signum)
        self.wakeup.wake()
        self.say("its supervisor is gone, stopping gracefully")

    def _on_signal(self, signum: int, _frame: object) -> None:
        first = not self._heard
        self._heard.append(signum)
        self.wakeup.wake()
        name = signal.Signals(signum).name
        if first:
            self.say(f"{name}, stopping gracefully (once more to stop at once)")
        else:
            self.say(f"{name} again, stopping at once")

    def say(self, line: str) -> None:
        notice(f"{self.name}: {line}")


#: The exit status of a worker process that stopped to be recycled (EX_TEMPFAIL:
#: "try again"); the supervisor starts its replacement at once.
RECYCLED_EXIT = 75
#: The exit status when jobs were still running at the end of the grace period or
#: drain timeout (left to their leases, or handed back).
UNFINISHED_EXIT = 3


def run_until_stopped(
    runtime: Runtime,
    stops: StopSignals,
    grace_s: float | None,
    drain_timeout_s: float | None = None,
    recycling: Recycling | None = None,
    watchdog: ProcessHealth | None = None,
) -> int:
    """Run `runtime`'s pools until a signal, then stop: 0 when every job finished
    within the grace period, 3 when some were left to their leases (or, with
    `drain_timeout_s`, handed back when it ran out), 130 when a second signal forced
    the stop. With `recycling`, a reason to make way for a fresh process is a
    graceful stop of its own, ending in `RECYCLED_EXIT`, and so is a SQLite database
    file deleted or replaced under the process (`FileBackedJobQueue`). A `watchdog` looks at the
    worker loops from a thread of its own, from before the first claim to the exit
    (`conveyor.shell.health`)."""
    if watchdog is not None:
        watchdog.start()
    runtime.start(job_budget=recycling)
    recycled = None
    queue = runtime.queue
    database = queue if isinstance(queue, FileBackedJobQueue) else None
    while not stops.graceful:
        if recycling is not None and (recycled := recycling.reason()) is not None:
            stops.say(f"recycling: {recycled}; stopping gracefully, a fresh process follows")
            break
        if database is not None and (recycled := database.lost_database()) is not None:
            # Left on the old file, it would claim nothing enqueued from now on: a
            # fresh process opens the database at the path.
            stops.say(f"{recycled}; stopping gracefully, to be started again on the new one")
            break
        stops.wakeup.wait(TICK_S)
    # The graceful stop waits in a thread of its own, so a second signal (or the
    # drain timeout) is acted on while it waits. With a drain timeout that stop
    # waits longer than the timeout: the hand-back, not the grace, ends it.
    grace = grace_s if drain_timeout_s is None else drain_timeout_s + 60.0
    outcome: list[bool] = []

    def stop() -> None:
        try:
            outcome.append(runtime.stop(grace))
        finally:
            stops.wakeup.wake()  # the exit follows at once, not at the next tick

    stopping = threading.Thread(target=stop, name="conveyor-stop", daemon=True)
    drain_ends = None if drain_timeout_s is None else time.monotonic() + drain_timeout_s
    stopping.start()
    while not outcome and stopping.is_alive():
        if stops.forced:
            stops.say(f"stopped at once: {runtime.stop_now().describe()}")
            # No close: handlers still running may hold connections; the exit ends them.
            return FORCED_EXIT
        if drain_ends is not None and time.monotonic() >= drain_ends:
            handed = runtime.stop_now().describe()
            stops.say(f"drain timeout of {drain_timeout_s:g} s reached: {handed}")
            return UNFINISHED_EXIT
        stops.wakeup.wait(TICK_S)
    runtime.close()
    if recycled is not None:
        return RECYCLED_EXIT
    return 0 if outcome and outcome[0] else UNFINISHED_EXIT
