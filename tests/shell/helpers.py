"""Shared test helpers: a recording proxy, crash injection, and where-is-my-job."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID, uuid4

from conveyor.core import Job, create_job

T0 = datetime(2026, 1, 1, tzinfo=UTC)
FAR_FUTURE = datetime(2100, 1, 1, tzinfo=UTC)

EFFECTS = {
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


def make_job(job_type: str = "work", now: datetime = T0, **options: Any) -> Job:
    return create_job(id=options.pop("id", uuid4()), job_type=job_type, now=now, **options).unwrap()


class Crash(BaseException):
    """The process 'dies' here. BaseException, so no retry loop swallows it."""


class Recorder:
    """Wraps a queue or store: logs every effectful call in a shared log, and can
    crash before the n-th effect (counted across every wrapped object)."""

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
    """Where the job is now, using only the ports: recorded, in flight, or queued.

    Destructive for the queue (it promotes and drains), so call it last.
    """
    record = store.get(job_id)
    if record is not None and record.status.is_terminal:
        return f"recorded:{record.status.value}"
    if job_id in {c.job.id for c in queue.abandoned(FAR_FUTURE, limit=10_000)}:
        return "in flight"
    queue.promote_due(FAR_FUTURE, limit=10_000)
    for name in list(queue.counts(FAR_FUTURE)):
        while (claim := queue.dequeue(name, FAR_FUTURE)) is not None:
            if claim.job.id == job_id:
                return "queued"
    return "nowhere"


def later(ms: int) -> datetime:
    return T0 + timedelta(milliseconds=ms)


Factory = Callable[[], tuple[Any, Any]]
