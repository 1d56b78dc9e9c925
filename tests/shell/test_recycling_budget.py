"""A recycling process's claim budget, in-process: shared by its worker threads, it
never grants past the job bound, takes back what a claim did not get, and grants
nothing once memory is past its bound."""

from __future__ import annotations

import threading

from conveyor.core import RecyclePolicy
from conveyor.shell.worker.recycling import Recycling, resident_mb


def test_threads_sharing_the_budget_never_claim_past_it() -> None:
    budget = Recycling(RecyclePolicy(max_jobs=1000))
    granted: list[int] = []

    def claim() -> None:
        for _ in range(500):
            got = budget.reserve(3)
            granted.append(got)

    threads = [threading.Thread(target=claim) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(granted) == 1000
    assert budget.reserve(1) == 0
    assert budget.reason() is not None and "1000 jobs" in budget.reason()  # type: ignore[operator]


def test_what_a_claim_did_not_get_goes_back_to_the_budget() -> None:
    budget = Recycling(RecyclePolicy(max_jobs=4))
    assert budget.reserve(4) == 4
    budget.refund(3)  # the queue had one job
    assert budget.reason() is None
    assert budget.reserve(10) == 3


def test_past_the_memory_bound_nothing_more_is_claimed() -> None:
    memory = [100.0]
    budget = Recycling(RecyclePolicy(max_memory_mb=200), memory=lambda: memory[0])
    assert budget.reserve(5) == 5
    memory[0] = 250.0
    assert budget.reserve(5) == 0
    reason = budget.reason()
    assert reason is not None and "250 MB" in reason


def test_this_process_knows_its_resident_memory() -> None:
    mb = resident_mb()
    assert mb is not None and 5 < mb < 100_000
    hold = bytearray(64 * 2**20)
    hold[::4096] = b"x" * len(hold[::4096])  # touch every page, so it is resident
    after = resident_mb()
    assert after is not None and after >= mb + 50
    del hold
