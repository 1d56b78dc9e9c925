"""Telling the callers that wait for a job's outcome that it may have finished.

`Runtime.result(job_id)` waits for a job's record. Each backend hears of finished
jobs its own way (a condition in memory, LISTEN/NOTIFY or a commit watch on SQL,
an inbox per process on Redis), through one listener per process, never one per
waiter; it hands what it hears to a `FinishSignals`, which wakes the waiters of that
id, whether they wait in a thread (`FinishWatch.wait`) or on an event loop
(`FinishWatch.wait_async`).

A signal means "read the job again", not "it finished": a listener that may have
missed announcements (it reconnected, or its backend only knows that something
committed) wakes every waiter. A waiter registers before it reads the job (again, if
a first read found it unfinished), so a finish that lands between that read and the
wait still wakes it.

A signal may carry the record that was written (`announce_message`: the job's id,
then a newline, then the record's body as the store holds it), so that the waiter
can settle without reading the store (`FinishWatch.take_carried`); whether the record
ends its wait is the core's to say (`carried_record_settles`). The listener hands the
body on as it came: the woken waiter reads from it only what the outcome needs
(`codec.read_outcome`), so the listener is back on its connection at once and no
waiter waits for a whole job to be built.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from uuid import UUID

from ...core import CarriedOutcome
from ..codec import read_outcome

#: Between the job's id and the record's body in a finish message.
CARRIED_SEPARATOR = "\n"


def _settle(woken: asyncio.Future[None]) -> None:
    if not woken.done():  # a second signal, or the wait ran out meanwhile
        woken.set_result(None)


class FinishWatch:
    """One caller's watch on one job id: woken when the job may have finished.

    Use it as a context manager (it stops watching on exit), read the job, then
    `wait` (or `await wait_async`) for the next signal; read again after each.
    """

    def __init__(self, signals: FinishSignals, job_id: UUID) -> None:
        self._signals, self.job_id = signals, job_id
        self._lock = threading.Lock()
        #: Released by a signal and taken again by the wait that sees it, so a signal
        #: that came since the last wait counts at once. A bare lock, not an Event: the
        #: woken thread runs without contending for a condition's lock first.
        self._signal = threading.Lock()
        self._signal.acquire()
        self._loops: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self._carried: str | bytes | None = None

    def _fire(self, carried: str | bytes | None) -> None:
        with self._lock:
            # Only the newest signal counts: one that carries nothing means "read".
            self._carried = carried
            if self._signal.locked():  # signals are serialised here; a wait only takes
                self._signal.release()
            for loop, woken in self._loops:
                with contextlib.suppress(RuntimeError):  # a closed loop: its waiter is gone
                    loop.call_soon_threadsafe(_settle, woken)

    def wait(self, timeout_s: float) -> bool:
        """Block until a signal or `timeout_s` passes; True when signalled (a signal
        that came since the last wait counts at once)."""
        return self._signal.acquire(timeout=max(0.0, timeout_s))

    async def wait_async(self, timeout_s: float) -> bool:
        """`wait` for an event loop: the loop keeps running while it waits."""
        loop = asyncio.get_running_loop()
        # A bare future, not an Event under `wait_for`: no task of its own, so the
        # waiter resumes in the loop iteration that hears the signal.
        woken: asyncio.Future[None] = loop.create_future()
        with self._lock:
            if self._signal.acquire(blocking=False):
                return True
            self._loops.append((loop, woken))
        try:
            async with asyncio.timeout(max(0.0, timeout_s)):
                await woken
            return True
        except TimeoutError:
            return False
        finally:
            with self._lock:
                self._loops.remove((loop, woken))
                self._signal.acquire(blocking=False)

    def take_carried(self) -> CarriedOutcome | None:
        """The outcome the record the newest signal carried says, if it carried one
        that reads; the next call returns None until another signal carries one."""
        with self._lock:
            carried, self._carried = self._carried, None
        return None if carried is None else read_outcome(carried)

    def close(self) -> None:
        """Stop watching."""
        self._signals._forget(self)

    def __enter__(self) -> FinishWatch:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


class FinishSignals:
    """The waiters of one backend in this process, by job id, and the wake-ups a
    listener hands in (`announce`, `announce_all`)."""

    def __init__(self, on_watch: Callable[[], None] | None = None) -> None:
        """`on_watch` runs after each new watch is registered (a listener that sleeps
        while nobody waits starts or wakes there)."""
        self._lock = threading.Lock()
        self._watches: dict[UUID, set[FinishWatch]] = {}
        self._on_watch = on_watch

    def watch(self, job_id: UUID) -> FinishWatch:
        """A new watch on `job_id`, registered at once."""
        made = FinishWatch(self, job_id)
        with self._lock:
            self._watches.setdefault(job_id, set()).add(made)
        if self._on_watch is not None:
            self._on_watch()
        return made

    def _forget(self, watch: FinishWatch) -> None:
        with self._lock:
            found = self._watches.get(watch.job_id)
            if found is not None:
                found.discard(watch)
                if not found:
                    del self._watches[watch.job_id]

    def watched(self) -> list[UUID]:
        """The ids someone watches now."""
        with self._lock:
            return list(self._watches)

    @property
    def watching(self) -> bool:
        """True while anyone watches (a listener may stop when nobody does)."""
        with self._lock:
            return bool(self._watches)

    def announce(self, job_id: UUID | str, body: str | bytes | None = None) -> None:
        """Job `job_id` may have finished: wake its watchers, handing each the record's
        `body` when the signal carried one (an id that is not a UUID, or that nobody
        watches, is ignored)."""
        try:
            key = job_id if isinstance(job_id, UUID) else UUID(job_id)
        except ValueError:
            return
        with self._lock:
            found = list(self._watches.get(key, ()))
        for watch in found:
            watch._fire(body or None)

    def announce_message(self, message: str) -> None:
        """`announce` of a finish message: a job id, alone or followed by
        `CARRIED_SEPARATOR` and the record's body."""
        job_id, _, body = message.partition(CARRIED_SEPARATOR)
        self.announce(job_id, body or None)

    def announce_all(self) -> None:
        """Announcements may have been missed (or the backend cannot tell which job
        finished): wake every watcher, each to read its job again."""
        with self._lock:
            found = [watch for watches in self._watches.values() for watch in watches]
        for watch in found:
            watch._fire(None)
