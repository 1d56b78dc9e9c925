"""In-memory backend: one process, thread-safe. For tests, scripts and demos.

Ready work is one FIFO per (queue, priority); a counter gives every enqueue its
sequence number, and claims follow the core's `ordering_key`. The scheduled set
is a dict swapped under the lock, so of two concurrent promoters only one moves
each job; due jobs are promoted in the core's `promotion_key` order, by every
claim of their queue. It cannot reclaim across processes (there are none to share with),
but it honours leases within its own process like the other backends.
"""

from __future__ import annotations

import contextlib
import threading
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from uuid import UUID

import attrs

from ...core import PRIORITY_ORDER, Job, JobStatus, Priority, PruneOrder, promotion_key
from ...core.job import UniqueLock
from ...core.limits import QueueLimits, plan_claim
from ...core.uniqueness import lock_holds
from ..limits import LimitState, first_of_each_partition, ready_counts, running_counts
from ..ports import (
    BadClaim,
    Claim,
    FinishedPerMinute,
    HistoryFilter,
    LimitedClaims,
    LimitUsage,
    Place,
    PriorityCounts,
    QueueCounts,
    QueuedJob,
    prefetch_token,
)
from ..tokens import fresh_token
from ..unique import found_in_queue

#: At most this many due jobs are promoted by one claim.
PROMOTE_PER_CLAIM = 100


def _us(when: datetime) -> int:
    return (when - _EPOCH) // timedelta(microseconds=1)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@attrs.define
class _InFlight:
    job: Job
    token: str
    locked_at: datetime


