"""The SQL queue's reads: counts, find, scan, next_due and the server's clock. Each
runs without the write lock (`BEGIN DEFERRED` on SQLite)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import attrs
from sqlalchemy import ColumnElement, Connection, Row, func, select

from ....core import Priority
from ...lookup import queued_entry
from ...ports import FIND_MANY_BATCH, Place, PriorityCounts, QueueCounts, QueuedJob
from .base import SqlQueueBase
from .engine import from_micros
from .schema import PROCESSING, READY, SCHEDULED, WAITING

__all__ = ["Reading"]


class Reading(SqlQueueBase):
    """The read role of `SqlJobQueue`."""

    def next_due(self, queue: str) -> datetime | None:
        """The earliest `run_at` among `queue`'s parked rows, or None."""
        stmt = self._db.sql.next_due
        first = self._db.run(
            lambda conn: conn.execute(stmt, {"in_queue": queue}).scalar(), write=False
        )
        return None if first is None else from_micros(int(first))

    def counts(self, now: datetime) -> Mapping[str, QueueCounts]:
        """Ready, scheduled and in-flight rows per queue and priority, and the oldest
        ready `run_at`, folded per queue. A due job counts as scheduled until a claim or
        `promote_due` moves it, so `now` changes nothing here."""
        t = self._t
        # Counted along the claim index (queue, status, priority) without reading the
        # rows, and the oldest ready job per queue along the due index: one pass over
        # the table's rows (payloads and all) would cost far more with many jobs queued.
        split = select(t.c.queue, t.c.priority, t.c.status, func.count()).group_by(
            t.c.queue, t.c.status, t.c.priority
        )

        def read(conn: Connection) -> tuple[Sequence[Any], dict[str, Any]]:
            rows = conn.execute(split).all()
            oldest = {}
            for name in sorted({str(r[0]) for r in rows if r[2] == READY}):
                first = select(func.min(t.c.run_at)).where(t.c.queue == name, t.c.status == READY)
                oldest[name] = conn.execute(first).scalar()
            return rows, oldest

        rows, oldest = self._db.run(read, write=False)
        column = {READY: 0, SCHEDULED: 1, PROCESSING: 2}
        cells: dict[tuple[str, int], list[int]] = {}
        waiting: dict[str, int] = {}
        for name, rank, status, n in rows:
            if status == WAITING:
                waiting[str(name)] = waiting.get(str(name), 0) + int(n)
                continue
            cell = cells.setdefault((str(name), int(rank)), [0, 0, 0])
            if status in column:
                cell[column[status]] += int(n)
        groups: dict[str, list[tuple[Any, ...]]] = {}
        for (name, rank), figures in sorted(cells.items()):
            groups.setdefault(name, []).append((name, rank, *figures, oldest.get(name)))
        folded = {name: _fold_counts(group) for name, group in groups.items()}
        for name, n in waiting.items():
            folded[name] = attrs.evolve(folded.get(name) or QueueCounts(), waiting=n)
        return folded

    def _lookup_columns(self) -> list[ColumnElement[Any]]:
        t = self._t
        return [t.c.id, t.c.queue, t.c.status, t.c.locked_by, t.c.locked_at, t.c.payload]

    def find(self, job_id: UUID) -> QueuedJob | None:
        """The job's row, read where it is (ready, scheduled or processing), or None."""
        stmt = select(*self._lookup_columns()).where(self._t.c.id == str(job_id))
        row = self._db.run(lambda conn: conn.execute(stmt).first(), write=False)
        return None if row is None else _queued(row)

    def find_many(self, job_ids: Sequence[UUID]) -> dict[UUID, QueuedJob]:
        """`find` of each id, `FIND_MANY_BATCH` ids per read."""
        found: dict[UUID, QueuedJob] = {}
        ids = list(dict.fromkeys(job_ids))
        for start in range(0, len(ids), FIND_MANY_BATCH):
            chunk = [str(job_id) for job_id in ids[start : start + FIND_MANY_BATCH]]
            stmt = select(*self._lookup_columns()).where(self._t.c.id.in_(chunk))
            found.update((UUID(str(row.id)), _queued(row)) for row in self._page(stmt))
        return found

    def scan(
        self, queue: str | None = None, place: Place | None = None, *, batch: int = 500
    ) -> Iterator[QueuedJob]:
        """Rows by place, each place in its own order, `batch` rows per read."""
        t = self._t
        order = {
            Place.IN_FLIGHT: (t.c.locked_at, t.c.id),
            Place.READY: (t.c.queue, t.c.priority, t.c.seq, t.c.id),
            Place.SCHEDULED: (t.c.run_at, t.c.seq, t.c.id),
            Place.WAITING: (t.c.seq, t.c.id),
        }
        for where in [place] if place is not None else list(Place):
            filters = [t.c.status == _STATUS_OF[where]]
            if queue is not None:
                filters.append(t.c.queue == queue)
            base = select(*self._lookup_columns()).where(*filters).order_by(*order[where])
            offset = 0
            while True:
                rows = self._page(base.limit(batch).offset(offset))
                yield from map(_queued, rows)
                if len(rows) < batch:
                    break
                offset += batch

    def _page(self, stmt: Any) -> Sequence[Row[Any]]:
        return self._db.run(lambda conn: conn.execute(stmt).all(), write=False)

    def server_time(self) -> datetime | None:
        """PostgreSQL's clock (`clock_timestamp()`), in UTC; None on SQLite, whose clock
        is this host's."""
        stmt = self._db.sql.server_time
        if stmt is None:
            return None
        when = self._db.run(lambda conn: conn.execute(stmt).scalar_one(), write=False)
        if not isinstance(when, datetime) or when.tzinfo is None:
            raise TypeError(f"clock_timestamp() gave {when!r}, not an aware datetime")
        return when.astimezone(UTC)


_STATUS_OF = {
    Place.IN_FLIGHT: PROCESSING,
    Place.READY: READY,
    Place.SCHEDULED: SCHEDULED,
    Place.WAITING: WAITING,
}
_PLACE_OF = {status: place for place, status in _STATUS_OF.items()}


def _queued(row: Row[Any]) -> QueuedJob:
    place = _PLACE_OF[str(row.status)]
    held = place is Place.IN_FLIGHT
    return queued_entry(
        str(row.id),
        str(row.queue),
        place,
        str(row.payload),
        str(row.locked_by or "") if held else None,
        from_micros(int(row.locked_at)) if held and row.locked_at is not None else None,
    )


_BY_RANK = {p.rank: p for p in Priority}
_NONE = PriorityCounts(0, 0, 0)


def _fold_counts(rows: Sequence[tuple[Any, ...]]) -> QueueCounts:
    """One queue's figures from its (queue, priority, ready, scheduled, in flight,
    oldest ready) rows."""
    by_priority: dict[Priority, PriorityCounts] = {}
    oldest: list[int] = []
    for _, rank, ready, scheduled, in_flight, first in rows:
        figures = PriorityCounts(int(ready or 0), int(scheduled or 0), int(in_flight or 0))
        if figures != _NONE:
            by_priority[_BY_RANK[int(rank)]] = figures
        if first is not None:
            oldest.append(int(first))
    split = by_priority.values()
    return QueueCounts(
        ready=sum(c.ready for c in split),
        scheduled=sum(c.scheduled or 0 for c in split),
        in_flight=sum(c.in_flight or 0 for c in split),
        oldest_ready_at=from_micros(min(oldest)) if oldest else None,
        by_priority=by_priority,
    )
