"""The suite's tiers (docs/testing.md): every test is marked `server` when it needs
PostgreSQL or Redis and `subprocess` when it spawns a process, from what it uses
(`tiers.py`), never by hand; while it runs, `tier_guard.py` refuses it any server or
process its markers do not allow. `python3 dev.py test --fast` runs the tests marked
neither.
"""

from __future__ import annotations

from collections.abc import Generator

import pytest

from tier_guard import Guard
from tiers import tiers_of

GUARD = pytest.StashKey[Guard]()


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if hasattr(item, "_fixtureinfo") and hasattr(item, "obj"):
            for mark in sorted(tiers_of(item)):
                item.add_marker(mark)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    item.stash[GUARD] = guard = Guard(item)
    guard.start()
    yield
    guard.check()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    yield
    item.stash[GUARD].check()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, None, None]:
    guard = item.stash[GUARD]
    try:
        yield
    finally:
        guard.stop()
    guard.check()
