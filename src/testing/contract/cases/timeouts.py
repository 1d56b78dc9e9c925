"""Sweep cases for attempt timeouts: a job's own timeout is part of the job, so every
backend keeps it through each write a timed-out attempt leads to (the retry, the
dead letter). Run on every backend through `test_adapter_surface.py`.
"""

from __future__ import annotations

from backends import Backend
from conveyor.core import DeadLetter, Failed, Policies, Retry, RetryPolicy, decide, start
from conveyor.core.timeouts import timeout_error
from conveyor.shell.executor import Executor
from conveyor.shell.ports import Claim
from helpers import T0, make_job

AT_ONCE = Policies(retry=RetryPolicy(initial_delay_ms=0, jitter=False))


def a_timed_out_job_keeps_its_timeout_through_retry_and_dead_letter(b: Backend) -> None:
    job = make_job(max_retries=1, timeout=1.25)
    b.queue.enqueue(job)
    executor = Executor(b.queue, b.store)
    expected = (Retry, DeadLetter)
    for attempt, kind in enumerate(expected, start=1):
        claim = b.queue.dequeue("default", T0)
        assert isinstance(claim, Claim) and claim.job.timeout_ms == 1250, attempt
        running = start(claim.job, T0).unwrap()
        decision = decide(running, Failed(timeout_error(1250)), T0, AT_ONCE, 0.5)
        assert isinstance(decision, kind)
        assert executor.carry_out(claim, decision)
    [dead] = b.store.list_dead()
    assert dead.id == job.id and dead.timeout_ms == 1250
    assert dead.last_error is not None and dead.last_error.type == "Timeout"


TIMEOUT_CASES = (a_timed_out_job_keeps_its_timeout_through_retry_and_dead_letter,)
