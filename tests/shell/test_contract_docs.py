"""The contract's page (docs/contract.md) does what it says: its example checks a
user's adapter (here the memory backend, behind a subclass) and every case runs
through that adapter; its broken adapter is caught by the cases it names and by no
other; its per-case tests and state machine pass on the memory backend; its table
names every area of the contract.

The page's blocks also run as scripts in test_docs_snippets.py; here they run in
this process, and what they leave behind is checked.
"""

from __future__ import annotations

import re
import unittest
from pathlib import Path
from typing import Any

import pytest
from conveyor.testing.contract import AREAS, CASES

PAGE = Path(__file__).resolve().parents[2] / "docs" / "contract.md"
BLOCKS = re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.S)

#: The cases an `ack` that always answers yes fails: each asserts a refused ack.
ACK_CASES = {
    "ack_only_with_the_live_token",
    "a_stale_ack_is_a_no_op",
    "ack_leaves_a_reenqueued_job",
    "replace_parks_or_readies_and_unlocks",
    "bulk_enqueue_takes_a_claimed_job_from_its_holder",
    "start_claim_swaps_the_token_renews_the_lease_and_fences_the_old_one",
}


def run_block(index: int) -> dict[str, Any]:
    namespace: dict[str, Any] = {"__name__": "contract_page"}
    exec(compile(BLOCKS[index], f"docs/contract.md block {index + 1}", "exec"), namespace)
    return namespace


def test_the_page_has_its_four_examples() -> None:
    assert len(BLOCKS) == 4, "the tests below address the page's blocks by position"


def test_the_example_checks_a_users_adapter_through_every_applicable_case() -> None:
    page = run_block(0)
    report = page["report"]
    assert report.ok, report
    assert set(report.passed) | set(report.not_applicable) == set(CASES)
    assert len(report.passed) >= 100, report
    # What memory lacks (no server, no other process, no bytes) is not applicable, not passed.
    assert "reclaim_from_another_process" in report.not_applicable
    assert page["CountingQueue"].released > 0, "the cases never went through the adapter"


def test_the_broken_adapter_is_caught_by_the_ack_cases_and_no_other() -> None:
    page = run_block(1)
    report = page["report"]
    assert set(report.failures) == ACK_CASES, report
    for name in ACK_CASES:
        assert "ack" in report.failures[name], name
    assert "FAILED ack_only_with_the_live_token: AssertionError at `assert" in str(report)


def test_the_pytest_template_passes_every_case_and_its_machine_on_memory() -> None:
    page = run_block(2)
    skipped = []
    for name in CASES:
        try:
            page["test_contract"](name)
        except pytest.skip.Exception as exc:
            skipped.append(name)
            assert "needs" in str(exc), exc
    assert 0 < len(skipped) < 10, skipped
    result = unittest.TestResult()
    page["TestMyQueueMachine"]("runTest").run(result)
    assert result.wasSuccessful(), result.failures + result.errors


def test_the_pytest_template_fails_a_broken_adapter() -> None:
    page = run_block(2)
    broken = run_block(1)
    page["MemoryJobQueue"] = broken["HastyQueue"]  # the name my_subject builds its queue from
    with pytest.raises(AssertionError):
        page["test_contract"]("ack_only_with_the_live_token")


def test_a_declared_difference_runs_in_place_of_its_case() -> None:
    page = run_block(3)
    assert page["report"].passed == ("the_lease_server_clock_is_checked",)
    without = page["check"](page["mine"], cases=["the_lease_server_clock_is_checked"])
    assert without.not_applicable, "memory has no server clock: the case needs one"


def test_the_page_names_every_area() -> None:
    text = PAGE.read_text(encoding="utf-8").split("## The cases", 1)[1]
    table = set(re.findall(r"^\| `(\w+)` \|", text, re.M))
    assert table == set(AREAS)
