"""One contract, every backend: the shipped adapter contract
(`conveyor.testing.contract`) run on memory, SQLite, PostgreSQL and Redis.

Every case lives once, in the contract's `cases` package; this module only runs them
through the contract's own entry point (`run_case`), as a user runs them on their
adapter. Where a backend genuinely cannot agree, the pair is listed in
`KNOWN_DIFFERENCES` with its reason and the documented behaviour is asserted instead;
nothing is dropped, and nothing is skipped: a case that finds a capability or hook
missing (`NotApplicable`) fails here.

**A new `JobQueue` operation gets a case in the contract on the way in.**

The contract's hypothesis state machine runs on every backend too: memory in
`test_memory_state_machine.py`, SQLite and PostgreSQL in `test_sql_state_machine.py`,
Redis in `test_redis_state_machine.py`.
"""

from __future__ import annotations

import pytest
from backends import BACKENDS, HOW_TO_PROVIDE, Backend, make_backend
from conveyor.core import Complete, Policies, Succeeded, decide, reclaim_cutoff, start
from conveyor.shell.adapters.memory import MemoryJobQueue, MemoryJobStore
from conveyor.shell.executor import Executor
from conveyor.shell.ports import Claim, is_transactional
from conveyor.testing.contract import CASES, Difference, Subject, run_case
from conveyor.testing.contract.cases.lease import one_clock
from conveyor.testing.contract.support import LATER, T0, claim, make_job


def _not_transactional(s: Subject) -> None:
    assert not is_transactional(s.queue)
    assert not hasattr(s.queue, "enqueue_in_tx")


def _no_other_process(s: Subject) -> None:
    assert s.peer is None
    s.queue.enqueue(make_job())
    claim(s)
    # A second adapter (what another process would have) sees none of this one's claims.
    assert MemoryJobQueue().abandoned(reclaim_cutoff(LATER, 1000)) == []
    # Within its own process it still honours the lease.
    assert len(s.queue.abandoned(reclaim_cutoff(LATER, 1000))) == 1


def _stores_values(s: Subject) -> None:
    assert s.corrupt is None
    job = make_job()
    s.queue.enqueue(job)
    got = s.queue.dequeue("default", T0)
    assert isinstance(got, Claim) and got.job == job


NOT_TRANSACTIONAL = Difference("an outbox needs the queue in the caller's database", _not_transactional)
STORES_VALUES = Difference(
    "memory stores Job values, never bytes, so nothing fails to decode", _stores_values
)
ONE_CLOCK = Difference("one host, one clock: leases run on this process's clock", one_clock)

#: (case, backend) -> why they cannot agree, and what is asserted instead
KNOWN_DIFFERENCES: dict[tuple[str, str], Difference] = {
    ("transactional_enqueue", "memory"): NOT_TRANSACTIONAL,
    ("transactional_enqueue", "redis"): NOT_TRANSACTIONAL,
    ("reclaim_from_another_process", "memory"): Difference(
        "memory has no in-flight list shared across processes", _no_other_process
    ),
    ("an_undecodable_payload_is_a_bad_claim", "memory"): STORES_VALUES,
    ("an_undecodable_claim_is_dead_lettered_by_a_guarded_finish", "memory"): STORES_VALUES,
    ("the_lease_server_clock_is_checked", "memory"): ONE_CLOCK,
    ("the_lease_server_clock_is_checked", "sqlite"): ONE_CLOCK,
}


@pytest.mark.parametrize("case", list(CASES))
def test_case(case: str, backend: Backend) -> None:
    run_case(case, backend, KNOWN_DIFFERENCES)


def test_known_differences_name_real_cases_and_backends() -> None:
    for case, name in KNOWN_DIFFERENCES:
        assert case in CASES and name in BACKENDS


def test_a_queue_that_cannot_finish_with_the_store_goes_step_by_step() -> None:
    queue, elsewhere = MemoryJobQueue(MemoryJobStore()), MemoryJobStore()
    queue.enqueue(make_job())
    held = queue.dequeue("default", T0)
    assert isinstance(held, Claim)
    done = decide(start(held.job, T0).unwrap(), Succeeded(1), T0, Policies(), 0.5).job
    steps = Executor(queue, elsewhere).plan(held, Complete(done))
    assert [st.name for st in steps] == ["extend", "record", "ack"]


def test_sweep_covers_every_backend() -> None:
    """Fails, naming the backend and how to provide it, when any server is missing."""
    missing = []
    for name in BACKENDS:
        try:
            made = make_backend(name)
            made.queue.counts(T0)
            made.cleanup()
        except Exception as exc:
            missing.append(f"{name}: {type(exc).__name__}: {exc} ({HOW_TO_PROVIDE[name]})")
    assert not missing, "the sweep cannot run on every backend:\n" + "\n".join(missing)
