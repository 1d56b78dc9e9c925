"""Claim order: one key every backend reproduces.

Most urgent priority first; within one priority, first in first out by the
enqueue sequence number the backend assigns (SQL `seq`, the Redis list order,
the memory adapter's counter). The adapter-surface sweep checks that every
backend agrees with `claim_order`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeVar

from .job import Priority

T = TypeVar("T")


def ordering_key(priority: Priority, seq: int) -> tuple[int, int]:
    """Sort key: smaller claims first. A total order over (priority, seq) pairs."""
    return (priority.rank, seq)


def claim_order(entries: Iterable[tuple[Priority, int, T]]) -> list[T]:
    """The items of `(priority, seq, item)` entries in the order they must be claimed."""
    return [item for _, _, item in sorted(entries, key=lambda e: ordering_key(e[0], e[1]))]


def promotion_key(run_at_us: int, seq: int) -> tuple[int, int]:
    """Sort key for parked jobs coming due: earliest `run_at` (in microseconds) first,
    then the enqueue sequence. Every backend promotes in this order, behind the jobs
    already ready, so a due job keeps its place among those that came due with it."""
    return (run_at_us, seq)
