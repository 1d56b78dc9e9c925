"""What the cases share: a fixed instant, a job maker, claims that must be claims,
and the crash-injection tools of the write-before-ack cases (a recording proxy that
can make the process "die" before any effect, and where-is-my-job)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID, uuid4

from ...core import Job, PruneOrder, create_job
from ...shell.ports import BadClaim, Claim
from .subject import Subject

#: The instant the cases start at (a manual clock's, far from the host's).
T0 = datetime(2026, 1, 1, tzinfo=UTC)
LATER = T0 + timedelta(seconds=10)
FAR_FUTURE = datetime(2100, 1, 1, tzinfo=UTC)
#: The finest step of a `run_at` every backend keeps.
MICRO = timedelta(microseconds=1)
#: The finest step of a lease every backend keeps (Redis keeps leases in milliseconds).
TICK = timedelta(milliseconds=1)

#: The port methods that change something: the ones a `Recorder` logs and can crash at.
EFFECTS = frozenset(
    {
        "enqueue",
        "ack",
        "extend",
        "replace",
        "reclaim",
        "promote_due",
        "record",
        "purge_dead",
        "finish",
        "finish_many",
        "revive",
        "start_claim",
        "cancel",
        "request_cancel",
        "finish_cancelled",
    }
)


def make_job(job_type: str = "work", now: datetime = T0, **options: Any) -> Job:
    """A valid job (`create_job`'s options), created at `now`, with a fresh id unless
    `id` is given."""
    made = create_job(id=options.pop("id", uuid4()), job_type=job_type, now=now, **options)
    return made.unwrap()


def only_claim(got: Claim | BadClaim | None) -> Claim:
    """`got`, which must be a good claim."""
    assert isinstance(got, Claim), f"expected a claim, got {got!r}"
    return got


def claim(s: Subject, now: datetime = T0, queue: str = "default") -> Claim:
    """Claim the best job of `queue` at `now`, which must be there."""
    return only_claim(s.queue.dequeue(queue, now))


def claims(got: Any) -> list[Claim]:
    """A batch that must hold good claims only."""
    batch = list(got)
    assert all(isinstance(c, Claim) for c in batch), batch
    return batch


def drain_ids(s: Subject, queue: str = "default", now: datetime = T0) -> list[UUID]:
    """Claim and ack every ready job of `queue`: their ids, in claim order."""
    ids = []
    while (got := s.queue.dequeue(queue, now)) is not None:
        ids.append(only_claim(got).job.id)
        assert s.queue.ack(got)
    return ids


def in_flight(s: Subject, queue: str = "default", now: datetime = T0) -> int:
    """How many claims of `queue` are held (0 when the queue has no figures)."""
    counts = s.queue.counts(now).get(queue)
    return 0 if counts is None else int(counts.in_flight)


class Crash(BaseException):
    """The process "dies" here. A BaseException, so no retry loop swallows it."""


class Recorder:
    """Wraps a queue or a store: logs every effect (`EFFECTS`) as `name.method` in a
    shared `log`, and raises `Crash` instead of the effect whose number (counted
    across every wrapped object sharing `crash`) is `crash["at"]`: the process then
    stops between two steps, after `crash["at"] - 1` of them."""

    def __init__(self, inner: Any, name: str, log: list[str], crash: dict[str, int]) -> None:
        self._inner, self._name, self._log, self._crash = inner, name, log, crash

    def __getattr__(self, attr: str) -> Any:
        target = getattr(self._inner, attr)
        if attr not in EFFECTS:
            return target

        def call(*args: Any, **kwargs: Any) -> Any:
            self._crash["seen"] = self._crash.get("seen", 0) + 1
            if self._crash.get("at") == self._crash["seen"]:
                raise Crash(f"{self._name}.{attr}")
            self._log.append(f"{self._name}.{attr}")
            return target(*args, **kwargs)

        return call


def locate(queue: Any, store: Any, job_id: UUID) -> str:
    """Where the job is now, using only the ports: `recorded:<status>`, `in flight`,
    `queued` (ready or parked), or `nowhere` (lost).

    Destructive for the queue (it promotes and drains), so call it last.
    """
    record = store.get(job_id)
    if record is not None and record.status.is_terminal:
        return f"recorded:{record.status.value}"
    if str(job_id) in {_id_of(c) for c in queue.abandoned(FAR_FUTURE, limit=10_000)}:
        return "in flight"
    queue.promote_due(FAR_FUTURE, limit=10_000)
    for name in list(queue.counts(FAR_FUTURE)):
        while (got := queue.dequeue(name, FAR_FUTURE)) is not None:
            if _id_of(got) == str(job_id):
                return "queued"
    return "nowhere"


def _id_of(got: Claim | BadClaim) -> str:
    return got.job_id if isinstance(got, BadClaim) else str(got.job.id)


def later(ms: int) -> datetime:
    """`ms` milliseconds after `T0`."""
    return T0 + timedelta(milliseconds=ms)


Factory = Callable[[], Subject]


def queued(s: Subject, now: datetime = T0) -> int:
    """How many jobs the queue holds in all: ready, parked and in flight."""
    return sum(c.ready + c.scheduled + c.in_flight for c in s.queue.counts(now).values())


def prune_order(
    *,
    completed_before: datetime | None = None,
    dead_before: datetime | None = None,
    limit: int = 10,
) -> PruneOrder:
    """A prune by age only (no count rules): finished records older than the cutoffs."""
    return PruneOrder(
        completed_before=completed_before,
        dead_before=dead_before,
        keep_completed=None,
        keep_dead=None,
        limit=limit,
    )

