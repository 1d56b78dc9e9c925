"""Waiting for a job's outcome: `Runtime.result` and `Runtime.aresult` (`ResultMethods`,
mixed into `Runtime`).

The wait is woken by the finish itself where the store can tell (`FinishWatchingStore`:
a condition in memory, LISTEN/NOTIFY on PostgreSQL, a commit watch on SQLite, an inbox
per process on Redis), through the same per-process listener that wakes idle workers
on SQL. The job is read again at most `FALLBACK_POLL_S` apart all the same, in case a
signal was lost; a store that cannot tell is polled, fast at first, then every
`POLL_MAX_S`.

A signal that carries the written record (`RecordCarryingWaiter`: NOTIFY on
PostgreSQL when the record fits, the inbox on Redis, the commit watch's one read of
every watched job on SQLite) settles the wait without a read of its own when the
core says it is the outcome waited for (`carried_record_settles`); any other wake-up
reads the job again.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any
from uuid import UUID

from ...core import (
    ErrorInfo,
    Job,
    JobStatus,
    Policies,
    ValidationError,
    carried_record_settles,
    thaw,
)
from .. import outage
from ..job_view import JobView, view_of_record
from ..lookup import find_job
from ..ports import (
    FinishWaiter,
    FinishWatchingStore,
    JobQueue,
    JobStore,
    PruneRememberingStore,
    RecordCarryingWaiter,
)
from ..result_errors import JobCancelled, JobFailed, JobNotFound, ResultTimeout
from ..retrying import answer_by
from ..worker.async_jobs import HANDLER_LOOP
from .reads import as_job_id

#: With a store that signals finishes: the longest a waiter goes without reading.
FALLBACK_POLL_S = 1.0
#: Without signals: the first poll, doubling up to the last.
POLL_FIRST_S = 0.01
POLL_MAX_S = 0.5
#: `result`'s default wait, in seconds.
DEFAULT_TIMEOUT_S = 60.0


class _Polling:
    """The `FinishWaiter` of a store that cannot signal: each wait sleeps, a little
    longer each time, up to `POLL_MAX_S`."""

    def __init__(self) -> None:
        self._next = POLL_FIRST_S

    def _step(self, timeout_s: float) -> float:
        step, self._next = min(self._next, timeout_s), min(self._next * 2, POLL_MAX_S)
        return max(0.0, step)

    def wait(self, timeout_s: float) -> bool:
        time.sleep(self._step(timeout_s))
        return False

    async def wait_async(self, timeout_s: float) -> bool:
        await asyncio.sleep(self._step(timeout_s))
        return False

    def close(self) -> None:
        """Nothing to release."""

    def __enter__(self) -> _Polling:
        return self

    def __exit__(self, *_: object) -> None:
        """Nothing to release."""


#: What one look at a job tells a waiter: finished?, the result, the state then, and
#: the job as seen (the core compares a carried record with it).
_Read = tuple[bool, Any, JobStatus | None, Job | None]


def _carrying(watch: FinishWaiter) -> RecordCarryingWaiter | None:
    """`watch`, when its signals may carry records. Asked once per wait, before it
    waits: a protocol check is slow, slower still in a thread that just woke."""
    return watch if isinstance(watch, RecordCarryingWaiter) else None


def _seconds(timeout: float | timedelta | None) -> float | None:
    """`timeout` in seconds: None waits for ever; anything but a number from 0 up (a
    timedelta, or seconds; NaN is no number) is refused."""
    if timeout is None:
        return None
    seconds = timeout.total_seconds() if isinstance(timeout, timedelta) else timeout
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not seconds >= 0:
        raise ValidationError.of("timeout", f"must be >= 0 seconds or None, got {timeout!r}")
    return float(seconds)


def outcome(job_id: UUID, view: JobView | None, pruned: bool | None = None) -> tuple[bool, Any]:
    """(True, the result) for a completed job; (False, None) while it is not finished.
    Raises `JobFailed` for a dead letter, `JobCancelled`, and `JobNotFound` for no view
    (`pruned` as the store knows it)."""
    if view is None:
        raise JobNotFound(job_id, pruned)
    job = view.job
    if job is None or view.state is not JobStatus.COMPLETED:
        return settled(job_id, view.state, None, None if job is None else job.last_error)
    return settled(job_id, view.state, thaw(job.result), job.last_error)


def settled(
    job_id: UUID, state: JobStatus, result: Any, last_error: ErrorInfo | None
) -> tuple[bool, Any]:
    """What a job in `state` gives its waiter: (True, `result`) when completed, (False,
    None) while it is not finished; raises `JobFailed` with `last_error` for a dead
    letter and `JobCancelled` for a cancelled job."""
    if state is JobStatus.COMPLETED:
        return True, result
    if state is JobStatus.FAILED:
        raise JobFailed(job_id, last_error)
    if state is JobStatus.CANCELLED:
        raise JobCancelled(job_id)
    return False, None


class _Away:
    """A wait's reads while the server may be away: a read that fails because it is
    unreachable is ridden out until the wait's deadline (told once for the process,
    as the workers tell it); at the deadline the wait says what it last knew."""

    def __init__(self, queue: JobQueue, job_id: UUID, limit: float | None) -> None:
        self.queue, self.job_id, self.limit = queue, job_id, limit
        self.error: Exception | None = None
        self.pause = outage.Backoff(0.05, FALLBACK_POLL_S)
        #: The store's own retries give up by then: the wait answers at its timeout.
        self.answer_by = None if limit is None else time.monotonic() + limit

    def read(self, read: Callable[[UUID], _Read], known: _Read) -> _Read:
        """`read(job_id)`, or `known` (what was last read) while the server is away."""
        try:
            with answer_by(self.answer_by):
                found = read(self.job_id)
        except Exception as exc:
            if not outage.for_queue(self.queue).failed(exc):
                raise
            self.error = exc
            return known
        self.error = None
        self.pause.reset()
        return found

    def next_wait(self, left: float) -> float:
        return min(left, self.pause.next() if self.error is not None else FALLBACK_POLL_S)

    def timed_out(self, state: JobStatus | None) -> Exception:
        """What ends a wait that ran out: the outage itself when no read ever reached
        the server, else `ResultTimeout` with the state last read."""
        if self.error is not None and state is None:
            return self.error
        timeout = ResultTimeout(self.job_id, state, self.limit or 0.0)
        timeout.__cause__ = self.error
        return timeout


#: What a wait knows before its first read.
_UNREAD: _Read = (False, None, None, None)


async def _made_in_a_thread(make: Callable[[UUID], FinishWaiter], job_id: UUID) -> FinishWaiter:
    """`make(job_id)` run in a thread. A caller cancelled meanwhile (`wait_for`, a
    request's timeout) does not stop the thread: the watch it makes is closed once
    made, or it would stay registered (on Redis, renewed) for the life of the process."""
    made = asyncio.ensure_future(asyncio.to_thread(make, job_id))
    try:
        return await asyncio.shield(made)
    except asyncio.CancelledError:
        made.add_done_callback(_close_made)
        raise


def _close_made(made: asyncio.Future[FinishWaiter]) -> None:
    if not made.cancelled() and made.exception() is None:
        made.result().close()


class ResultMethods:
    """`Runtime`'s waits for an outcome (mixed into it). Reads only."""

    queue: JobQueue
    store: JobStore
    policies: Policies

    def _read_outcome(self, job_id: UUID) -> _Read:
        # The store first: a waiter is woken by the write of the job's record, and a
        # finished record answers in one read (the queue's lookup of a running job
        # reads its cancel request and progress too).
        record = self.store.get(job_id)
        if record is not None and record.status.is_terminal:
            done, value = outcome(job_id, view_of_record(record))
            return done, value, record.status, record
        lease = timedelta(milliseconds=self.policies.lease.lease_ms)
        view = find_job(self.queue, self.store, job_id, lease)
        if view is None:
            raise self.not_found(job_id)
        done, value = outcome(job_id, view)
        return done, value, view.state, view.job

    def _carried_outcome(
        self, job_id: UUID, watch: RecordCarryingWaiter | None, seen: Job | None
    ) -> _Read | None:
        """The outcome the newest signal carried, when the core says it settles the
        wait; None when the job must be read again (or `watch` carries no records)."""
        if watch is None:
            return None
        carried = watch.take_carried()
        if carried is None or not carried_record_settles(seen, carried):
            return None
        done, value = settled(job_id, carried.status, carried.result, carried.last_error)
        return done, value, carried.status, seen

    def not_found(self, job_id: UUID) -> JobNotFound:
        """`JobNotFound` for an id no queue or store holds, saying whether retention
        pruned its record where the store keeps tombstones (`PruneRememberingStore`);
        its text is what `conveyor job show` says of such an id."""
        store = self.store
        if not isinstance(store, PruneRememberingStore):
            return JobNotFound(job_id)
        at = store.pruned_at(job_id)
        return JobNotFound(job_id, pruned=at is not None, pruned_at=at)

    def _watch(self, job_id: UUID) -> FinishWaiter:
        store = self.store
        if isinstance(store, FinishWatchingStore):
            return store.watch_finished(job_id)
        return _Polling()

    def result(
        self, job_id: UUID | str, *, timeout: float | timedelta | None = DEFAULT_TIMEOUT_S
    ) -> Any:
        """Wait up to `timeout` seconds (None: without end) for job `job_id`'s outcome
        and return its result, as plain JSON values.

        Raises `JobFailed` (a dead letter; `.error` is its last error), `JobCancelled`,
        `ResultTimeout` (the wait ran out; `.state` is the job's state then), or
        `JobNotFound` (no queue or store holds the id: never enqueued here, or its
        record already pruned). A malformed id or a negative timeout is a
        `ValidationError`. Woken by the finish itself where the backend can tell
        (docs/results.md)."""
        job_id = as_job_id(job_id)
        limit = _seconds(timeout)
        deadline = None if limit is None else time.monotonic() + limit
        away = _Away(self.queue, job_id, limit)
        # A job already finished is answered at once: only a wait that waits watches
        # (on Redis, a write of its own).
        done, value, state, seen = away.read(self._read_outcome, _UNREAD)
        if done:
            return value
        if HANDLER_LOOP.is_current():
            # The job waited for may be async and so need this very loop, which the
            # wait would block: such a wait could only run out.
            raise RuntimeError(
                "an async handler cannot wait for a job with the blocking runtime.result; "
                "use await runtime.aresult"
            )
        if deadline is not None and deadline <= time.monotonic():
            raise away.timed_out(state)
        with self._watch(job_id) as watch:
            carrying = _carrying(watch)
            # Read again now that the watch is on: a finish since the first read is seen.
            done, value, state, seen = away.read(self._read_outcome, (done, value, state, seen))
            while not done:
                left = FALLBACK_POLL_S if deadline is None else deadline - time.monotonic()
                if left <= 0:
                    raise away.timed_out(state)
                watch.wait(away.next_wait(left))
                carried = self._carried_outcome(job_id, carrying, seen)
                known = (done, value, state, seen)
                done, value, state, seen = carried or away.read(self._read_outcome, known)
            return value

    async def aresult(
        self, job_id: UUID | str, *, timeout: float | timedelta | None = DEFAULT_TIMEOUT_S
    ) -> Any:
        """`result` for asyncio code: the event loop runs on while it waits; each read
        of the job runs in a thread, as a blocking backend read must."""
        job_id = as_job_id(job_id)
        limit = _seconds(timeout)
        loop = asyncio.get_running_loop()
        deadline = None if limit is None else loop.time() + limit
        away = _Away(self.queue, job_id, limit)
        read = self._read_outcome
        done, value, state, seen = await asyncio.to_thread(away.read, read, _UNREAD)
        if done:
            return value
        if deadline is not None and deadline <= loop.time():
            raise away.timed_out(state)
        watch = await _made_in_a_thread(self._watch, job_id)
        with watch:
            carrying = _carrying(watch)
            known = (done, value, state, seen)
            done, value, state, seen = await asyncio.to_thread(away.read, read, known)
            while not done:
                left = FALLBACK_POLL_S if deadline is None else deadline - loop.time()
                if left <= 0:
                    raise away.timed_out(state)
                await watch.wait_async(away.next_wait(left))
                carried = self._carried_outcome(job_id, carrying, seen)
                if carried is None:
                    known = (done, value, state, seen)
                    carried = await asyncio.to_thread(away.read, read, known)
                done, value, state, seen = carried
            return value
