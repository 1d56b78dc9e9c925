"""This process on the live-workers list: the presence beat.

While a runtime's pools run, a thread records the process's `WorkerInfo` (its
queues and the jobs it is running) every `PRESENCE_INTERVAL`; `conveyor status`
and the dashboard count a process live until `PRESENCE_TTL` after its last beat.
Stopping takes the process off the list at once. A beat that fails because the
server is away is told once for the process, through the server's shared state.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from .. import outage
from ..presence import MAX_BEAT_JOBS, Presence, WorkerInfo

if TYPE_CHECKING:
    from ..worker import WorkerPool

log = logging.getLogger("conveyor.runtime")

PRESENCE_INTERVAL = timedelta(seconds=5)
PRESENCE_TTL = timedelta(seconds=20)
#: A process not seen for this long died without leaving (killed): its entry is
#: dropped, when the process starts and every `FORGET_EVERY` beats after, by any live
#: process. Long past the TTL, so no live process is ever dropped.
FORGET_AFTER = timedelta(hours=1)
FORGET_EVERY = 120


def process_worker_id() -> str:
    """A fresh id for this process on the live list: host, pid and a random suffix."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


class PresenceBeat:
    """Beats `info()` into `presence` every `PRESENCE_INTERVAL` between `start` and
    `stop`; `server` is the state of the backend's server, shared with the process's
    other loops."""

    def __init__(
        self,
        presence: Presence,
        worker_id: str,
        info: Callable[[], WorkerInfo],
        server: outage.ConnectionState,
    ) -> None:
        self.presence, self.worker_id = presence, worker_id
        self._info, self._server = info, server
        self._bugs = outage.Throttle()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def beat(self) -> None:
        """Record this process's info once; a failure is logged, never raised."""
        try:
            self.presence.beat(self._info())
        except Exception as exc:
            # An outage is told once for the process, by whichever thread meets it first;
            # anything else once a minute (a database file the worker may not write
            # fails every beat).
            message = "could not record worker heartbeat: %s"
            outage.report(self._server, self._bugs, exc, log, message, exc)

    def forget_gone(self) -> None:
        """Drop the entries of processes gone without leaving; a failure is left to the
        next time (the beat tells an outage)."""
        forget = getattr(self.presence, "forget", None)  # a Presence of an older shape
        if forget is None:
            return
        try:
            forget(datetime.now(UTC) - FORGET_AFTER)
        except Exception:
            log.debug("could not drop the entries of workers gone", exc_info=True)

    def start(self) -> None:
        """Beat now, then every interval in a daemon thread."""
        self.beat()
        self.forget_gone()
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="conveyor-presence")
        self._thread.start()

    def _loop(self) -> None:
        beats = 0
        while not self._stop.wait(PRESENCE_INTERVAL.total_seconds()):
            self.beat()
            beats += 1
            if beats % FORGET_EVERY == 0:
                self.forget_gone()

    def stop(self) -> None:
        """Stop beating and, when it was beating, take this process off the live list."""
        self._stop.set()
        if self._thread is None:
            return
        self._thread.join(1)
        self._thread = None
        try:
            self.presence.leave(self.worker_id)
        except Exception as exc:
            if not self._server.failed(exc):
                log.warning("could not remove worker heartbeat", exc_info=True)


def worker_info(worker_id: str, pools: Sequence[WorkerPool], now: datetime) -> WorkerInfo:
    """What this process's beat records: its queues and the jobs its pools run now."""
    return WorkerInfo(
        worker_id,
        socket.gethostname(),
        os.getpid(),
        tuple(p.queue_name for p in pools),
        now,
        tuple(job for p in pools for job in p.running())[:MAX_BEAT_JOBS],
    )
