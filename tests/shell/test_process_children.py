"""What a handler run with `execution="process"` leaves behind: nothing. A result
that cannot be read back is one failed attempt, not a job rerun at each lease; a
thread the handler left running does not keep the worker waiting; the processes a
handler started die with it at its deadline; a Ctrl-C in the worker's terminal does
not reach the handler; and a worker killed outright takes its child with it."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import process_handlers
import pytest
from conveyor.core import Policies, RetryPolicy
from conveyor.shell.adapters.memory import MemoryJobQueue, MemoryJobStore
from conveyor.shell.registry import Registry
from conveyor.shell.worker.loop import Worker
from helpers import make_job, process_alive

AT_ONCE = Policies(retry=RetryPolicy(initial_delay_ms=0, jitter=False))
HERE = Path(__file__).resolve().parent


@pytest.fixture
def worker_of() -> Iterator[Callable[..., tuple[Worker, MemoryJobStore]]]:
    def make(job_type: str, handler: Any) -> tuple[Worker, MemoryJobStore]:
        registry = Registry()
        registry.register(job_type, handler, execution="process")
        store = MemoryJobStore()
        return Worker(MemoryJobQueue(store), store, registry, policies=AT_ONCE), store

    yield make
    assert not multiprocessing.active_children(), "a handler's process outlived its test"


def _wait_for(check: Callable[[], bool], timeout_s: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_a_result_that_cannot_be_read_back_is_one_failed_attempt(
    worker_of: Callable[..., tuple[Worker, MemoryJobStore]], tmp_path: Path
) -> None:
    # It escaped the worker's round: the job stayed running, ran again at each lease
    # (four times with max_retries=0) and died as a lease-expired poison pill.
    worker, store = worker_of("odd", process_handlers.returns_unreadable)
    runs = tmp_path / "runs"
    job = make_job("odd", now=datetime.now(UTC), args={"runs": str(runs)}, max_retries=3)
    worker.queue.enqueue(job)
    assert worker.drain() == 1
    error = store.get(job.id).last_error
    assert error is not None and error.type == "invalid-result" and not error.retryable
    assert "could not be read back from its process" in error.message
    assert "Unreadable.__init__()" in error.message
    assert len(runs.read_text().splitlines()) == 1


def test_a_thread_the_handler_left_running_does_not_hold_the_worker(
    worker_of: Callable[..., tuple[Worker, MemoryJobStore]],
) -> None:
    # The child could not exit while a thread of its own ran: the worker waited for
    # it without end, and the next job never started.
    worker, store = worker_of("threads", process_handlers.leaves_a_thread)
    job = make_job("threads", now=datetime.now(UTC), timeout=30)
    worker.queue.enqueue(job)
    finished: list[int] = []
    drain = threading.Thread(target=lambda: finished.append(worker.drain()), daemon=True)
    drain.start()
    drain.join(20)
    assert finished == [1], "the worker still waits for the child"
    assert store.get(job.id).result == "answered"


def test_the_processes_a_handler_started_die_with_it_at_its_deadline(
    worker_of: Callable[..., tuple[Worker, MemoryJobStore]], tmp_path: Path
) -> None:
    worker, store = worker_of("spawns", process_handlers.starts_a_process_then_hangs)
    pid_file = tmp_path / "pid"
    job = make_job(
        "spawns",
        now=datetime.now(UTC),
        args={"pid_file": str(pid_file)},
        timeout=3.0,
        max_retries=0,
    )
    worker.queue.enqueue(job)
    assert worker.drain() == 1
    assert store.get(job.id).last_error.type == "Timeout"
    assert pid_file.exists(), "the handler never started its process"
    assert _wait_for(lambda: not process_alive(int(pid_file.read_text())), 5), (
        "the process the handler started outlived its deadline"
    )


def test_a_ctrl_c_for_the_worker_does_not_reach_the_handler(
    worker_of: Callable[..., tuple[Worker, MemoryJobStore]], tmp_path: Path
) -> None:
    # The terminal sends SIGINT to the worker's whole process group: the child died
    # of KeyboardInterrupt, and the attempt was "process-died", where a thread's
    # handler finishes while the worker stops gracefully.
    worker, store = worker_of("sleeps", process_handlers.writes_pid_then_sleeps)
    pid_file = tmp_path / "pid"
    args = {"pid_file": str(pid_file), "seconds": 2}
    job = make_job("sleeps", now=datetime.now(UTC), args=args, timeout=30)
    worker.queue.enqueue(job)
    drain = threading.Thread(target=worker.drain, daemon=True)
    drain.start()
    assert _wait_for(pid_file.exists), "the handler never started"
    assert _wait_for(lambda: len(pid_file.read_text().split()) == 2)
    pid, group = map(int, pid_file.read_text().split())
    assert group == pid != os.getpgid(0), "the child leads a group apart from the worker's"
    os.kill(pid, signal.SIGINT)
    drain.join(30)
    found = store.get(job.id)
    assert found.last_error is None and found.result == "finished"


WORKER = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, sys.argv[2])
    import process_handlers
    from conveyor.shell.worker.process_execution import run_in_process

    args = {"pid_file": sys.argv[1], "seconds": 120}
    run_in_process(process_handlers.writes_pid_then_sleeps, (args,), 300, name="orphan-test")
    """
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a parent-death signal is Linux's")
def test_a_worker_killed_outright_takes_its_handlers_process_with_it(tmp_path: Path) -> None:
    # The child ran on (a daemon flag acts only on a clean exit), so the job, reclaimed
    # after the lease, ran twice at once.
    pid_file = tmp_path / "pid"
    worker = subprocess.Popen([sys.executable, "-c", WORKER, str(pid_file), str(HERE)])
    try:
        assert _wait_for(lambda: pid_file.exists() and len(pid_file.read_text().split()) == 2)
        child = int(pid_file.read_text().split()[0])
        assert process_alive(child)
    finally:
        worker.kill()
        worker.wait()
    assert _wait_for(lambda: not process_alive(child), 10), "the handler's process outlived its worker"


