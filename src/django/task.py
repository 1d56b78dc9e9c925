"""`ConveyorTask`: Django's `Task` with Conveyor's options beyond Django's.

The backend's `task_class`, so `@task(...)` takes them where Django passes extra
keyword arguments to it (Django 6.1, and the backport):

    @task(retries=3, timeout=30, unique_key="nightly-report", partition="tenant-7")
    def nightly_report(): ...

    nightly_report.using(priority=10, retries=0).enqueue()

Each option left as None takes the backend's `OPTIONS` default (`RETRIES`,
`TIMEOUT`); `unique_key` and `partition` mean what they mean for `runtime.enqueue`
(docs/unique.md, docs/limits.md).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from .compat import Task

#: Conveyor's options a task may carry.
TASK_OPTIONS = ("retries", "timeout", "unique_key", "partition")


@dataclass(frozen=True, slots=True, kw_only=True)
class ConveyorTask(Task):  # type: ignore[misc]
    """A Django task with Conveyor's retries, timeout, unique key and partition."""

    #: Retries after a failed attempt before the task is FAILED (None: `RETRIES`).
    retries: int | None = None
    #: Seconds one attempt may run (None: `TIMEOUT`, else no limit).
    timeout: float | None = None
    #: While a job holding this key waits or runs, enqueueing returns that job instead.
    unique_key: str | None = None
    #: The partition for the queue's fair shares, caps and rates.
    partition: str | None = None

    def using(self, **changes: Any) -> ConveyorTask:
        """Django's `using` (priority, queue_name, run_after, backend), and Conveyor's
        options too; as in Django's, an option given as None is left as it was."""
        given = {k: changes.pop(k) for k in TASK_OPTIONS if k in changes}
        ours = {k: v for k, v in given.items() if v is not None}
        # Zero-argument super() does not work in a slotted dataclass.
        changed: ConveyorTask = Task.using(self, **changes)
        return replace(changed, **ours) if ours else changed


def task_options(task: Any) -> dict[str, Any]:
    """The Conveyor options a task carries (none for Django's own `Task`)."""
    return {name: getattr(task, name, None) for name in TASK_OPTIONS}
