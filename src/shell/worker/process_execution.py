"""Process execution: a handler run in a child process that is killed at its deadline.

A job type registered with `execution="process"` runs each attempt in a fresh
child process (the `spawn` start method: nothing of the worker's threads,
locks or connections is inherited). The worker waits for the child's outcome
until the attempt's timeout; then it kills the child (SIGKILL) and records a
`Timeout` failure. Unlike a thread, nothing of the attempt outlives its
deadline: the child leads a process group of its own, and the whole group is
killed, so the processes the handler started go with it (but one that starts a
session of its own). The child ignores SIGINT once it runs (not while its
interpreter starts), so a Ctrl-C in the worker's terminal stops the worker
gracefully while the handler finishes, as on a thread. On Linux the child is
also killed when the worker dies (SIGKILL, a crash), so a reclaimed job never
runs beside an orphaned attempt. Once it has answered, a child gets
`EXIT_GRACE_S` to exit (a thread it left running keeps it) before it is killed.
The child is a daemon process, so a handler cannot use `multiprocessing` (it may
run commands with `subprocess`).

What it costs and needs: a process start per attempt (interpreter start-up
and the handler module's imports, tens to hundreds of milliseconds, which count
against the timeout); a handler the child can import by name (a module-level
function, not a lambda or a closure); and a picklable result. Inside the child
the context's `cancel_requested()` and `timed_out()` are always False, and its
`progress()` checks a report but keeps none, and its `inputs()` were read
before the child started: the
child is stopped from outside instead, at its deadline or, checked every
`STOP_POLL_S`, when cancellation of its job is requested.
"""

from __future__ import annotations

import atexit
import contextlib
import multiprocessing
import multiprocessing.util
import os
import signal
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

import attrs

from ...core import ErrorInfo, Failed, Outcome, cap_message
from ..context import JobContext, check_progress
from ..inputs import KnownInputs
from ..parent_death import die_with_parent
from ..registry import error_from_exception, run_handler

#: How often the worker asks whether a running child's job should stop (a cancel).
STOP_POLL_S = 0.5
#: How long a child that has answered may take to exit before it is killed.
EXIT_GRACE_S = 1.0

_SPAWN = multiprocessing.get_context("spawn")

#: The children running now, and whether this process is exiting (see `_end_all`).
_LIVE: set[Any] = set()
_LIVE_LOCK = threading.Lock()
_EXITING = threading.Event()


def run_in_process(
    handler: Callable[..., Any],
    arguments: tuple[Any, ...],
    timeout_s: float | None,
    *,
    name: str,
    stop: Callable[[], bool] | None = None,
) -> Outcome | None:
    """Run `handler(*arguments)` in a child process: its outcome, or None when
    `timeout_s` passed first and the child was killed. A child that dies without
    an answer is a retryable `process-died` failure; one killed because `stop()`
    said so (its job's cancellation was requested) a non-retryable `cancelled` one."""
    arguments = tuple(_sendable(a) for a in arguments)
    reader, writer = _SPAWN.Pipe(duplex=False)
    child = _SPAWN.Process(
        target=_child, args=(writer, handler, arguments, os.getpid()), name=name, daemon=True
    )
    child.start()
    with _LIVE_LOCK:
        _LIVE.add(child)
    if _left_behind():  # started as the process exits: `_end_all` may have missed it
        _kill(child)
        _wait_for_exit()
    writer.close()  # the child holds the only writer: its end is EOF here
    end = None if timeout_s is None else time.monotonic() + timeout_s
    try:
        while not reader.poll(_next_wait(end, stop)):
            if end is not None and time.monotonic() >= end:
                _kill(child)
                return None
            if stop is not None and stop():
                _kill(child)
                message = "its process was killed: cancellation was requested"
                return Failed(ErrorInfo("cancelled", message, retryable=False))
        try:
            outcome: Outcome = reader.recv()
        except EOFError:
            if _left_behind():
                _wait_for_exit()  # killed by `_end_all`: the attempt is left to its lease
            _end(child)
            message = f"its process ended without an answer (exit code {child.exitcode})"
            return Failed(ErrorInfo("process-died", message, retryable=True))
        except Exception as exc:  # it pickled there and does not unpickle here
            _end(child)
            message = cap_message(f"could not be read back from its process: {exc!r}")
            return Failed(ErrorInfo("invalid-result", message, retryable=False))
        _end(child)
        return outcome
    except BaseException:
        # Interrupted (a Ctrl-C in a drain on the main thread): the attempt ends with
        # its process, as a handler on the main thread ends with the interrupt.
        _kill(child)
        raise
    finally:
        with _LIVE_LOCK:
            _LIVE.discard(child)
        reader.close()


