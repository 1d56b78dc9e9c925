"""docs/core.md renders the transition table and the policy defaults; keep them true."""

from __future__ import annotations

import re
from pathlib import Path

import attrs
import pytest
from conveyor.core import TABLE, JobStatus, LeasePolicy, RequeuePolicy, RetryPolicy

DOC = Path(__file__).resolve().parents[2] / "docs" / "core.md"
STATUS_NAMES = "|".join(s.value for s in JobStatus)
TRANSITION_ROW = re.compile(rf"^\| ({STATUS_NAMES}) \| (\w+) \| ({STATUS_NAMES}) \|$", re.M)


def doc_text() -> str:
    return DOC.read_text(encoding="utf-8")


def test_every_move_in_the_table_is_a_row_in_the_docs() -> None:
    text = doc_text()
    for status, row in TABLE.items():
        for event, target in row.items():
            line = f"| {status.value} | {event.value} | {target.value} |"
            assert line in text.splitlines(), f"docs/core.md lacks {line}"


def test_the_docs_list_no_move_the_table_lacks() -> None:
    documented = set(TRANSITION_ROW.findall(doc_text()))
    actual = {(s.value, e.value, t.value) for s, row in TABLE.items() for e, t in row.items()}
    assert documented == actual


def test_every_status_is_described() -> None:
    text = doc_text()
    for status in JobStatus:
        assert f"| `{status.value}` |" in text


@pytest.mark.parametrize("policy", [RetryPolicy, RequeuePolicy, LeasePolicy])
def test_the_docs_state_each_policy_default(policy: type) -> None:
    text = doc_text()
    for field in attrs.fields(policy):
        line = f"| {policy.__name__} | `{field.name}` | {field.default} |"
        assert line in text, f"docs/core.md lacks {line!r}"
