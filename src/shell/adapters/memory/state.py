"""The memory queue's shared state: where each job is, and the moves every port
operation is built from.

Ready work is one FIFO per (queue, priority); a counter gives every enqueue its
sequence number, and claims follow the core's `ordering_key`. Parked jobs sit in a
dict with the sequence number of their enqueue, the promotion tie-break. Every
method here expects its caller to hold the lock.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from uuid import UUID

import attrs

from ....core import PRIORITY_ORDER, Job, Priority, promotion_key
from ....core.dependencies import Edge
from ....core.job import UniqueLock
from ....core.uniqueness import lock_holds
from ...limits import LimitState
from ...ports import Claim, Place, QueuedJob
from ...ports.workflows import WorkflowMembers
from ...unique import found_in_queue
from .store import MemoryJobStore

#: At most this many due jobs are promoted by one claim.
PROMOTE_PER_CLAIM = 100

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def us(when: datetime) -> int:
    """`when` in microseconds since the epoch, as the core's keys take it."""
    return (when - EPOCH) // timedelta(microseconds=1)


@attrs.define
class InFlight:
    """A claimed job, the token that holds it, and when it was claimed or renewed."""

    job: Job
    token: str
    locked_at: datetime
    #: The newest progress note of the running attempt (`conveyor.shell.progress_notes`).
    note: str | None = None


def claimed(entry: InFlight) -> tuple[str, datetime]:
    """The claim's token and time, as a `QueuedJob` of an in-flight job carries them."""
    return entry.token, entry.locked_at


class QueueState:
    """The jobs of a memory queue, behind one lock, and the moves between places."""

    def __init__(self, store: MemoryJobStore | None = None) -> None:
        self._store = store
        self._lock = threading.Lock()
        self._ready_signal = threading.Condition(self._lock)
        self._seq = 0
        self._ready: dict[str, dict[Priority, deque[tuple[int, Job]]]] = {}
        self._ready_ids: dict[UUID, str] = {}
        #: Parked jobs with the sequence number of their enqueue (the promotion tie-break).
        self._scheduled: dict[UUID, tuple[int, Job]] = {}
        self._in_flight: dict[UUID, InFlight] = {}
        #: Cancel requests of claimed jobs (id -> when asked): their outcomes are refused.
        self._cancel_requests: dict[UUID, datetime] = {}
        #: Unique key -> (the lock, its holder's id); a stale entry is taken over.
        self._unique: dict[str, tuple[UniqueLock, UUID]] = {}
        #: Per queue: the buckets and passes of its limits (see `core.limits`).
        self._limit_state: dict[str, LimitState] = {}
        #: Jobs waiting for others (`core.dependencies`): never claimed, never promoted.
        self._waiting: dict[UUID, Job] = {}
        #: The edges each job waits on, and the jobs waiting for each job.
        self._edges: dict[UUID, tuple[Edge, ...]] = {}
        self._dependents: dict[UUID, list[UUID]] = {}
        self._workflows: dict[UUID, WorkflowMembers] = {}
        self._member_of: dict[UUID, UUID] = {}
        if store is not None:
            # So its prune and purge spare the records of jobs still here, and of the
            # jobs that jobs still here wait for.
            store._attach(self._lock, self.keeps_record, self.let_go_of_records)

    def holds(self, job_id: UUID) -> bool:
        """True while `job_id` is ready, parked or in flight (caller holds the lock)."""
        return (
            job_id in self._ready_ids
            or job_id in self._scheduled
            or job_id in self._in_flight
            or job_id in self._waiting
        )

    def keeps_record(self, job_id: UUID) -> bool:
        """True while `job_id`'s record is needed here (caller holds the lock): the job
        is queued, or a queued job depends on it (its release reads the record's
        status, its handler the result)."""
        return self.holds(job_id) or any(self.holds(d) for d in self._dependents.get(job_id, ()))

    def let_go_of_records(self, job_ids: Sequence[UUID], recorded: Callable[[UUID], bool]) -> None:
        """What records deleted from the store (pruned, purged) leave of workflows
        (caller holds the lock): a job in no workflow lets go of its edges at once; a
        workflow keeps its members, edges and names until none of its jobs is queued
        or `recorded`, then all of them go."""
        ended: set[UUID] = set()
        for job_id in job_ids:
            workflow_id = self._member_of.get(job_id)
            if workflow_id is None:
                self._edges.pop(job_id, None)
                self._dependents.pop(job_id, None)
            else:
                ended.add(workflow_id)
        for workflow_id in ended:
            members = self._workflows[workflow_id].names.values()
            if any(self.holds(m) or recorded(m) for m in members):
                continue
            for member in members:
                self._edges.pop(member, None)
                self._dependents.pop(member, None)
                self._member_of.pop(member, None)
            del self._workflows[workflow_id]

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
        self._waiting.pop(job_id, None)
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
            (promotion_key(us(job.run_at), seq), job)
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

    def _held(self, claim: Claim) -> InFlight | None:
        """The in-flight entry `claim` still holds, else None (caller holds the lock)."""
        entry = self._in_flight.get(claim.job.id)
        return entry if entry is not None and entry.token == claim.token else None

    def _find(self, job_id: UUID) -> QueuedJob | None:
        """Where `job_id` is (caller holds the lock)."""
        held = self._in_flight.get(job_id)
        if held is not None:
            job = held.job
            return QueuedJob(str(job_id), job.queue, Place.IN_FLIGHT, job, None, *claimed(held))
        parked = self._scheduled.get(job_id)
        if parked is not None:
            return QueuedJob(str(job_id), parked[1].queue, Place.SCHEDULED, parked[1])
        held_back = self._waiting.get(job_id)
        if held_back is not None:
            return QueuedJob(str(job_id), held_back.queue, Place.WAITING, held_back)
        queue = self._ready_ids.get(job_id)
        for lane in self._ready.get(queue or "", {}).values():
            for _, job in lane:
                if job.id == job_id:
                    return QueuedJob(str(job_id), job.queue, Place.READY, job)
        return None

    def _after_end(self, record: Job) -> None:
        """Settle the jobs waiting for `record`, just ended (caller holds the lock); the
        workflow mixin does it, a queue without one has nothing waiting."""

    def _store_for(self, action: str) -> MemoryJobStore:
        """The store this queue finishes into, or why `action` cannot be done."""
        if self._store is None:
            raise ValueError(f"this MemoryJobQueue was built without a store to {action}")
        return self._store

    def _stored(self, job_id: UUID) -> Job | None:
        """The job with `job_id` as it stands, queued or recorded (caller holds the lock)."""
        queued = self._find(job_id)
        if queued is not None and queued.job is not None:
            return found_in_queue(queued.place, queued.job)
        return None if self._store is None else self._store.get(job_id)

    def _lock_holder(self, job: Job, now: datetime | None = None) -> Job | None:
        """The job holding `job`'s unique key at `now` (default: `job`'s creation), when
        the core says it holds it (caller holds the lock); None when `job` has no key
        or the key is free."""
        lock = job.unique
        held = None if lock is None else self._unique.get(lock.key)
        if held is None:
            return None
        holder = self._stored(held[1])
        at = job.created_at if now is None else now
        if holder is not None and lock_holds(held[0], holder.status, at):
            return holder
        return None

    def _take_lock(self, job: Job) -> None:
        """Give `job`'s unique key (if any) to `job` (caller holds the lock)."""
        if job.unique is not None:
            self._unique[job.unique.key] = (job.unique, job.id)
