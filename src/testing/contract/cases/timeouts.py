"""Cases of attempt timeouts: a job's own timeout is part of the job, so every backend
keeps it through each write a timed-out attempt leads to (the retry, the dead
letter).
"""

from __future__ import annotations

from ....core import DeadLetter, Failed, Policies, Retry, RetryPolicy, decide, start
from ....core.timeouts import timeout_error
from ....shell.ports import Claim
from ..case import case
from ..subject import Subject
from ..support import T0, make_job

AT_ONCE = Policies(retry=RetryPolicy(initial_delay_ms=0, jitter=False))


@case()
def a_timed_out_job_keeps_its_timeout_through_retry_and_dead_letter(s: Subject) -> None:
    job = make_job(max_retries=1, timeout=1.25)
    s.queue.enqueue(job)
    executor = s.executor(s.queue, s.store)
    expected = (Retry, DeadLetter)
    for attempt, kind in enumerate(expected, start=1):
        claim = s.queue.dequeue("default", T0)
        assert isinstance(claim, Claim) and claim.job.timeout_ms == 1250, attempt
        running = start(claim.job, T0).unwrap()
        decision = decide(running, Failed(timeout_error(1250)), T0, AT_ONCE, 0.5)
        assert isinstance(decision, kind)
        assert executor.carry_out(claim, decision)
    [dead] = s.store.list_dead()
    assert dead.id == job.id and dead.timeout_ms == 1250
    assert dead.last_error is not None and dead.last_error.type == "Timeout"


TIMEOUT_CASES = (a_timed_out_job_keeps_its_timeout_through_retry_and_dead_letter,)
