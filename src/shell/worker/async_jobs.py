"""Async handlers: `async def` handlers run on an event loop, decided like any other.

A handler is async when calling it returns an awaitable (an `async def` function,
or anything else that hands back a coroutine). The worker then does not wait for
it: it hands the awaitable to the process's event loop (one daemon thread per
process, `EventLoopThread`, started the first time it is needed) with
`asyncio.run_coroutine_threadsafe`, and claims more work while it runs, up to
`concurrency` async jobs at once.

The decision path is the sync one. The awaitable's result, or its exception,
becomes the same `Outcome` a sync handler's would (`outcome_of`,
`error_from_exception`); the worker's own thread asks the core for a decision and
has the executor carry it out, writing before the claim is released. Until then
the claim is one the worker holds, renewed by its heartbeat like a prefetched or
running one. Nothing is written from the loop's thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import os
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any
from uuid import UUID

from ...core import Failed, Job, Outcome, Succeeded, timeout_error
from ..ports import Claim
from ..registry import catching, caught, error_from_exception, outcome_of
from .attempts import Attempted, Awaiting

#: How many async jobs one worker runs at once unless configured otherwise.
DEFAULT_CONCURRENCY = 10


class EventLoopThread:
    """An event loop running forever on its own daemon thread, started on first use."""

    def __init__(self, name: str = "conveyor-asyncio") -> None:
        self._name = name
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._pid = 0

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The running loop (started now if it was not yet)."""
        with self._lock:
            # A forked child inherits the loop but not its thread: it starts its own.
            if self._loop is None or self._loop.is_closed() or self._pid != os.getpid():
                loop = asyncio.new_event_loop()
                ready = threading.Event()

                def serve() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(ready.set)
                    loop.run_forever()

                thread = threading.Thread(target=serve, name=self._name, daemon=True)
                thread.start()
                ready.wait()
                self._loop, self._thread, self._pid = loop, thread, os.getpid()
            return self._loop

    def is_current(self) -> bool:
        """True on the loop's own thread (inside a handler it runs)."""
        return self._thread is not None and threading.current_thread() is self._thread

    def submit(self, coro: Coroutine[Any, Any, Any]) -> concurrent.futures.Future[Any]:
        """Run `coro` on the loop; its future completes from the loop's thread."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)


#: The one loop of this process that async handlers run on.
HANDLER_LOOP = EventLoopThread()


def awaitable_of(outcome: Outcome) -> Awaitable[Any] | None:
    """The awaitable an async handler returned (its outcome is still to come), or None
    for an outcome already known."""
    # None first: the common result, and `isawaitable` asks an ABC for it (slow).
    if (
        isinstance(outcome, Succeeded)
        and outcome.result is not None
        and inspect.isawaitable(outcome.result)
    ):
        awaitable: Awaitable[Any] = outcome.result
        return awaitable
    return None


async def _attempt(
    awaitable: Awaitable[Any], timeout_ms: int | None
) -> tuple[Outcome, BaseException | None, bool]:
    """Await a handler's awaitable and turn whatever happens into an `Outcome`, as
    `run_handler` does for a sync handler. Past `timeout_ms` the handler is cancelled
    (unlike a thread, a coroutine can be stopped) and the attempt is a `Timeout`
    failure. Also says whether it timed out."""
    deadline = asyncio.timeout(None if timeout_ms is None else timeout_ms / 1000)
    with catching() as found:
        try:
            async with deadline:
                returned = await awaitable
        except BaseException as exc:
            if isinstance(exc, asyncio.CancelledError) and _cancelled_from_outside():
                raise
            if timeout_ms is not None and _ran_past(deadline):
                return Failed(timeout_error(timeout_ms)), None, True
            # Anything else, BaseException subclasses included, is a failed attempt, as
            # in a worker's thread: a SystemExit or KeyboardInterrupt let out of the task
            # would end the process's one event loop, and every async job with it.
            caught(exc)
            outcome: Outcome = Failed(error_from_exception(exc))
        else:
            if timeout_ms is not None and _ran_past(deadline):
                return Failed(timeout_error(timeout_ms)), None, True
            outcome = outcome_of(returned)
    return outcome, found.exception, False


def _cancelled_from_outside() -> bool:
    """Whether the task running the attempt was cancelled by someone else (the loop
    closing), rather than the handler raising `CancelledError` of its own (the
    deadline's cancel has become a `TimeoutError` by the time it is caught)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def _ran_past(deadline: asyncio.Timeout) -> bool:
    """Whether the handler ended after its deadline: cancelled at it, or it swallowed
    the cancel and went on, or it blocked the loop so that the cancel never ran. Each
    ran past its timeout, which is a Timeout failure whatever it returned or raised."""
    when = deadline.when()
    return deadline.expired() or (when is not None and asyncio.get_running_loop().time() >= when)


class AsyncJobs:
    """The async jobs one worker has running, at most `concurrency`.

    `launch` starts one; `finished` and `wait` hand back those whose handlers are
    done, for the worker's thread to decide and write. A job counts against the
    limit (and `holds` its claim) until it has been handed back.
    """

    def __init__(
        self, concurrency: int = DEFAULT_CONCURRENCY, loop: EventLoopThread = HANDLER_LOOP
    ) -> None:
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ValueError("async_concurrency must be an integer >= 1")
        self.concurrency = concurrency
        self._loop = loop
        self._changed = threading.Condition()
        #: job id -> its claim, and the future of its handler once launched
        self._running: dict[UUID, tuple[Claim, concurrent.futures.Future[Any] | None]] = {}
        #: Attempts whose handlers finished, waiting to be decided and written.
        self._done: list[Attempted] = []

    @property
    def running(self) -> int:
        """Async jobs started and not yet handed back (running or finished)."""
        with self._changed:
            return len(self._running)

    @property
    def free(self) -> int:
        """How many more async jobs may start now."""
        with self._changed:
            return self.concurrency - len(self._running)

    def holds(self, claim: Claim) -> bool:
        """True while `claim`'s job runs here or waits to be handed back."""
        with self._changed:
            held = self._running.get(claim.job.id)
            return held is not None and held[0].token == claim.token

    def launch(self, attempt: Awaiting) -> None:
        """Start awaiting `attempt`'s handler on the loop, cancelled after its timeout
        when it has one. The caller checks `free` first."""
        awaitable, claim, job = attempt.awaitable, attempt.claim, attempt.job
        if self._loop.is_current():
            # A handler on the loop is running a job to its end in a blocking call (a sync
            # enqueue in inline mode, a drain): waiting here for the loop would hang it.
            close = getattr(awaitable, "close", None)
            if close is not None:
                close()
            raise RuntimeError(
                "an async handler cannot run another async job to its end in a blocking "
                "call (a sync enqueue in inline mode, or drain); use await runtime.aenqueue"
            )
        with self._changed:
            self._running[job.id] = (claim, None)
        future = self._loop.submit(_attempt(awaitable, attempt.timeout_ms))
        with self._changed:
            self._running[job.id] = (claim, future)
        future.add_done_callback(lambda done: self._finish(claim, job, done))

    def abandon(self) -> list[Claim]:
        """Cancel every async job still out (running, or finished and not yet handed
        back) and forget it: what it returns is never written. Their claims, which the
        caller leaves to their leases."""
        with self._changed:
            out, self._running, self._done = list(self._running.values()), {}, []
        for _, future in out:
            if future is not None:
                future.cancel()
        return [claim for claim, _ in out]

    def _finish(
        self,
        claim: Claim,
        job: Job,
        future: concurrent.futures.Future[tuple[Outcome, BaseException | None, bool]],
    ) -> None:
        try:
            outcome, exception, timed_out = future.result()
        except BaseException as exc:
            # Cancelled with the loop, or a BaseException out of the handler: a failed
            # attempt like any other, for the retry policy to judge.
            outcome, exception, timed_out = Failed(error_from_exception(exc)), exc, False
        with self._changed:
            if self.holds(claim):  # not abandoned
                self._done.append(Attempted(claim, job, outcome, exception, timed_out))
            self._changed.notify_all()

    def finished(self) -> list[Attempted]:
        """Every job whose handler is done, handed back now (never blocks)."""
        with self._changed:
            return self._take()

    def wait(self, timeout_s: float) -> list[Attempted]:
        """Like `finished`, but first waits up to `timeout_s` for one to finish."""
        with self._changed:
            if not self._done and self._running:
                self._changed.wait(timeout_s)
            return self._take()

    def wait_until(self, done: Callable[[], bool], timeout_s: float) -> list[Attempted]:
        """Like `wait`, but also ends when `done()` says so (after a `nudge`)."""
        with self._changed:
            self._changed.wait_for(lambda: bool(self._done) or done(), timeout_s)
            return self._take()

    def nudge(self) -> None:
        """Wake a `wait_until` to look at its `done` again."""
        with self._changed:
            self._changed.notify_all()

    def _take(self) -> list[Attempted]:
        done, self._done = self._done, []
        for item in done:
            self._running.pop(item.job.id, None)
        return done