class MemoryJobQueue:
    """A `JobQueue` in this process's memory.

    Given the `MemoryJobStore` it works with, it also finishes jobs (record and
    release) in one step and claims in batches, like the server backends.
    """

    def __init__(self, store: MemoryJobStore | None = None) -> None:
        self._store = store
        self._lock = threading.Lock()
        self._ready_signal = threading.Condition(self._lock)
        self._seq = 0
        self._ready: dict[str, dict[Priority, deque[tuple[int, Job]]]] = {}
        self._ready_ids: dict[UUID, str] = {}
        #: Parked jobs with the sequence number of their enqueue (the promotion tie-break).
        self._scheduled: dict[UUID, tuple[int, Job]] = {}
        self._in_flight: dict[UUID, _InFlight] = {}
        #: Cancel requests of claimed jobs (id -> when asked): their outcomes are refused.
        self._cancel_requests: dict[UUID, datetime] = {}
        #: Unique key -> (the lock, its holder's id); a stale entry is taken over.
        self._unique: dict[str, tuple[UniqueLock, UUID]] = {}
        #: Per queue: the buckets and passes of its limits (see `core.limits`).
        self._limit_state: dict[str, LimitState] = {}
        if store is not None:
            store._queue = self  # so its prune spares the records of jobs still here

    def holds(self, job_id: UUID) -> bool:
        """True while `job_id` is ready, parked or in flight (caller holds the lock)."""
        return job_id in self._ready_ids or job_id in self._scheduled or job_id in self._in_flight

    def _lanes(self, queue: str) -> dict[Priority, deque[tuple[int, Job]]]:
        lanes = self._ready.get(queue)
        if lanes is None:
            lanes = {p: deque() for p in PRIORITY_ORDER}
            self._ready[queue] = lanes
        return lanes

    def _drop(self, job_id: UUID) -> None:
        """Remove every trace of `job_id` (caller holds the lock)."""
        self._scheduled.pop(job_id, None)
        self._in_flight.pop(job_id, None)
        queue = self._ready_ids.pop(job_id, None)
        if queue is not None:
            for lane in self._ready[queue].values():
                for entry in lane:
                    if entry[1].id == job_id:
                        lane.remove(entry)
                        return

    def _place(self, job: Job) -> None:
        """Put `job` where its status says (caller holds the lock)."""
        self._seq += 1
        if job.status.is_parked:
            self._scheduled[job.id] = (self._seq, job)
        else:
            self._lanes(job.queue)[job.priority].append((self._seq, job))
            self._ready_ids[job.id] = job.queue
        # Parked jobs wake idle workers too: each then sleeps until the next one is due.
        self._ready_signal.notify_all()

    def _promote(self, now: datetime, queue: str | None, limit: int) -> int:
        """Move due parked jobs (of `queue`, or all) behind the ready ones, in the
        promotion order (caller holds the lock)."""
        due = [
            (promotion_key(_us(job.run_at), seq), job)
            for seq, job in self._scheduled.values()
            if job.run_at <= now and (queue is None or job.queue == queue)
        ]
        due.sort(key=lambda entry: entry[0])
        for _, job in due[:limit]:
            del self._scheduled[job.id]
            self._seq += 1
            self._lanes(job.queue)[job.priority].append((self._seq, job))
            self._ready_ids[job.id] = job.queue
        return min(len(due), limit)

    def enqueue(self, job: Job) -> None:
        with self._lock:
            self._drop(job.id)
            self._place(job)

    def enqueue_new(self, job: Job) -> Job | None:
        with self._lock:
            return self._add(job)

    def enqueue_new_many(self, jobs: Sequence[Job]) -> list[Job | None]:
        with self._lock:
            return [self._add(job) for job in jobs]

    def _stored(self, job_id: UUID) -> Job | None:
        """The job with `job_id` as it stands, queued or recorded (caller holds the lock)."""
        queued = self._find(job_id)
        if queued is not None and queued.job is not None:
            return found_in_queue(queued.place, queued.job)
        return None if self._store is None else self._store.get(job_id)

    def _add(self, job: Job) -> Job | None:
        """`enqueue_new` under the lock: the id first, then the unique key."""
        existing = self._stored(job.id)
        if existing is not None:
            return existing
        lock = job.unique
        if lock is not None:
            held = self._unique.get(lock.key)
            if held is not None:
                holder = self._stored(held[1])
                state = None if holder is None else holder.status
                if holder is not None and lock_holds(held[0], state, job.created_at):
                    return holder
            self._unique[lock.key] = (lock, job.id)
        self._place(job)
        return None

    def enqueue_many(self, jobs: Sequence[Job]) -> None:
        with self._lock:
            for job in jobs:
                self._drop(job.id)
                self._place(job)

    def dequeue(self, queue: str, now: datetime) -> Claim | None:
        with self._lock:
            self._promote(now, queue, PROMOTE_PER_CLAIM)
            return self._take(queue, now, fresh_token())

    def _take(self, queue: str, now: datetime, token: str) -> Claim | None:
        """Claim the best ready job of `queue` under `token` (caller holds the lock)."""
        lanes = self._ready.get(queue)
        if not lanes:
            return None
        for priority in PRIORITY_ORDER:
            lane = lanes[priority]
            if lane:
                _, job = lane.popleft()
                del self._ready_ids[job.id]
                self._in_flight[job.id] = _InFlight(job, token, now)
                return Claim(job=job, token=token, queue=queue, locked_at=now)
        return None

    def next_due(self, queue: str) -> datetime | None:
        with self._lock:
            due = [job.run_at for _, job in self._scheduled.values() if job.queue == queue]
            return min(due, default=None)

    def server_time(self) -> datetime | None:
        """None: this process's clock is the only one."""
        return None

    def _held(self, claim: Claim) -> _InFlight | None:
        entry = self._in_flight.get(claim.job.id)
        return entry if entry is not None and entry.token == claim.token else None

    def ack(self, claim: Claim | BadClaim) -> bool:
        if isinstance(claim, BadClaim):
            return False  # this backend stores Job values; nothing here fails to decode
        with self._lock:
            if self._held(claim) is None:
                return False
            del self._in_flight[claim.job.id]
            return True

    def extend(self, claim: Claim | BadClaim, now: datetime) -> bool:
        if isinstance(claim, BadClaim):
            return False
        with self._lock:
            entry = self._held(claim)
            if entry is None:
                return False
            entry.locked_at = now
            return True

    def replace(self, claim: Claim, job: Job) -> bool:
        with self._lock:
            if self._held(claim) is None or claim.job.id in self._cancel_requests:
                return False
            del self._in_flight[claim.job.id]
            self._place(job)
            return True

    def wait_for_work(self, queue: str, timeout_s: float) -> bool:
        """Block until a job becomes ready on `queue` or `timeout_s` passes."""
        with self._lock:
            lanes = self._ready.get(queue)
            if lanes and any(lanes.values()):
                return True
            return self._ready_signal.wait(timeout_s)

    def dequeue_many(self, queue: str, now: datetime, limit: int) -> list[Claim | BadClaim]:
        claims: list[Claim | BadClaim] = []
        with self._lock:
            self._promote(now, queue, PROMOTE_PER_CLAIM)
            for _ in range(limit):
                claim = self._take(queue, now, prefetch_token(fresh_token()))
                if claim is None:
                    break
                claims.append(claim)
        return claims

    def dequeue_limited(
        self, queue: str, now: datetime, want: int, limits: QueueLimits
    ) -> LimitedClaims:
        """Claim up to `want` jobs as `core.limits.plan_claim` chooses, under the lock."""
        with self._lock:
            self._promote(now, queue, PROMOTE_PER_CLAIM)
            lanes = self._ready.get(queue, {})
            ready = [entry for p in PRIORITY_ORDER for entry in lanes.get(p, ())]
            held = (e.job for e in self._in_flight.values() if e.job.queue == queue)
            state = self._limit_state.setdefault(queue, LimitState())
            found = first_of_each_partition(ready, want)
            candidates = [c for c, _ in found.values()]
            plan = plan_claim(
                limits, candidates, running_counts(held), *state.view(), _us(now), want
            )
            state.apply(plan)
            claims: list[Claim | BadClaim] = []
            for job_id in plan.take:
                seq, job = found[job_id][1]
                self._lanes(queue)[job.priority].remove((seq, job))
                del self._ready_ids[job.id]
                token = prefetch_token(fresh_token())
                self._in_flight[job.id] = _InFlight(job, token, now)
                claims.append(Claim(job=job, token=token, queue=queue, locked_at=now))
        wait = plan.wait_until_us
        until = None if wait is None else _EPOCH + timedelta(microseconds=wait)
        return LimitedClaims(claims, until, plan.held_back > 0)

    def limit_usage(self, queue: str, now: datetime) -> LimitUsage:
        """What `queue` holds now for its limits, read under the lock."""
        with self._lock:
            lanes = self._ready.get(queue, {})
            ready = [entry for p in PRIORITY_ORDER for entry in lanes.get(p, ())]
            held = (e.job for e in self._in_flight.values() if e.job.queue == queue)
            buckets, passes = self._limit_state.get(queue, LimitState()).view()
            return LimitUsage(
                running=running_counts(held),
                ready=ready_counts(job for _, job in ready),
                candidates=[c for c, _ in first_of_each_partition(ready, 1).values()],
                buckets=buckets,
                passes=passes,
            )

    def start_claim(self, claim: Claim, now: datetime) -> Claim | None:
        with self._lock:
            entry = self._held(claim)
            if entry is None:
                return None
            entry.token, entry.locked_at = fresh_token(), now
            return attrs.evolve(claim, token=entry.token, locked_at=now)

    def finishes_with(self, store: object) -> bool:
        """True for the store this queue was built with: in one process, holding the
        queue's lock makes record-and-release one step."""
        return store is not None and store is self._store

    def finish(
        self, claim: Claim | BadClaim, record: Job, abandoned_before: datetime | None = None
    ) -> bool:
        if isinstance(claim, BadClaim):
            return False  # this backend stores Job values; nothing here fails to decode
        if self._store is None:
            raise ValueError("this MemoryJobQueue was built without a store to finish into")
        with self._lock:
            entry = self._held(claim)
            if entry is None or claim.job.id in self._cancel_requests:
                return False
            if abandoned_before is not None and not entry.locked_at < abandoned_before:
                return False  # renewed since the lease keeper looked: still live
            self._store.record(record)
            del self._in_flight[claim.job.id]
            return True

    def _store_for(self, action: str) -> MemoryJobStore:
        if self._store is None:
            raise ValueError(f"this MemoryJobQueue was built without a store to {action}")
        return self._store

    def cancel(self, record: Job) -> bool:
        store = self._store_for("cancel into")
        with self._lock:
            if record.id in self._in_flight or not (
                record.id in self._ready_ids or record.id in self._scheduled
            ):
                return False
            self._drop(record.id)
            store.record(record)
            return True

    def request_cancel(self, job_id: UUID, now: datetime) -> bool:
        with self._lock:
            if job_id not in self._in_flight:
                return False
            self._cancel_requests.setdefault(job_id, now)
            return True

    def cancel_requested(self, job_id: UUID) -> bool:
        with self._lock:
            return job_id in self._cancel_requests

    def finish_cancelled(
        self, claim: Claim | BadClaim, record: Job, abandoned_before: datetime | None = None
    ) -> bool:
        if isinstance(claim, BadClaim):
            return False  # this backend stores Job values; nothing here fails to decode
        store = self._store_for("finish into")
        with self._lock:
            entry = self._held(claim)
            if entry is None:
                return False
            if abandoned_before is not None and not entry.locked_at < abandoned_before:
                return False
            store.record(record)
            del self._in_flight[claim.job.id]
            self._cancel_requests.pop(claim.job.id, None)
            return True

    def revive(self, dead: Job, fresh: Job) -> bool:
        if self._store is None:
            raise ValueError("this MemoryJobQueue was built without a store to revive into")
        with self._lock:
            current = self._store.get(dead.id)
            if current is None or current.status is not JobStatus.FAILED:
                return False
            self._drop(fresh.id)
            self._place(fresh)
            self._store.record(fresh)
            return True

    def finish_many(self, items: Sequence[tuple[Claim, Job]]) -> list[bool]:
        if self._store is None:
            raise ValueError("this MemoryJobQueue was built without a store to finish into")
        done = []
        with self._lock:
            for claim, record in items:
                held = self._held(claim) is not None and claim.job.id not in self._cancel_requests
                if held:
                    self._store.record(record)
                    del self._in_flight[claim.job.id]
                done.append(held)
        return done

    def promote_due(self, now: datetime, limit: int = 1000) -> int:
        with self._lock:
            moved = self._promote(now, None, limit)
            if moved:
                self._ready_signal.notify_all()
            return moved

    def abandoned(self, cutoff: datetime, limit: int = 100) -> Sequence[Claim]:
        with self._lock:
            stale = [e for e in self._in_flight.values() if e.locked_at < cutoff]
            return [Claim(e.job, e.token, e.job.queue, e.locked_at) for e in stale[:limit]]

    def reclaim(self, claim: Claim, job: Job, cutoff: datetime) -> bool:
        with self._lock:
            entry = self._held(claim)
            if entry is None or not entry.locked_at < cutoff:
                return False
            if claim.job.id in self._cancel_requests:
                return False
            del self._in_flight[claim.job.id]
            self._place(job)
            return True

    def counts(self, now: datetime) -> Mapping[str, QueueCounts]:
        with self._lock:
            parked = [job for _, job in self._scheduled.values()]
            names = set(self._ready) | {j.queue for j in parked}
            names |= {e.job.queue for e in self._in_flight.values()}
            running = [e.job for e in self._in_flight.values()]
            out: dict[str, QueueCounts] = {}
            for name in sorted(names):
                ready = [job for lane in self._ready.get(name, {}).values() for _, job in lane]
                mine = [j for j in parked if j.queue == name]
                held = [j for j in running if j.queue == name]
                by_priority = {
                    p: PriorityCounts(
                        sum(1 for j in ready if j.priority is p),
                        sum(1 for j in mine if j.priority is p),
                        sum(1 for j in held if j.priority is p),
                    )
                    for p in PRIORITY_ORDER
                    if any(j.priority is p for j in (*ready, *mine, *held))
                }
                out[name] = QueueCounts(
                    ready=len(ready),
                    scheduled=len(mine),
                    in_flight=len(held),
                    oldest_ready_at=min((j.run_at for j in ready), default=None),
                    by_priority=by_priority,
                )
            return out

    def find(self, job_id: UUID) -> QueuedJob | None:
        with self._lock:
            return self._find(job_id)

    def _find(self, job_id: UUID) -> QueuedJob | None:
        """Where `job_id` is (caller holds the lock)."""
        held = self._in_flight.get(job_id)
        if held is not None:
            job = held.job
            return QueuedJob(str(job_id), job.queue, Place.IN_FLIGHT, job, None, *_claimed(held))
        parked = self._scheduled.get(job_id)
        if parked is not None:
            return QueuedJob(str(job_id), parked[1].queue, Place.SCHEDULED, parked[1])
        queue = self._ready_ids.get(job_id)
        for lane in self._ready.get(queue or "", {}).values():
            for _, job in lane:
                if job.id == job_id:
                    return QueuedJob(str(job_id), job.queue, Place.READY, job)
        return None

    def scan(
        self, queue: str | None = None, place: Place | None = None, *, batch: int = 500
    ) -> Iterator[QueuedJob]:
        """One snapshot under the lock (`batch` is moot in memory), then yielded."""
        with self._lock:
            found: list[QueuedJob] = []
            for where in [place] if place is not None else list(Place):
                found += self._snapshot(queue, where)
        yield from found

    def _snapshot(self, queue: str | None, place: Place) -> list[QueuedJob]:
        """`place`'s jobs (of `queue`) in the order `scan` promises (caller holds the lock)."""
        if place is Place.IN_FLIGHT:
            held = sorted(self._in_flight.values(), key=lambda e: e.locked_at)
            return [
                QueuedJob(str(e.job.id), e.job.queue, place, e.job, None, *_claimed(e))
                for e in held
                if queue is None or e.job.queue == queue
            ]
        if place is Place.READY:
            names = sorted(self._ready) if queue is None else [queue]
            return [
                QueuedJob(str(job.id), name, place, job)
                for name in names
                for priority in PRIORITY_ORDER
                for _, job in self._ready.get(name, {}).get(priority, ())
            ]
        parked = sorted(
            (
                (promotion_key(_us(job.run_at), seq), job)
                for seq, job in self._scheduled.values()
                if queue is None or job.queue == queue
            ),
            key=lambda entry: entry[0],
        )
        return [QueuedJob(str(job.id), job.queue, place, job) for _, job in parked]

    def close(self) -> None:
        """Nothing to release."""


