"""Fixtures of the fault tests (the harness itself is `fault_harness.py`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fault_harness import BACKENDS, Site, make_site


@pytest.fixture(params=BACKENDS)
def site(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Site]:
    made = make_site(request.param, tmp_path)
    yield made
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        for proc in made.procs:
            print(f"--- worker {proc.pid} stderr ---\n{proc.stderr()}")
    made.close()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if report.when == "call":
        item.rep_call = report  # type: ignore[attr-defined]
    return report