EXITING = textwrap.dedent(
    """
    import sys, threading, time
    sys.path.insert(0, sys.argv[2])
    import process_handlers
    from conveyor.shell.worker.process_execution import run_in_process

    args = {"pid_file": sys.argv[1], "ignore_sigterm": sys.argv[3] == "deaf"}
    def attempt():
        outcome = run_in_process(
            process_handlers.starts_a_process_then_sleeps, (args,), 300, name="exit-test"
        )
        print("outcome:", outcome, flush=True)
    threading.Thread(target=attempt, daemon=True).start()  # as a worker's thread
    while len(open(sys.argv[1]).read().split()) < 2 if __import__("os").path.exists(sys.argv[1]) else True:
        time.sleep(0.05)
    sys.exit(0)  # the worker exits, its grace over: the attempt is left to its lease
    """
)


@pytest.mark.parametrize("handler", ["plain", "deaf"])
def test_a_worker_that_exits_mid_attempt_kills_its_processes_and_writes_nothing(
    tmp_path: Path, handler: str
) -> None:
    # At exit, multiprocessing sent the child SIGTERM and waited for it: a child deaf to
    # SIGTERM held the exit until the attempt's timeout, and one that died of it was
    # written as a retryable "process-died" (a retry spent, or a dead letter) after the
    # worker had left the job to its lease. The handler's own process outlived both.
    pid_file = tmp_path / "pid"
    worker = subprocess.Popen(
        [sys.executable, "-c", EXITING, str(pid_file), str(HERE), handler],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        out, _ = worker.communicate(timeout=60)
    finally:
        worker.kill()
    assert worker.returncode == 0
    assert "outcome:" not in out, "an outcome was reported for an attempt left to its lease"
    child, grandchild = map(int, pid_file.read_text().split())
    assert _wait_for(lambda: not process_alive(child), 10), "the handler's process outlived it"
    assert _wait_for(lambda: not process_alive(grandchild), 10), "so did the one it started"


def test_a_keyboard_interrupt_the_handler_raises_is_its_failure_as_on_a_thread(
    worker_of: Callable[..., tuple[Worker, MemoryJobStore]],
) -> None:
    # The child died of it: a "process-died" failure and a traceback on the worker's
    # stderr, where a thread records the handler's KeyboardInterrupt.
    worker, store = worker_of("interrupts", process_handlers.interrupts)
    job = make_job("interrupts", now=datetime.now(UTC), max_retries=0)
    worker.queue.enqueue(job)
    assert worker.drain() == 1
    error = store.get(job.id).last_error
    assert error is not None and error.type == "KeyboardInterrupt", error
    assert "from the handler" in error.message


GUARDED = textwrap.dedent(
    """
    from conveyor.core import ValidationError
    from conveyor.shell.registry import Registry

    def at_module_level(args):
        return 1

    for _ in range(1):  # bound at module level too, in a loop's body
        def in_a_loop(args):
            return 3

    class Doubler:
        def __call__(self, args):
            return 4

    if __name__ == "__main__":
        def under_the_guard(args):
            return 2

        class Guarded:
            def __call__(self, args):
                return 5

        in_a_loop = in_a_loop  # bound here as well: the child has it all the same
        registry = Registry()
        registry.register("fine", at_module_level, execution="process")
        registry.register("looped", in_a_loop, execution="process")
        registry.register("instance", Doubler(), execution="process")
        for job_type, handler in [("lost", under_the_guard), ("lost-instance", Guarded())]:
            try:
                registry.register(job_type, handler, execution="process")
            except ValidationError as refused:
                print("refused:", refused)
            else:
                print("accepted")
    """
)


def test_a_handler_defined_under_the_main_guard_is_refused_for_a_process(tmp_path: Path) -> None:
    # Accepted, then every attempt died unanswered ("process-died", retried) while the
    # child's AttributeError went to the worker's stderr.
    script = tmp_path / "app.py"
    script.write_text(GUARDED)
    ran = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60, check=True
    )
    lost, lost_instance = ran.stdout.splitlines()
    assert lost.startswith("refused: handler: for 'lost' is defined under"), ran.stdout
    assert "which a process never runs" in lost
    # A callable instance is sent by its class's name, so its class is what must be found.
    assert lost_instance.startswith("refused: handler: for 'lost-instance' is defined under")


