"""A thread a worker keeps for running handlers off its own thread, one at a time.

Two runners use one: while a worker's async jobs are out, its sync attempts run on
one (`BatchRunner._run_beside_async`), so that the worker's thread goes on writing
the async jobs that finish meanwhile; and an attempt with a timeout runs on one
(`DeadlineRunner`), waited on until its deadline. Kept between calls, so that what
a handler keeps per thread (a Django database connection under `CONN_MAX_AGE`) is
reused rather than opened for every job. (`DeadlineRunner` leaves a thread whose
attempt it abandoned to that handler, closed, and takes a new one.) A daemon
thread: like the worker's own, it never holds the process open.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")

_Task = tuple["Future[Any]", Callable[..., Any], tuple[Any, ...], str]


class SecondThread:
    """Runs calls one at a time on a daemon thread, started on first use."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._lock = threading.Lock()
        self._tasks: queue.SimpleQueue[_Task | None] | None = None
        self._thread: threading.Thread | None = None
        #: Calls submitted and not yet returned.
        self._out = 0

    def submit(self, call: Callable[..., T], *args: Any, name: str | None = None) -> Future[T]:
        """Run `call(*args)` there, the thread named `name` meanwhile (for a stack dump
        or a profiler); its future says how it went."""
        running = self._submit(call, args, name, only_if_idle=False)
        assert running is not None
        return running

    def submit_if_idle(
        self, call: Callable[..., T], *, name: str | None = None
    ) -> Future[T] | None:
        """`submit(call)` when no call of it is out (in one step: none can slip in
        between the look and the submit); None otherwise."""
        return self._submit(call, (), name, only_if_idle=True)

    def _submit(
        self, call: Callable[..., T], args: tuple[Any, ...], name: str | None, *, only_if_idle: bool
    ) -> Future[T] | None:
        future: Future[T] = Future()
        with self._lock:
            if only_if_idle and self._out:
                return None
            if self._tasks is None:
                tasks: queue.SimpleQueue[_Task | None] = queue.SimpleQueue()
                thread = threading.Thread(
                    target=_serve,
                    args=(tasks, self._name, self._returned),
                    name=self._name,
                    daemon=True,
                )
                thread.start()  # before the queue is this one's: a failed start leaves none
                self._tasks, self._thread = tasks, thread
            self._out += 1
            self._tasks.put((future, call, args, name or self._name))
        return future

    def _returned(self) -> None:
        with self._lock:
            self._out -= 1

    def close(self) -> None:
        """Let the thread end once it has run what it was given; a later `submit`
        starts another."""
        with self._lock:
            if self._tasks is not None:
                self._tasks.put(None)
                self._tasks = None

    @property
    def busy(self) -> bool:
        """Whether a call given to it has not returned yet."""
        with self._lock:
            return self._out > 0

    @property
    def alive(self) -> bool:
        """Whether its thread still runs (a closed one: until its last call returns)."""
        with self._lock:
            return self._thread is not None and self._thread.is_alive()


def _serve(
    tasks: queue.SimpleQueue[_Task | None], idle_name: str, returned: Callable[[], None]
) -> None:
    while (task := tasks.get()) is not None:
        future, call, args, name = task
        if not future.set_running_or_notify_cancel():
            returned()
            continue
        threading.current_thread().name = name
        try:
            value = call(*args)
        except BaseException as exc:  # handed to the waiting thread, which raises it
            # Idle before the waiter wakes: its next call finds the thread free.
            threading.current_thread().name = idle_name
            returned()
            future.set_exception(exc)
        else:
            threading.current_thread().name = idle_name
            returned()
            future.set_result(value)
