"""The adapter contract: every behaviour Conveyor's backends share, as cases you can
run on your own `JobQueue` / `JobStore` adapter (`pip install "conveyor-jobs[contract]"`,
which brings hypothesis and pytest).

Describe your adapter as a `Subject`: a factory that makes a fresh, empty queue and
the store it finishes into, with optional hooks (another process's view, a way to
corrupt a stored payload, ...). Then either run every case at once::

    from conveyor.testing.contract import Subject, check

    def my_subject() -> Subject:
        store = MyStore()
        return Subject("mine", MyQueue(store), store)

    check(my_subject).assert_ok()  # an AssertionError naming each failed case

or give each case its own test, and add the hypothesis state machine::

    import pytest
    from conveyor.testing.contract import CASES, run_case, state_machine

    @pytest.mark.parametrize("case", list(CASES))
    def test_contract(case):
        subject = my_subject()
        try:
            run_case(case, subject)
        finally:
            subject.cleanup()

    TestMyQueueMachine = state_machine(my_subject).TestCase

A case that needs a capability your adapter does not offer (a `BatchingJobQueue`,
say, or the `corrupt` hook) raises `NotApplicable`; `check` lists those apart from
the failures. Where your backend genuinely cannot agree with a case, declare a
`Difference` (the reason, and what it asserts instead) under (case name, subject
name) and pass the table as `differences`. Conveyor's own backends (memory, SQLite,
PostgreSQL, Redis) run through these same entry points.
"""

from __future__ import annotations

from .case import Case, case
from .cases import AREAS, CASES
from .cases.asyncio_writes import ThreadWriter
from .machine import state_machine
from .runner import Report, check, run_case
from .subject import (
    ASYNC_WRITER,
    BATCHING,
    CANCELLING,
    CORRUPT,
    FINDING_MANY,
    FINISHING,
    LIMIT_REPORTING,
    LIMITED,
    PEER,
    PROMOTION_BOUND,
    SERVER_CLOCK,
    TRANSACTIONAL,
    WAKING,
    Difference,
    Differences,
    Need,
    NotApplicable,
    Subject,
)

__all__ = [
    "AREAS",
    "ASYNC_WRITER",
    "BATCHING",
    "CANCELLING",
    "CASES",
    "CORRUPT",
    "FINDING_MANY",
    "FINISHING",
    "LIMITED",
    "LIMIT_REPORTING",
    "PEER",
    "PROMOTION_BOUND",
    "SERVER_CLOCK",
    "TRANSACTIONAL",
    "WAKING",
    "Case",
    "Difference",
    "Differences",
    "Need",
    "NotApplicable",
    "Report",
    "Subject",
    "ThreadWriter",
    "case",
    "check",
    "run_case",
    "state_machine",
]
