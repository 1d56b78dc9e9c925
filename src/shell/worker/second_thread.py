"""A worker's second thread: where its sync attempts run while async jobs are out.

A worker writes every outcome from its own thread. While async jobs of its run on
the event loop, a sync attempt running on that thread would hold back the writing
of every async job that finishes meanwhile, for as long as the sync handler takes.
So such an attempt runs here instead, and the worker's thread keeps writing
(`BatchRunner._run_beside_async`). One thread, kept between attempts, so that
what a handler keeps per thread (a Django database connection) is reused. A daemon
thread: like the worker's own, it never holds the process open at exit.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")

_Task = tuple["Future[Any]", Callable[..., Any], tuple[Any, ...]]


class SecondThread:
    """Runs calls one at a time on a daemon thread, started on first use."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._lock = threading.Lock()
        self._tasks: queue.SimpleQueue[_Task | None] | None = None

    def submit(self, call: Callable[..., T], *args: Any) -> Future[T]:
        """Run `call(*args)` there; its future says how it went."""
        future: Future[T] = Future()
        with self._lock:
            if self._tasks is None:
                self._tasks = queue.SimpleQueue()
                threading.Thread(
                    target=_serve, args=(self._tasks,), name=self._name, daemon=True
                ).start()
            self._tasks.put((future, call, args))
        return future

    def close(self) -> None:
        """Let the thread end once it has run what it was given; a later `submit`
        starts another."""
        with self._lock:
            if self._tasks is not None:
                self._tasks.put(None)
                self._tasks = None


def _serve(tasks: queue.SimpleQueue[_Task | None]) -> None:
    while (task := tasks.get()) is not None:
        future, call, args = task
        if not future.set_running_or_notify_cancel():
            continue
        try:
            future.set_result(call(*args))
        except BaseException as exc:  # handed to the worker's thread, which raises it
            future.set_exception(exc)