def _end_all() -> None:
    """At this process's exit, before `multiprocessing`'s own clean-up (which sends a
    child SIGTERM, then waits for it without end): kill every child running now, with
    its group. The threads that waited for them write nothing: a worker that exits
    has left those attempts to their leases."""
    _EXITING.set()
    with _LIVE_LOCK:
        children = list(_LIVE)
    for child in children:
        _kill(child)


def _left_behind() -> bool:
    """Whether this process is exiting and this thread is one it leaves behind (not
    the main thread, which may run an attempt from an exit hook of its own)."""
    return _EXITING.is_set() and threading.current_thread() is not threading.main_thread()


def _wait_for_exit() -> None:
    """Never return: this daemon thread ends with the process."""
    threading.Event().wait()


# Exit functions run last registered first: `multiprocessing.util` registered its
# own on import, above, so this one runs before it.
atexit.register(_end_all)


def _child(
    conn: Connection, handler: Callable[..., Any], arguments: tuple[Any, ...], parent: int
) -> None:
    _tie_to(parent)
    try:
        outcome = run_handler(handler, *arguments)
    except (SystemExit, KeyboardInterrupt) as exc:
        # The handler runs on the child's main thread, where these are let through:
        # here each is the handler's failure, as on a worker thread.
        outcome = Failed(error_from_exception(exc))
    try:
        conn.send(outcome)
    except Exception as exc:
        message = cap_message(f"could not be sent back from its process: {exc!r}")
        conn.send(Failed(ErrorInfo("invalid-result", message, retryable=False)))
    finally:
        conn.close()


def _next_wait(end: float | None, stop: Callable[[], bool] | None) -> float | None:
    left = None if end is None else max(0.0, end - time.monotonic())
    if stop is None:
        return left
    return STOP_POLL_S if left is None else min(STOP_POLL_S, left)


def _tie_to(parent: int) -> None:
    """In the child, first: a process group of its own (what the worker kills, and
    out of reach of the terminal's Ctrl-C), SIGINT ignored, and on Linux death with
    the worker."""
    with contextlib.suppress(OSError):
        os.setpgid(0, 0)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if not die_with_parent(parent, signal.SIGKILL):  # the worker died already
        os._exit(1)


def _end(child: Any) -> None:
    """Wait for a child that has answered (or closed its pipe) to exit; kill it when a
    thread it left running keeps it past `EXIT_GRACE_S`."""
    child.join(EXIT_GRACE_S)
    if child.exitcode is None:
        _kill(child)


def _kill(child: Any) -> None:
    # Its group, so what the handler started goes too; the child itself, in case it
    # was killed before it made its group.
    with contextlib.suppress(OSError):
        os.killpg(child.pid, signal.SIGKILL)
    child.kill()
    child.join()


def _sendable(value: Any) -> Any:
    # The context's checks are closures over this process's state: the child gets
    # the plain fields only.
    if isinstance(value, JobContext):
        return attrs.evolve(
            value,
            cancel_check=_never,
            timeout_check=_never,
            progress_sink=check_progress,
            inputs_reader=KnownInputs(value.inputs()),
        )
    return value


def _never() -> bool:
    return False