def _claimed(entry: _InFlight) -> tuple[str, datetime]:
    return entry.token, entry.locked_at


class MemoryJobStore:
    """A `JobStore` in this process's memory."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: dict[UUID, tuple[int, Job]] = {}
        self._seq = 0
        #: The queue built with this store, if any (it sets this).
        self._queue: MemoryJobQueue | None = None

    def record(self, job: Job) -> None:
        with self._lock:
            self._seq += 1
            self._jobs[job.id] = (self._seq, job)

    def get(self, job_id: UUID) -> Job | None:
        with self._lock:
            entry = self._jobs.get(job_id)
            return entry[1] if entry else None

    def list_history(
        self,
        *,
        status: JobStatus | None = None,
        tenant_id: str | None = None,
        limit: int = 100,
    ) -> Sequence[Job]:
        with self._lock:
            rows = sorted(self._jobs.values(), key=lambda e: e[0], reverse=True)
            return [
                job
                for _, job in rows
                if (status is None or job.status is status)
                and (tenant_id is None or job.tenant_id == tenant_id)
            ][:limit]

    def list_dead(self, *, tenant_id: str | None = None, limit: int = 100) -> Sequence[Job]:
        return self.list_history(status=JobStatus.FAILED, tenant_id=tenant_id, limit=limit)

    def _matching(self, where: HistoryFilter) -> list[Job]:
        with self._lock:
            rows = sorted(self._jobs.values(), key=lambda e: e[0], reverse=True)
        return [
            job
            for _, job in rows
            if (where.status is None or job.status is where.status)
            and (where.queue is None or job.queue == where.queue)
            and (where.job_type is None or job.job_type == where.job_type)
            and (where.tenant_id is None or job.tenant_id == where.tenant_id)
        ]

    def find_history(
        self, where: HistoryFilter, *, offset: int = 0, limit: int = 100
    ) -> Sequence[Job]:
        """Records matching `where`, newest first, from the `offset`-th."""
        return self._matching(where)[max(offset, 0) : max(offset, 0) + max(limit, 0)]

    def count_history(self, where: HistoryFilter) -> int:
        """How many records match `where`."""
        return len(self._matching(where))

    def finished_per_minute(self, start: datetime, minutes: int) -> FinishedPerMinute:
        """Completed and failed records per minute of `finished_at` from `start`."""
        start = start.replace(second=0, microsecond=0)
        counts = {JobStatus.COMPLETED: [0] * minutes, JobStatus.FAILED: [0] * minutes}
        with self._lock:
            jobs = [job for _, job in self._jobs.values()]
        for job in jobs:
            bucket = counts.get(job.status)
            if bucket is None or job.finished_at is None or job.finished_at < start:
                continue
            minute = int((job.finished_at - start).total_seconds() // 60)
            if minute < minutes:
                bucket[minute] += 1
        return FinishedPerMinute(
            start, tuple(counts[JobStatus.COMPLETED]), tuple(counts[JobStatus.FAILED])
        )

    def count_dead(self, *, tenant_id: str | None = None) -> Mapping[str, int]:
        out: dict[str, int] = {}
        for job in self.list_dead(tenant_id=tenant_id, limit=len(self._jobs) + 1):
            out[job.queue] = out.get(job.queue, 0) + 1
        return out

    def purge_dead(self, job_id: UUID | None = None) -> int:
        with self._lock:
            doomed = [
                i
                for i, (_, job) in self._jobs.items()
                if job.status is JobStatus.FAILED and (job_id is None or i == job_id)
            ]
            for i in doomed:
                del self._jobs[i]
            return len(doomed)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        # The queue's lock first, as in `MemoryJobQueue.finish`: one order, no deadlock.
        queue = self._queue
        with queue._lock if queue is not None else contextlib.nullcontext(), self._lock:
            yield

    def _prunable(self, order: PruneOrder) -> list[UUID]:
        """The ids `order` lets go, oldest recorded first (caller holds the locks)."""
        rows = sorted(self._jobs.values(), key=lambda e: e[0])
        out: list[UUID] = []
        for status, before, keep in order.rules:
            jobs = [job for _, job in rows if job.status is status]
            excess = 0 if keep is None else max(0, len(jobs) - keep)
            for n, job in enumerate(jobs):
                finished = job.finished_at
                old = before is not None and finished is not None and finished < before
                busy = self._queue is not None and self._queue.holds(job.id)
                if (n < excess or old) and not busy:
                    out.append(job.id)
        return out

    def prune(self, order: PruneOrder) -> int:
        if order.is_empty or order.limit <= 0:
            return 0
        with self._locked():
            doomed = self._prunable(order)[: order.limit]
            for i in doomed:
                del self._jobs[i]
            return len(doomed)

    def count_prunable(self, order: PruneOrder) -> int:
        if order.is_empty:
            return 0
        with self._locked():
            return len(self._prunable(order))

    def close(self) -> None:
        """Nothing to release."""
