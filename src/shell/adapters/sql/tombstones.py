"""Tombstones of pruned records on SQL: a `<prefix>_pruned` row (id, when, µs) per
record a prune deletes, written in the prune's transaction, and deleted once older
than the order's `forget_before`. `Runtime.result` reads them to tell a pruned job
from one never enqueued here."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import Connection, Table, delete, insert, select

from ....core import PruneOrder
from .engine import from_micros, to_micros

#: How many of the order's batches of old tombstones one prune forgets: more than it
#: writes, so a backlog of them shrinks while records keep going (5,000 at the
#: default batch of 500, a few tens of ms of SQLite's write lock).
FORGET_BATCHES = 10


def remember(conn: Connection, table: Table, order: PruneOrder, ids: Sequence[str]) -> None:
    """In the prune's transaction: a tombstone for each of `ids` (an older one for the
    same id is replaced), and up to `FORGET_BATCHES` times the order's `limit` of the
    tombstones older than its `forget_before` go: a day after a large prune, its
    tombstones would otherwise all go in one transaction, holding SQLite's write lock
    for as long. Nothing when the order asks for none."""
    if order.pruned_at is None or order.forget_before is None:
        return
    old = (
        select(table.c.id)
        .where(table.c.pruned_at < to_micros(order.forget_before))
        .order_by(table.c.pruned_at)
        .limit(max(order.limit, 1) * FORGET_BATCHES)
    )
    conn.execute(delete(table).where(table.c.id.in_(old.scalar_subquery())))
    if not ids:
        return
    conn.execute(delete(table).where(table.c.id.in_(list(ids))))
    at = to_micros(order.pruned_at)
    conn.execute(insert(table), [{"id": i, "pruned_at": at} for i in ids])


def pruned_at(conn: Connection, table: Table, job_id: str) -> datetime | None:
    """When the record of `job_id` was pruned, while its tombstone is kept."""
    found = conn.execute(select(table.c.pruned_at).where(table.c.id == job_id)).scalar()
    return None if found is None else from_micros(int(found))
