"""The Redis keys behind the dashboard's store reads stay bounded: the per-queue and
per-type indexes go with their records, and the per-minute counters expire.

The reads themselves are contract cases run on every backend
(`conveyor.testing.contract`, area `dashboard_store`).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from backends import Backend, make_backend
from conveyor.core.retention import PruneOrder
from conveyor.shell.ports import HistoryFilter
from conveyor.testing.contract.cases.dashboard_store import MINUTE0, _recorded
from helpers import T0


@pytest.fixture
def redis_backend() -> Iterator[Backend]:
    b = make_backend("redis")
    try:
        yield b
    finally:
        b.cleanup()


def _keys(b: Backend) -> set[str]:
    base = b.store.keys.base
    return {key.decode() for key in b.store._client.scan_iter(match=f"{base}:*")}


def _fill(b: Backend) -> None:
    for n in range(12):
        _recorded(
            b,
            "mail" if n % 2 else "resize",
            queue="fast" if n % 3 else "slow",
            tenant="acme" if n % 4 == 0 else None,
            when=MINUTE0 + timedelta(minutes=n % 3),
            dead=n % 5 == 0,
        )


def test_pruning_and_purging_every_record_leaves_no_index_or_counter(
    redis_backend: Backend,
) -> None:
    b = redis_backend
    _fill(b)
    base = b.store.keys.base
    assert f"{base}:history:completed:type:mail" in _keys(b)
    assert f"{base}:dead:queue:slow" in _keys(b)
    far = T0 + timedelta(days=365)
    order = PruneOrder(
        completed_before=far, dead_before=far, keep_completed=None, keep_dead=None, limit=1000
    )
    assert b.store.prune(order) == 12
    assert b.store.count_history(HistoryFilter()) == 0
    assert _keys(b) == {f"{base}:seq:store"}


def test_purging_dead_letters_takes_them_off_their_indexes_and_minutes(
    redis_backend: Backend,
) -> None:
    b = redis_backend
    dead = _recorded(b, "mail", queue="fast", when=MINUTE0, dead=True)
    assert b.store.purge_dead(None) == 1
    base = b.store.keys.base
    assert _keys(b) == {f"{base}:seq:store"}, dead


def test_the_per_minute_counters_expire_within_two_hours(redis_backend: Backend) -> None:
    b = redis_backend
    _fill(b)
    base = b.store.keys.base
    minutes = sorted(k for k in _keys(b) if k.startswith(f"{base}:finished:"))
    assert len(minutes) == 3
    for key in minutes:
        assert 0 < b.store._client.ttl(key) <= 2 * 3600