PACKAGE_MAIN = textwrap.dedent(
    """
    from conveyor.core import ValidationError
    from conveyor.shell.registry import Registry

    def double(args):
        return args["n"] * 2

    try:
        Registry().register("double", double, execution="process")
    except ValidationError as refused:
        print("refused:", refused)
    else:
        print("accepted")
    """
)


def test_a_handler_of_a_packages_main_module_is_refused_for_a_process(tmp_path: Path) -> None:
    # `python -m app` runs app/__main__.py, which a spawned child never imports: the
    # handler was accepted and every attempt died unanswered ("process-died").
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "__init__.py").write_text("")
    (tmp_path / "app" / "__main__.py").write_text(PACKAGE_MAIN)
    ran = subprocess.run(
        [sys.executable, "-m", "app"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        cwd=tmp_path,
    )
    assert ran.stdout.startswith("refused: handler: for 'double' is defined in a `__main__.py`")
    assert "move it to a module" in ran.stdout


INTERRUPTED = textwrap.dedent(
    """
    import os, signal, sys, threading, time
    sys.path.insert(0, sys.argv[2])
    import process_handlers
    from conveyor.shell.worker.process_execution import run_in_process

    pid_file = sys.argv[1]
    def ctrl_c_once_started():
        while not (os.path.exists(pid_file) and open(pid_file).read()):
            time.sleep(0.02)
        os.kill(os.getpid(), signal.SIGINT)
    threading.Thread(target=ctrl_c_once_started, daemon=True).start()
    try:  # a drain on the main thread
        run_in_process(
            process_handlers.deaf_sleeper, ({"pid_file": pid_file, "seconds": 120},), 300,
            name="interrupted",
        )
    except KeyboardInterrupt:
        print("interrupted", flush=True)
    """
)


def test_a_ctrl_c_in_a_drain_on_the_main_thread_ends_the_attempts_process(
    tmp_path: Path,
) -> None:
    # The child was dropped from the processes to end at exit, left running, and the
    # exit then waited for it (deaf to the SIGTERM multiprocessing sends) until its end.
    pid_file = tmp_path / "pid"
    ran = subprocess.run(
        [sys.executable, "-c", INTERRUPTED, str(pid_file), str(HERE)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ran.stdout.strip() == "interrupted", ran.stderr
    assert _wait_for(lambda: not process_alive(int(pid_file.read_text())), 10)


AT_EXIT = textwrap.dedent(
    """
    import atexit, sys
    sys.path.insert(0, sys.argv[1])

    def last_jobs():
        from conveyor.shell.worker.process_execution import run_in_process
        import process_handlers
        print("outcome:", run_in_process(process_handlers.double, ({"n": 21},), 30, name="x"))

    atexit.register(last_jobs)  # registered before the module is imported
    import conveyor.shell.worker.process_execution  # registers its own clean-up after
    """
)


def test_an_attempt_run_by_an_exit_hook_on_the_main_thread_runs_to_its_end(
    tmp_path: Path,
) -> None:
    # The exit clean-up had run first: the attempt took itself for one left behind,
    # killed its child and blocked the main thread for good.
    ran = subprocess.run(
        [sys.executable, "-c", AT_EXIT, str(HERE)], capture_output=True, text=True, timeout=60
    )
    assert "outcome: Succeeded(result=42" in ran.stdout, ran.stdout + ran.stderr
