"""The warnings an enqueue gives once per process: a job on a queue no pool of this
config polls, and a job type no configured handler module registers (likely
misspelt, it would wait for a worker that has it and then be dead-lettered)."""

from __future__ import annotations

import difflib
import logging
from collections.abc import Iterable, Sequence

from ...core.cron import CronEntry
from ..registry import Registry

log = logging.getLogger("conveyor.runtime")


def unknown_job_type(registry: Registry, job_type: str) -> str | None:
    """Why `job_type` looks misspelt (no handler module configured here registers it,
    though some are configured), with the closest registered types; None when it is
    registered, or when this node loads no handlers and so cannot tell."""
    known = registry.job_types()
    if not known or job_type in known:
        return None
    close = difflib.get_close_matches(job_type, sorted(known), n=3)
    hint = f"; did you mean {' or '.join(map(repr, close))}?" if close else ""
    return (
        f"no configured handler module registers job type {job_type!r}{hint} "
        "(it would wait for a worker that has it, then be dead-lettered as no-handler)"
    )


class EnqueueWarnings:
    """The warnings an enqueue gives once per process: for each queue no pool polls,
    and for each job type no configured handler module registers."""

    def __init__(self) -> None:
        self._queues: set[str] = set()
        self._types: set[str] = set()

    def unknown_type(self, registry: Registry, job_type: str) -> None:
        if job_type in self._types:
            return
        reason = unknown_job_type(registry, job_type)
        if reason is not None:
            self._types.add(job_type)
            log.warning("%s", reason)
        elif registry.registration(job_type) is not None:
            # Registered here, so never misspelt: the next enqueue need not ask again.
            self._types.add(job_type)

    def unpolled(self, queue: str, polled: Sequence[str]) -> None:
        if queue in polled or queue in self._queues:
            return
        self._queues.add(queue)
        log.warning(
            "job enqueued on queue %r, which no worker pool is configured to poll "
            "(workers.queues = %s). It will wait there until a worker polls it: "
            "add %r to workers.queues.",
            queue,
            list(polled),
            queue,
        )


def warn_of_config_types(
    registry: Registry, timeouts_ms: Iterable[tuple[str, int]], cron: Iterable[CronEntry]
) -> None:
    """One WARNING, as a worker starts, for each job type a `[timeouts_ms]` key or a
    `[[cron]]` entry names that no configured handler module registers: a timeout that
    would apply to nothing, a slot whose job no worker would run."""
    for job_type, _ in timeouts_ms:
        reason = unknown_job_type(registry, job_type)
        if reason is not None:
            log.warning("timeouts_ms.%s: %s", job_type, reason)
    for entry in cron:
        reason = unknown_job_type(registry, entry.job_type)
        if reason is not None:
            log.warning("cron entry %r: %s", entry.name, reason)


def warn_of_unpolled_limits(limited: Iterable[str], polled: Sequence[str]) -> None:
    """One WARNING, as a worker starts, for each queue `[limits.<queue>]` names that no
    pool polls: a misspelt name leaves the queue it meant unlimited, unseen."""
    for queue in limited:
        if queue in polled:
            continue
        close = difflib.get_close_matches(queue, list(polled), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        log.warning(
            "limits.%s: no worker pool polls queue %r (workers.queues = %s), so these "
            "limits apply to nothing here%s",
            queue,
            queue,
            list(polled),
            hint,
        )
